"""Incremental fetch sessions (KIP-227), with the semantics of Kafka's FetchSession.scala.

A consumer fetching many partitions would otherwise send, and get back, every partition in every Fetch. A
session remembers a client's partitions (their fetch offsets and limits) and what it was last told of each
(high watermark, last stable offset, log start offset), so an incremental request names only partitions
that changed and its answer lists only partitions with something new. The request's (session_id,
session_epoch) pick one of four cases:

- epoch -1 (FINAL): a sessionless full fetch; a non-zero id closes that session first (unknown ids are fine).
- epoch 0 (INITIAL): a full fetch; a non-zero id closes that session first, and a new session is created
  when the cache has a free slot or may evict one; its id is answered (0 when none could be created).
- epoch > 0 (incremental): the session must exist (FETCH_SESSION_ID_NOT_FOUND) and expect this epoch
  (INVALID_FETCH_SESSION_EPOCH); the request's partitions are added or updated, `forgotten_topics_data`
  removed, and a session left empty is closed (the fetch then is sessionless).
- any other epoch goes the incremental way, and fails there as Kafka's does.

A session made by a Fetch v13+ (topics named by id, KIP-516) is keyed by name like any other, each
partition remembering the topic id it was asked under (the handler resolves ids to names first, and
answers UNKNOWN_TOPIC_ID where the id is unknown or no longer the topic's). An incremental request that
switches between ids and names gets FETCH_SESSION_TOPIC_ID_ERROR, as from Kafka.

The cache follows Kafka's: `max_incremental_fetch_session_cache_slots` split over 8 shards that new
sessions are dealt to in turn (a shard holds slots // 8, so fewer than 8 slots means no sessions at all),
eviction only within a shard. A full shard evicts its least recently used session once that one is idle
over 120 s; otherwise the "cheapest" evictable session (followers' sessions rank above consumers', then
more partitions above fewer), and only by a new session that ranks at least as high. A session becomes
evictable by everyone only once it is 120 s old (at its last use), a consumer's is evictable by a follower's
at once. So a hostile client opening thousands of sessions fills the slots and then gets session id 0,
without displacing busy sessions younger than two minutes. Unlike Kafka, the partitions of all sessions
together are bounded too (1,000 per slot): a session that would pass the bound is not created, or is closed.

Sessions live in memory only, as in Kafka: after a restart an incremental fetch gets
FETCH_SESSION_ID_NOT_FOUND and the client starts over with a full fetch.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from logbroker.protocol import ErrorCode as E

INVALID_SESSION_ID = 0
TOPIC_IDS_FROM = 13  # Fetch versions that name topics by id
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
EVICTION_MS = 120_000  # Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS
SHARDS = 8  # Kafka's NumFetchSessionCacheShards
_ID_RANGE = 0x7FFFFFFF // SHARDS

PartitionKey = tuple[str, int]


def next_epoch(epoch: int) -> int:
    """The epoch after `epoch`: FINAL stays FINAL, and the largest int32 wraps to 1 (never back to INITIAL)."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == 0x7FFFFFFF else epoch + 1


class CachedPartition:
    """One partition of a session: the client's last request for it and what the client was last told.

    It has the attribute names of a request's FetchPartition, so the fetch path reads it like one."""

    __slots__ = (
        "current_leader_epoch", "fetch_offset", "hwm", "log_start", "lso", "partition", "partition_max_bytes",
        "topic_id",
    )  # fmt: skip

    def __init__(self, partition: int, req: Any, topic_id: Any = None) -> None:
        self.partition = partition
        self.update(req, topic_id)
        self.hwm = self.lso = self.log_start = -1

    def update(self, req: Any, topic_id: Any = None) -> None:
        self.topic_id = topic_id  # the id a v13+ request named the topic by (None below v13)
        self.fetch_offset = req.fetch_offset
        self.partition_max_bytes = req.partition_max_bytes
        self.current_leader_epoch = getattr(req, "current_leader_epoch", -1)

    def must_answer(self, pd: Any) -> bool:
        """Whether an incremental answer lists this partition, remembering what it says (Kafka's
        maybeUpdateResponseData: records, an error, a changed high watermark or log start offset; the last
        stable offset too, which moves only with a marker, and so with the high watermark, here)."""
        changed = bool(pd.records) or pd.error_code != 0
        if pd.high_watermark != self.hwm:
            self.hwm, changed = pd.high_watermark, True
        if pd.log_start_offset != self.log_start:
            self.log_start, changed = pd.log_start_offset, True
        if pd.last_stable_offset != self.lso:
            self.lso, changed = pd.last_stable_offset, True
        if pd.error_code != 0:
            self.hwm = -1  # as Kafka: the partition is answered again until its error clears
        return changed


