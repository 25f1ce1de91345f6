"""Fetch (1): whole stored batches from each partition, honouring max_bytes and partition_max_bytes,
with a long poll on max_wait_ms/min_bytes (over every partition read, a session's included).

Fetch sessions (KIP-227, v7+) are `..fetch_sessions`' concern: it decides before reading which partitions a
request means (the request's own, or its session's), and after reading which of them the answer lists and
under what session id. This handler only reads partitions and waits.

read_committed (isolation level 1) reads stop at the last stable offset, and the answer lists the aborted
transactions overlapping what it returns: the consumer drops those producers' records up to each abort
marker. read_uncommitted gets everything, aborted records included, as from Kafka.

With an authorizer a consumer needs READ on each topic (TOPIC_AUTHORIZATION_FAILED per partition otherwise);
a fetch with a replica id is a follower's, which Kafka answers only with CLUSTER_ACTION on the cluster (every
partition TOPIC_AUTHORIZATION_FAILED without it).

v13+ name topics by id (KIP-516): ids are resolved to names before anything else, and a partition whose
id is unknown is answered UNKNOWN_TOPIC_ID, as Kafka does (a zero id fails the whole request there).
v14-18 add only what followers and KRaft voters use (tiered storage, replica state, directory ids, high
watermarks) and change nothing for a consumer; v15+ carry the replica id in ReplicaState.

v0-v3 come from clients older than Kafka 0.11, which read message formats 0 (v0-v1) and 1 (v2-v3): what is
read is converted (`protocol/legacy.py`: headers dropped, offsets and format-1 timestamps kept, control
batches left out) unless the topic's message.downconversion.enable is false (UNSUPPORTED_VERSION), as
Kafka 3.x does. They have no isolation level, so aborted records reach them, as from Kafka 3.x. The first
batch of an answer is sent whole even past partition_max_bytes, where Kafka 3.x cuts v0-v2 answers at
that size and a too-large first batch leaves the client stuck."""

from __future__ import annotations

import itertools
import logging
import time
import uuid
from collections.abc import Coroutine, Iterable
from typing import Any

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E
from logbroker.protocol.legacy import down_convert
from logbroker.protocol.records import InvalidBatch, last_offset_of

from ..auth.acls import CLUSTER_NAME, AclOperation, ResourceType
from ..context import BrokerContext
from ..dispatch import handles
from ..fetch_sessions import TOPIC_IDS_FROM
from ..seams import FileRange, OffsetOutOfRange

log = logging.getLogger(__name__)
API = api(ApiKey.Fetch)
R = API.response
TR = R.FetchableTopicResponse
PD = TR.PartitionData
AT = PD.AbortedTransaction
LAST_LEGACY_VERSION = 3  # Fetch v0-v1 read message format 0, v2-v3 format 1


@handles(ApiKey.Fetch, 0, 18, kafka4_min=4, kafka4_advertises=True, exclusive=True)
def handle(ctx: BrokerContext, req: Request) -> R | Coroutine[Any, Any, R]:
    """The answer at once when the first read satisfies it (a consumer catching up: no task, answered in the
    loop turn its request arrived in), else the long poll, a coroutine the connection runs as a task."""
    body = req.body
    deadline = time.monotonic() + max(body.max_wait_ms, 0) / 1000
    if req.version >= TOPIC_IDS_FROM:
        if any(t.topic_id is None or not t.topic_id.int for t in body.topics):
            # Kafka fails such a request as a whole (measured on 4.4: no topics, UNKNOWN_SERVER_ERROR).
            ctx.metrics.errors(ApiKey.Fetch, [E.UNKNOWN_SERVER_ERROR])
            return R(throttle_time_ms=0, error_code=E.UNKNOWN_SERVER_ERROR, session_id=0, responses=[])
        _resolve_ids(ctx, body)
    session = ctx.polls.sessions.context(req.version, body, privileged=replica_id(req) >= 0)
    if session.error:  # FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH: answered at once
        ctx.metrics.errors(ApiKey.Fetch, [session.error])
        return R(throttle_time_ms=0, error_code=session.error, session_id=0, responses=[])
    denied = None if ctx.access.authorizer is None else _denied(ctx, req, session.topics)
    answer, watched = _round(ctx, req, session, denied, deadline)
    if answer is not None:
        return answer
    return _long_poll(ctx, req, session, denied, deadline, watched)


async def _long_poll(
    ctx: BrokerContext, req: Request, session: Any, denied: frozenset[str] | bool | None, deadline: float,
    watched: list[tuple[str, int]],
) -> R:  # fmt: skip
    """Wait for data on the watched partitions (or the deadline), then read again, until an answer is due."""
    while True:
        remaining = deadline - time.monotonic()
        waited = time.monotonic()
        if session.session is not None:  # every partition of the session: `watched` is all of them
            await ctx.polls.wait_for_session_data(session.session, watched, remaining)
        else:
            await ctx.polls.wait_for_data(watched, remaining)
        ctx.metrics.waited(time.monotonic() - waited)  # the long poll: Kafka's RemoteTimeMs
        answer, watched = _round(ctx, req, session, denied, deadline)
        if answer is not None:
            return answer


def _round(
    ctx: BrokerContext, req: Request, session: Any, denied: frozenset[str] | bool | None, deadline: float
) -> tuple[R | None, list[tuple[str, int]]]:
    """One read of every partition: the answer when it is due (min_bytes reached, the deadline passed,
    nothing to watch, the broker stopping), else None and the partitions the long poll watches."""
    body = req.body
    lent: list[bytearray] = []
    ranges: list[FileRange] = []
    sent: list[tuple[str, int]] = []  # (topic, bytes) and error codes of this round, for the metrics
    errors: list[int] = []
    reading = session.reading(ctx.topics.log, denied)
    resp, total, keys = _collect(ctx, body, req.version, lent, denied, sent, errors, reading, ranges)
    watched = keys + session.quiet if session.quiet else keys  # the long poll watches a whole session
    if total >= max(body.min_bytes, 1) or deadline <= time.monotonic() or not watched or ctx.polls.stopping:
        resp.error_code, resp.session_id, resp.responses = session.answer(resp.responses)
        req.response_size_hint = total + 64 * len(keys)  # one response buffer, never regrown
        req.lent.extend((ctx.read_buffers, buf) for buf in lent)  # back to the pool once encoded
        req.spliced = bool(ranges)  # sent from the files, then closed, by the connection
        ctx.metrics.fetched(sent)
        if errors:
            ctx.metrics.errors(ApiKey.Fetch, errors)
        return resp, watched
    del resp
    for buf in lent:  # this round's answer is dropped: its read buffers are free again
        ctx.read_buffers.give(buf)
    for rng in ranges:
        rng.close()
    return None, watched


def replica_id(req: Request) -> int:
    """The fetching replica's id (-1: a consumer); v15+ carry it in the tagged ReplicaState (KIP-903)."""
    if req.version < 15:
        return int(req.body.replica_id)
    state = req.body.replica_state
    return -1 if state is None else int(state.replica_id)


def _unknown_id(topic_id: uuid.UUID | None) -> str:
    """The name a topic id that names no topic goes by in this request and its session: not a legal topic
    name, so it never finds a log."""
    return f"?{topic_id}"


def _resolve_ids(ctx: BrokerContext, body: Any) -> None:
    """Names for the topic ids of a v13+ request (its topics and its forgotten topics)."""
    for t in itertools.chain(body.topics, body.forgotten_topics_data or ()):
        meta = ctx.topics.by_id(t.topic_id)
        t.topic = meta.name if meta is not None else _unknown_id(t.topic_id)


def _id_error(ctx: BrokerContext, t: Any) -> int:
    """A v13+ topic's error before any read, as Kafka's: UNKNOWN_TOPIC_ID for an id that named no topic
    when the request (or its session) resolved it; INCONSISTENT_TOPIC_ID when a session's topic was
    re-created under another id. A session's topic deleted since is the read's UNKNOWN_TOPIC_OR_PARTITION."""
    if t.topic.startswith("?"):
        return E.UNKNOWN_TOPIC_ID
    meta = ctx.topics.get(t.topic)
    if meta is not None and meta.topic_id != str(t.topic_id):
        return E.INCONSISTENT_TOPIC_ID
    return E.NONE


def _denied(ctx: BrokerContext, req: Request, topics: Iterable[Any]) -> frozenset[str] | bool:
    """The topics this fetch may not read, or True when it may read none (Kafka's handleFetchRequest)."""
    if replica_id(req) >= 0:
        return not ctx.access.authorize(req, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)
    names = {t.topic for t in topics if not t.topic.startswith("?")}  # unknown ids are answered as such first
    return frozenset(names - ctx.access.authorize_names(req, AclOperation.READ, ResourceType.TOPIC, names))