@dataclass(eq=False)
class FetchSession:
    id: int
    privileged: bool  # a follower's (replica_id >= 0): ranks above every consumer session for eviction
    partitions: dict[PartitionKey, CachedPartition]
    created_ms: float
    last_used_ms: float
    epoch: int = 1
    shard: int = 0
    uses_ids: bool = False  # made by a Fetch v13+: its requests name topics by id
    cached_size: int = -1  # the size at the last touch: the eviction rank and the partitions gauge use it
    evictable_by_all: bool = False
    evictable_by_privileged: bool = False
    # The long poll: the partitions this session is registered under in the cache's `watchers` (kept
    # across fetches, redone only when its partitions change), and the futures of its fetches waiting now.
    watched: frozenset[PartitionKey] = frozenset()
    watch_stale: bool = True
    waiters: list[asyncio.Future[None]] = field(default_factory=list)

    def rank(self) -> tuple[bool, int, int]:
        return (self.privileged, self.cached_size, self.id)


@dataclass
class _Shard:
    slots: int
    sessions: dict[int, FetchSession] = field(default_factory=dict)  # in last-used order: the first is the LRU


class FetchSessionCache:
    """The broker-wide sessions (any connection may use any session id), bounded by the slots."""

    def __init__(self, slots: int, eviction_ms: float = EVICTION_MS, clock: Callable[[], float] | None = None):
        self._shards = [_Shard(slots // SHARDS) for _ in range(SHARDS)]
        self._next_shard = 0
        self.eviction_ms = eviction_ms
        self._clock = clock or (lambda: time.monotonic() * 1000)
        # Kafka bounds the sessions, not their partitions: one request can name millions (a 100 MB frame),
        # and keep them for as long as its session lives. Here all sessions together hold at most this many,
        # 1,000 per slot (a consumer of 1,000 partitions in every slot; about 240 MB at the default).
        self.partition_limit = max(slots, 1) * 1000
        self.partitions = 0  # Kafka's NumIncrementalFetchPartitionsCached
        self.evictions = 0  # Kafka's IncrementalFetchSessionEvictionsPerSec, as a counter
        self.incremental_fetches = 0  # incremental requests served (no Kafka metric; proves clients use sessions)
        self.created = 0
        # partition -> the sessions that hold it, for long polls: an incremental fetch of 1,000 partitions
        # waits by putting one future on its session, not on 1,000 partitions (then taking it off them).
        self.watchers: dict[PartitionKey, set[FetchSession]] = {}

    def __len__(self) -> int:  # Kafka's NumIncrementalFetchSessions
        return sum(len(s.sessions) for s in self._shards)

    def sessions(self) -> Iterator[FetchSession]:
        for shard in self._shards:
            yield from shard.sessions.values()

    def get(self, session_id: int) -> FetchSession | None:
        # Kafka's shard is id // range, which is past its 8 shards for ids >= 2147483640 or <= -268435455: it
        # answers those UNKNOWN_SERVER_ERROR (an IndexOutOfBounds). No session has such an id: not found here.
        shard = min(abs(session_id) // _ID_RANGE, SHARDS - 1)
        return self._shards[shard].sessions.get(session_id)

    def remove(self, session: FetchSession) -> None:
        if self._shards[session.shard].sessions.pop(session.id, None) is not None:
            self.partitions -= max(session.cached_size, 0)
        self._unwatch(session, session.watched)
        session.watched = frozenset()
        session.watch_stale = True
        for fut in session.waiters:  # a fetch waiting on a closed or evicted session answers now
            if not fut.done():
                fut.set_result(None)

    # ------------------------------------------------------------------ long polls

    def watch(self, session: FetchSession) -> asyncio.Future[None] | None:
        """A future for one long poll of `session`, set when any of its partitions gets data (`wake`), or when
        the session goes; None when it is gone already. Registration follows the session's partitions, redone
        only after they changed."""
        if self._shards[session.shard].sessions.get(session.id) is not session:
            return None
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if session.watch_stale:
            now = frozenset(session.partitions)
            self._unwatch(session, session.watched - now)
            for key in now - session.watched:
                self.watchers.setdefault(key, set()).add(session)
            session.watched, session.watch_stale = now, False
        session.waiters.append(fut)
        return fut

    def unwait(self, session: FetchSession, fut: asyncio.Future[None]) -> None:
        with contextlib.suppress(ValueError):
            session.waiters.remove(fut)

    def wake(self, key: PartitionKey) -> None:
        for session in self.watchers.get(key, ()):
            for fut in session.waiters:
                if not fut.done():
                    fut.set_result(None)

    def wake_all(self) -> None:
        for session in self.sessions():
            for fut in session.waiters:
                if not fut.done():
                    fut.set_result(None)

    def _unwatch(self, session: FetchSession, keys: Iterable[PartitionKey]) -> None:
        for key in keys:
            held = self.watchers.get(key)
            if held is not None:
                held.discard(session)
                if not held:
                    del self.watchers[key]

    def create(self, privileged: bool, partitions: dict[PartitionKey, CachedPartition], uses_ids: bool = False) -> int:
        """A new session for these partitions, or INVALID_SESSION_ID when its shard is full and nothing may go."""
        n = self._next_shard
        self._next_shard = (n + 1) % SHARDS
        shard = self._shards[n]
        now = self._clock()
        if self.partitions + len(partitions) > self.partition_limit:
            return INVALID_SESSION_ID
        if len(shard.sessions) >= shard.slots and not self._evict(shard, privileged, len(partitions), now):
            return INVALID_SESSION_ID
        session = FetchSession(self._new_id(n, shard), privileged, partitions, now, now, shard=n, uses_ids=uses_ids)
        shard.sessions[session.id] = session
        self.touch(session, now)
        self.created += 1
        return session.id

    def touch(self, session: FetchSession, now: float | None = None) -> None:
        """A use of the session: it becomes the most recently used, and its eviction rank is renewed."""
        now = self._clock() if now is None else now
        sessions = self._shards[session.shard].sessions
        if sessions.pop(session.id, None) is None:
            return  # evicted or closed meanwhile
        sessions[session.id] = session
        session.last_used_ms = now
        self.partitions += len(session.partitions) - max(session.cached_size, 0)
        session.cached_size = len(session.partitions)
        old = now - session.created_ms > self.eviction_ms
        session.evictable_by_all = old
        session.evictable_by_privileged = old or not session.privileged

    def _evict(self, shard: _Shard, privileged: bool, size: int, now: float) -> bool:
        if not shard.sessions:
            return False
        lru = next(iter(shard.sessions.values()))
        if now - lru.last_used_ms > self.eviction_ms:
            victim: FetchSession | None = lru
        else:
            pool = (
                s for s in shard.sessions.values() if (s.evictable_by_privileged if privileged else s.evictable_by_all)
            )
            victim = min(pool, key=FetchSession.rank, default=None)
            if victim is not None and (privileged, size, 0) < victim.rank():
                victim = None
        if victim is None:
            return False
        self.remove(victim)
        self.evictions += 1
        return True

    def _new_id(self, n: int, shard: _Shard) -> int:
        while True:
            sid = random.randrange(max(1, n * _ID_RANGE), (n + 1) * _ID_RANGE)
            if sid not in shard.sessions:
                return sid

    # ------------------------------------------------------------------ one request

    def context(self, version: int, body: Any, privileged: bool) -> FetchContext:
        """What a Fetch request means for sessions, decided before it reads anything (Kafka's newContext)."""
        sid = body.session_id if version >= 7 else INVALID_SESSION_ID
        epoch = body.session_epoch if version >= 7 else FINAL_EPOCH
        uses_ids = version >= TOPIC_IDS_FROM
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if sid != INVALID_SESSION_ID and (old := self.get(sid)) is not None:
                self.remove(old)
            return FetchContext(self, body.topics, epoch, privileged=privileged, uses_ids=uses_ids)
        session = self.get(sid)
        if session is None:
            return FetchContext(self, [], epoch, error=E.FETCH_SESSION_ID_NOT_FOUND)
        if session.uses_ids != uses_ids:
            return FetchContext(self, [], epoch, error=E.FETCH_SESSION_TOPIC_ID_ERROR)
        if session.epoch != epoch:
            return FetchContext(self, [], epoch, error=E.INVALID_FETCH_SESSION_EPOCH)
        parts = session.partitions
        size = len(parts)
        for t in body.topics:
            tid = t.topic_id if uses_ids else None
            for p in t.partitions:
                cached = parts.get((t.topic, p.partition))
                if cached is None:
                    parts[(t.topic, p.partition)] = CachedPartition(p.partition, p, tid)
                else:
                    cached.update(p, tid)
        for f in body.forgotten_topics_data or ():
            for i in f.partitions:
                if parts.pop((f.topic, i), None) is not None:
                    size = -1
        if len(parts) != size:
            session.watch_stale = True
        if not parts:
            self.remove(session)
            return FetchContext(self, body.topics, FINAL_EPOCH)
        if self.partitions + len(parts) - max(session.cached_size, 0) > self.partition_limit:
            # Grown past the cache's partition bound: closed, answered in full without a session (the
            # client then asks for a new one, as after any session id 0).
            self.remove(session)
            return FetchContext(self, list(_runs(parts)), FINAL_EPOCH)
        self.touch(session)
        session.epoch = next_epoch(session.epoch)
        self.incremental_fetches += 1
        return FetchContext(self, list(_runs(parts)), epoch, session=session)


class _Topic:
    """A run of one topic's session partitions, shaped like a request's FetchTopic."""

    __slots__ = ("partitions", "topic", "topic_id")

    def __init__(self, topic: str, partitions: list[CachedPartition], topic_id: Any = None) -> None:
        self.topic = topic
        self.partitions = partitions
        self.topic_id = topic_id


def _runs(parts: dict[PartitionKey, CachedPartition]) -> Iterator[_Topic]:
    """Session partitions in order, consecutive ones of a topic together (as Kafka's response groups them)."""
    current: _Topic | None = None
    for (topic, _), cp in parts.items():
        if current is None or current.topic != topic or current.topic_id != cp.topic_id:
            if current is not None:
                yield current
            current = _Topic(topic, [], cp.topic_id)
        current.partitions.append(cp)
    if current is not None:
        yield current


class FetchContext:
    """One Fetch request's view of sessions: which partitions to read, and how to answer."""

    def __init__(
        self,
        cache: FetchSessionCache,
        topics: Iterable[Any],
        epoch: int,
        *,
        error: int = 0,
        session: FetchSession | None = None,
        privileged: bool = False,
        uses_ids: bool = False,
    ) -> None:
        self.cache = cache
        self.topics = topics  # what to read: the request's topics, or the session's partitions
        self.epoch = epoch  # the request's
        self.error = error  # a session error: answered at once, no partitions
        self.session = session  # an incremental fetch's session
        self.privileged = privileged
        self.uses_ids = uses_ids
        self.quiet: list[PartitionKey] = []  # session partitions left out of this round's read

    def reading(self, get_log: Callable[[str, int], Any], denied: frozenset[str] | bool | None) -> Iterable[Any]:
        """The partitions to read this round. An incremental fetch skips those with nothing to tell: at the
        client's position, which is the log end, and log end, log start and last stable offset as last
        answered (the read would find no records, and the answer would leave them out). `quiet` lists them,
        for the long poll to wait on too. Reading every one of 1,000 idle partitions is most of the cost
        of an incremental fetch otherwise (Kafka reads them all)."""
        self.quiet = []
        if self.session is None:
            return self.topics
        out = []
        for t in self.topics:
            if denied is True or (denied and t.topic in denied):
                out.append(t)  # answered with the error, every time
                continue
            busy = []
            for cp in t.partitions:
                plog = get_log(t.topic, cp.partition)
                if (
                    plog is not None
                    and cp.fetch_offset == cp.hwm == plog.next_offset
                    and cp.current_leader_epoch <= 0
                    and cp.log_start == plog.log_start_offset
                    and cp.lso == plog.last_stable_offset
                ):
                    self.quiet.append((t.topic, cp.partition))
                else:
                    busy.append(cp)
            if busy:
                out.append(_Topic(t.topic, busy, t.topic_id))
        return out

    def answer(self, responses: list[Any]) -> tuple[int, int, list[Any]]:
        """(error, session id, topics) of the answer, given every partition's data (Kafka's
        updateAndGenerateResponseData): a full fetch at INITIAL creates the session here, an incremental one
        keeps only partitions with news and moves those that returned records to the back of the session
        (the next fetches read the others first, for fairness under max_bytes)."""
        if self.error:
            return self.error, INVALID_SESSION_ID, []
        session = self.session
        if session is None:
            if self.epoch != INITIAL_EPOCH:
                return 0, INVALID_SESSION_ID, responses
            cached = _cache_of(self.topics, responses, self.uses_ids)
            created = self.cache.create(self.privileged, cached, self.uses_ids)
            return 0, created, responses
        if session.epoch != next_epoch(self.epoch):  # another request used the session meanwhile
            return E.INVALID_FETCH_SESSION_EPOCH, session.id, []
        parts = session.partitions
        kept = []
        for t in responses:
            news = []
            for pd in t.partitions:
                key = (t.topic, pd.partition_index)
                cached = parts.get(key)
                if cached is not None and cached.must_answer(pd):
                    news.append(pd)
                    if pd.records:
                        parts[key] = parts.pop(key)
            if news:
                t.partitions = news
                kept.append(t)
        return 0, session.id, kept


def _cache_of(topics: Iterable[Any], responses: list[Any], uses_ids: bool) -> dict[PartitionKey, CachedPartition]:
    """A new session's partitions, from the request and what its full answer told the client."""
    parts: dict[PartitionKey, CachedPartition] = {}
    for t in topics:
        tid = t.topic_id if uses_ids else None
        for p in t.partitions:
            parts[(t.topic, p.partition)] = CachedPartition(p.partition, p, tid)
    for t in responses:
        for pd in t.partitions:
            cached = parts.get((t.topic, pd.partition_index))
            if cached is not None:
                cached.must_answer(pd)
    return parts