def _collect(
    ctx: BrokerContext,
    body: Any,
    version: int,
    lent: list[bytearray],
    denied: frozenset[str] | bool | None = None,
    sent: list[tuple[str, int]] | None = None,
    errors: list[int] | None = None,
    fetching: Iterable[Any] | None = None,
    ranges: list[FileRange] | None = None,
) -> tuple[R, int, list[tuple[str, int]]]:
    """The answer of one round; with `ranges`, large reads are file ranges (appended there) for the
    connection to send with sendfile."""
    sent = [] if sent is None else sent
    errors = [] if errors is None else errors
    # Kafka caps every answer at the broker's fetch.max.bytes (still returning a first batch whole).
    limit = min(body.max_bytes if version >= 3 and body.max_bytes > 0 else 0x7FFFFFFF, ctx.settings.fetch_max_bytes)
    total = 0
    keys: list[tuple[str, int]] = []
    topics = []
    committed = version >= 4 and body.isolation_level == 1
    zero_copy = ctx.settings.fetch_zero_copy_bytes  # see docs/design.md, "The produce and fetch paths"
    legacy_magic = 0 if version <= 1 else 1 if version <= LAST_LEGACY_VERSION else None
    if legacy_magic is not None:
        zero_copy = 0  # converted in memory
    consumer = legacy_magic is not None and body.replica_id < 0
    by_id = version >= TOPIC_IDS_FROM
    for t in body.topics if fetching is None else fetching:  # a session's partitions, or the request's
        if by_id and (id_error := _id_error(ctx, t)):
            errors.extend([id_error] * len(t.partitions))
            topics.append(TR(topic=t.topic, topic_id=t.topic_id,
                             partitions=[_pd(p.partition, id_error) for p in t.partitions]))  # fmt: skip
            continue
        tid = t.topic_id if by_id else None
        if denied and (denied is True or t.topic in denied):
            errors.extend([E.TOPIC_AUTHORIZATION_FAILED] * len(t.partitions))
            refused = [_pd(p.partition, E.TOPIC_AUTHORIZATION_FAILED) for p in t.partitions]
            topics.append(TR(topic=t.topic, topic_id=tid, partitions=refused))
            continue
        parts = []
        before = total
        for p in t.partitions:
            plog = ctx.topics.log(t.topic, p.partition)
            if plog is None:
                # A topic on disk that cannot be served answers as Kafka does for a partition on a failed
                # log directory.
                missing = E.KAFKA_STORAGE_ERROR if ctx.topics.unavailable(t.topic) else E.UNKNOWN_TOPIC_OR_PARTITION
                if missing == E.KAFKA_STORAGE_ERROR and version <= 5:  # as Kafka answers clients of those versions
                    missing = E.NOT_LEADER_OR_FOLLOWER
                errors.append(missing)
                parts.append(_pd(p.partition, missing))
                continue
            hwm = plog.next_offset
            lso = plog.last_stable_offset
            if version >= 9 and p.current_leader_epoch > 0:
                errors.append(E.UNKNOWN_LEADER_EPOCH)
                parts.append(_pd(p.partition, E.UNKNOWN_LEADER_EPOCH, hwm, plog.log_start_offset, lso))
                continue
            if consumer and not plog.config.downconversion_enable:
                errors.append(E.UNSUPPORTED_VERSION)  # message.downconversion.enable=false, as Kafka 3.x
                parts.append(_pd(p.partition, E.UNSUPPORTED_VERSION, hwm, plog.log_start_offset, lso))
                continue
            data: bytes | memoryview | FileRange = b""
            try:
                room = min(p.partition_max_bytes, limit - total)
                if room > 0 or total == 0:
                    data = plog.read(p.fetch_offset, max(room, 1), first_whole=total == 0, pool=ctx.read_buffers,
                                     max_offset=lso if committed else None,
                                     zero_copy_min=zero_copy if ranges is not None else 0)  # fmt: skip
                    if isinstance(data, FileRange):
                        ranges.append(data)  # type: ignore[union-attr]
                    elif isinstance(data.obj, bytearray):
                        lent.append(data.obj)
            except OffsetOutOfRange as exc:
                log.info("fetch from %s-%d: OFFSET_OUT_OF_RANGE: %s", t.topic, p.partition, exc)
                errors.append(E.OFFSET_OUT_OF_RANGE)
                parts.append(_pd(p.partition, E.OFFSET_OUT_OF_RANGE, hwm, plog.log_start_offset, lso))
                continue
            if legacy_magic is not None and len(data):
                try:
                    data = down_convert(data, legacy_magic, p.fetch_offset)  # type: ignore[arg-type]
                except InvalidBatch as exc:  # a zstd batch first: no old format can carry it
                    errors.append(exc.error)
                    parts.append(_pd(p.partition, exc.error, hwm, plog.log_start_offset, lso))
                    continue
            aborted = None
            if committed:
                aborted = []
                if len(data) and plog.aborts_from(p.fetch_offset):
                    upper = data.end_offset if isinstance(data, FileRange) else last_offset_of(data) + 1
                    aborted = [AT(producer_id=a.producer_id, first_offset=a.first_offset)
                               for a in plog.aborted_transactions(p.fetch_offset, upper)]  # fmt: skip
            total += len(data)
            keys.append((t.topic, p.partition))
            parts.append(_pd(p.partition, 0, hwm, plog.log_start_offset, lso, data, aborted))
        if total > before:
            sent.append((t.topic, total - before))
        topics.append(TR(topic=t.topic, topic_id=tid, partitions=parts))
    return R(throttle_time_ms=0, error_code=0, session_id=0, responses=topics), total, keys


def _pd(
    index: int,
    error: int,
    hwm: int = -1,
    start: int = -1,
    lso: int = -1,
    records: bytes | memoryview | FileRange = b"",
    aborted: list[Any] | None = None,
) -> PD:
    return PD(
        partition_index=index,
        error_code=error,
        high_watermark=hwm,
        last_stable_offset=lso,
        log_start_offset=start,
        aborted_transactions=aborted,
        preferred_read_replica=-1,
        records=records,
    )
