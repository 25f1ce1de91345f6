"""The group coordinator: one table of groups, routed by id and kind to the classic or KIP-848 state machine.

The state machines (`classic`, `consumer`) and `offsets` change groups in memory; this module owns what is
shared: the table (a group id is one kind at a time; an empty group may switch kind and keeps its offsets),
persistence through `GroupStore` (awaited under the broker's fsync policy), loading on start, the sweeper that
expires sessions and old offsets, and start/stop. Handlers use only the public methods below.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

from logbroker.protocol.errors import ErrorCode as E

from ..seams import Durability, TopicDirectory
from . import offsets
from .classic import ClassicGroups
from .consumer import ConsumerGroups, validate
from .kinds import AnyGroup
from .migration import Migration
from .model import (
    ClassicGroup,
    Committed,
    ConsumerGroup,
    ConsumerHeartbeat,
    ConsumerHeartbeatBody,
    CoordinatorConfig,
    GroupState,
    HeartbeatResult,
    JoinRequest,
    JoinResult,
    LeaveResult,
    MemberLeft,
    PendingOffset,
    SyncResult,
    TopicPartition,
    for_log,
    now_ms,
)
from .offsets import metadata_too_large, store_pending
from .store import GroupStore, Record, group_key
from .streams import StreamsGroup, StreamsGroups, StreamsResult, check_offset_commit
from .streams import validate as validate_streams

__all__ = ["Coordinator", "CoordinatorConfig"]

log = logging.getLogger(__name__)

SWEEP_INTERVAL_S = 0.05


class Coordinator:
    """All groups of the broker. Runs on the event loop; persistence goes through `GroupStore`."""

    def __init__(
        self,
        store: GroupStore,
        config: CoordinatorConfig,
        durability: Durability,
        topics: TopicDirectory | None = None,
    ) -> None:
        self.store = store
        self.config = config
        self._groups: dict[str, AnyGroup] = {}
        self.classic = ClassicGroups(config, self._save, self._save_soon)
        self.consumer = ConsumerGroups(
            topics.table if topics is not None else dict,
            config.consumer_session_timeout_ms,
            config.consumer_heartbeat_interval_ms,
            config.consumer_max_group_size,
        )
        self.streams = StreamsGroups(topics.table if topics is not None else dict, config.streams)
        self.migration = Migration(self.consumer, self.classic, config.consumer_migration_policy,
                                   config.max_group_size)  # fmt: skip
        self._durability = durability  # the broker's fsync policy (the store's log tells it of each write)
        self._sweeper: asyncio.Task[None] | None = None
        self._txn_seq = 0  # orders pending transactional writes (see model.PendingOffset)
        self._active: set[str] = set()  # groups saved with members since they were last empty (for "emptied")
        # Share groups live in their own coordinator: an id that is one is no classic or consumer group.
        self.is_share_group: Callable[[str], bool] = lambda _gid: False
        self._load()

    def group(self, group_id: str) -> AnyGroup | None:
        """The group (classic or KIP-848) with this id, or None."""
        return self._groups.get(group_id)

    def all_groups(self) -> list[AnyGroup]:
        """Every group, ordered by id."""
        return [self._groups[gid] for gid in sorted(self._groups)]

    # ------------------------------------------------------------------ persistence

    def _load(self) -> None:
        for key, value in self.store.load().items():
            kind, gid = key[0], key[1]
            if kind == "g" and value.get("type") == "streams":
                sg = StreamsGroup.from_json(gid, value)
                old = self._groups.get(gid)
                if old is not None:
                    sg.offsets, sg.txn_offsets = old.offsets, old.txn_offsets
                sg.persisted = True
                self._groups[gid] = sg
                self.streams.resume(sg)
                continue
            if kind == "g" and value.get("type") == "consumer":
                cg = ConsumerGroup.from_json(gid, value)
                old = self._groups.get(gid)
                if old is not None:  # its offsets came first in the log
                    cg.offsets = old.offsets
                    cg.txn_offsets = old.txn_offsets
                cg.persisted = True
                self._groups[gid] = cg
                self.consumer.resume(cg)
                continue
            g = self._groups.setdefault(gid, ClassicGroup(gid))
            if kind == "o":
                g.offsets[(key[2], key[3])] = Committed.from_json(value)
            elif kind == "t":
                po = PendingOffset.from_json(value)
                g.txn_offsets.setdefault(key[2], {})[(key[3], key[4])] = po
                self._txn_seq = max(self._txn_seq, po.seq + 1)
            elif kind == "g" and isinstance(g, ClassicGroup):
                g.restore(value)
                g.persisted = True
        # Empty groups without offsets are left for the first retention check (Kafka's cleanup), which
        # writes their tombstones; until then they are listed, as in Kafka after a restart.
        self._active = {gid for gid, g in self._groups.items() if not g.is_empty}

    async def _persist(self, items: list[Record]) -> None:
        if items:
            self.store.append(items)
            await self._durability.commit()

    async def _save(self, g: AnyGroup) -> None:
        g.persisted = True
        self._note_members(g)
        await self._persist([(group_key(g.group_id), g.to_json())])

    def _save_soon(self, g: AnyGroup) -> None:
        """Persist in the background; the record is taken now, so later changes do not leak into it."""
        g.persisted = True
        self._note_members(g)
        self._persist_soon([(group_key(g.group_id), g.to_json())])

    def _note_members(self, g: AnyGroup) -> None:
        """Log a group's last member leaving (every change of membership is saved, so this sees them all)."""
        if not g.is_empty:
            self._active.add(g.group_id)
        elif g.group_id in self._active:
            self._active.discard(g.group_id)
            log.info("group %s: emptied, no members left (%d committed offsets kept)", for_log(g.group_id),
                     len(g.offsets))  # fmt: skip

    def _persist_soon(self, items: list[Record]) -> None:
        asyncio.ensure_future(self._persist(items)).add_done_callback(_log_failure)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._sweeper = asyncio.create_task(self._sweep_loop(), name="group-sweeper")

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            try:
                await self._sweeper
            except asyncio.CancelledError:
                pass
        for g in self._groups.values():
            if isinstance(g, ClassicGroup):
                self.classic.cancel_waiters(g)

    async def _sweep_loop(self) -> None:
        # As Kafka schedules its cleanup: first one check interval after start, then every interval.
        interval = self.config.offsets_retention_check_interval_ms / 1000
        next_retention = time.monotonic() + interval
        while True:
            await asyncio.sleep(min(SWEEP_INTERVAL_S, max(next_retention - time.monotonic(), 0.001)))
            now = time.monotonic()
            self.sweep(now)
            if now >= next_retention:
                next_retention = now + interval
                try:
                    await self.expire_offsets()
                except OSError as exc:  # the store could not be written: the next check tries again
                    log.error("expiring offsets and empty groups failed: %s", exc)

    def sweep(self, now: float) -> None:
        """Expire sessions and complete overdue joins in every group (the sweeper calls this)."""
        for g in list(self._groups.values()):
            if isinstance(g, ConsumerGroup):
                if self.consumer.expire(g, now):
                    self._after_removal(g)
            elif isinstance(g, StreamsGroup):
                if self.streams.expire(g, now):
                    self._save_soon(g)
            else:
                self.classic.sweep(g, now)

    async def expire_offsets(self) -> None:
        """Kafka's periodic cleanup: expired offsets go, and so do empty groups left without offsets; both
        durably (tombstones), so a restart does not bring them back."""
        start = time.monotonic()
        deletes, gone, expired = offsets.expire(
            list(self._groups.values()), now_ms(), self.config.offsets_retention_ms, self.consumer.topics()
        )
        for gid in gone:
            g = self._groups.pop(gid)
            self._active.discard(gid)
            if isinstance(g, ClassicGroup):
                g.state = GroupState.DEAD
                self.classic.cancel_waiters(g)
        await self._persist(deletes)
        per_group: dict[str, int] = {}
        for key, _ in deletes:
            if key[0] == "o":
                per_group[str(key[1])] = per_group.get(str(key[1]), 0) + 1
        for gid, n in sorted(per_group.items()):
            log.info("group %s: %d committed offsets expired (offsets retention)", for_log(gid), n)
        for gid in gone:
            log.info("group %s: deleted, empty and without committed offsets", for_log(gid))
        if deletes or gone:
            log.info(
                "offsets cleanup: %d offsets expired, %d empty groups removed (%d tombstones) in %.1f ms",
                expired,
                len(gone),
                len(deletes),
                (time.monotonic() - start) * 1000,
            )

    # ------------------------------------------------------------------ classic groups

    async def join(self, req: JoinRequest) -> JoinResult:
        """JoinGroup; an empty KIP-848 group of this id becomes a classic one, keeping its offsets. As in Kafka,
        only a join without a member id makes a group (an empty one, even if the join then fails: the next
        retention check removes it)."""
        err = self.classic.validate_join(req)
        if err != E.NONE:
            return JoinResult(err, member_id=req.member_id)
        if self.is_share_group(req.group_id):
            return JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id=req.member_id)
        g = self._groups.get(req.group_id)
        if isinstance(g, StreamsGroup):
            if g.members:
                return JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id=req.member_id)
            g = self._groups[req.group_id] = ClassicGroup(  # an empty streams group becomes a classic one
                req.group_id, offsets=g.offsets, txn_offsets=g.txn_offsets, persisted=g.persisted
            )
        if isinstance(g, ConsumerGroup):
            if g.members:  # a classic member of a consumer group (KIP-848 migration)
                res = self.migration.join(g, req)
                if res.error == E.NONE:
                    await self._save(g)
                return res
            g = self._groups[req.group_id] = ClassicGroup(
                req.group_id, offsets=g.offsets, txn_offsets=g.txn_offsets, persisted=g.persisted
            )
        if g is None:
            if req.member_id:
                return JoinResult(E.UNKNOWN_MEMBER_ID, member_id=req.member_id)
            g = self._groups[req.group_id] = ClassicGroup(req.group_id, empty_since_ms=now_ms())
            log.info("group %s: created (classic protocol, %s) by client %s at %s", for_log(req.group_id),
                     for_log(req.protocol_type) or "no protocol type", for_log(req.client_id) or "-",
                     req.client_host)  # fmt: skip
        return await self.classic.join(g, req)

    async def sync(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        instance_id: str | None,
        protocol_type: str | None,
        protocol: str | None,
        assignments: dict[str, bytes],
    ) -> SyncResult:
        if not group_id:
            return SyncResult(E.INVALID_GROUP_ID, b"")
        g = self._groups.get(group_id)
        if isinstance(g, ConsumerGroup):
            return self.migration.sync(g, member_id, generation, protocol_type, protocol)
        if not isinstance(g, ClassicGroup):
            return SyncResult(E.UNKNOWN_MEMBER_ID, b"")
        return await self.classic.sync(g, member_id, generation, instance_id, protocol_type, protocol, assignments)

    def heartbeat(self, group_id: str, member_id: str, generation: int, instance_id: str | None) -> E:
        if not group_id:
            return E.INVALID_GROUP_ID
        g = self._groups.get(group_id)
        if isinstance(g, ConsumerGroup):
            return self.migration.heartbeat(g, member_id, generation)
        if not isinstance(g, ClassicGroup):
            return E.UNKNOWN_MEMBER_ID
        return self.classic.heartbeat(g, member_id, generation, instance_id)

    def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> LeaveResult:
        """LeaveGroup; `error` is the first member's error for a single member (what v0-2 answer), the
        group-level one (INVALID_GROUP_ID) with no members otherwise."""
        if not group_id:
            return LeaveResult(E.INVALID_GROUP_ID, [])
        g = self._groups.get(group_id)
        if isinstance(g, ConsumerGroup):
            res = self.migration.leave(g, members)
            self._after_removal(g)
            return res
        if not isinstance(g, ClassicGroup):
            return LeaveResult(E.UNKNOWN_MEMBER_ID, [MemberLeft(mid, iid, E.UNKNOWN_MEMBER_ID) for mid, iid in members])
        return self.classic.leave(g, members)

    def _after_removal(self, g: ConsumerGroup) -> None:
        """Members left a consumer group: if only classic members remain and the policy allows, it becomes a
        classic group again and rebalances (KIP-848 online downgrade); saved either way."""
        cg = self.migration.downgrade(g)
        if cg is None:
            self._save_soon(g)
            return
        self._groups[g.group_id] = cg
        log.info("group %s: only classic members left: downgraded from consumer to classic", for_log(g.group_id))
        self.classic._prepare_rebalance(cg, f"Downgrade group {g.group_id} from consumer to classic")
        self._save_soon(cg)

    # ------------------------------------------------------------------ KIP-848 groups

    async def consumer_heartbeat(
        self, body: ConsumerHeartbeatBody, client_id: str, client_host: str, version: int = 0
    ) -> HeartbeatResult:
        """ConsumerGroupHeartbeat; an empty classic group of this id becomes a KIP-848 one, keeping its offsets.
        A heartbeat that fails leaves no group behind that it created."""
        refused = validate(body, version)
        if refused is not None:
            return refused
        req = ConsumerHeartbeat.from_body(body, client_id, client_host)
        gid, epoch = req.group_id, req.member_epoch
        if self.is_share_group(gid):
            return HeartbeatResult(E.GROUP_ID_NOT_FOUND, message=f"Group {gid} is not a consumer group.")
        g = self._groups.get(gid)
        if isinstance(g, StreamsGroup):
            return HeartbeatResult(E.GROUP_ID_NOT_FOUND, message=f"Group {gid} is not a consumer group.")
        if isinstance(g, ClassicGroup):
            if epoch != 0:
                return HeartbeatResult(E.GROUP_ID_NOT_FOUND, message=_not_consumer(g, epoch))
            if g.is_empty:  # joins the table if all goes well
                cg = ConsumerGroup(gid, offsets=g.offsets, txn_offsets=g.txn_offsets, persisted=g.persisted)
            else:  # a live classic group: upgraded online (KIP-848)
                upgraded = self.migration.upgrade(g)
                if isinstance(upgraded, HeartbeatResult):
                    return upgraded
                cg = upgraded
                log.info("group %s: upgraded online from classic to consumer (%d classic members)", for_log(gid),
                         len(cg.members))  # fmt: skip
        elif g is None:
            if epoch != 0:
                which = "Group" if epoch < 0 else "Consumer group"
                return HeartbeatResult(E.GROUP_ID_NOT_FOUND, message=f"{which} {gid} not found.")
            cg = ConsumerGroup(gid)
        else:
            cg = g
        result, changed = self.consumer.heartbeat(cg, req)
        if cg is not g:
            if result.error != E.NONE:
                return result  # nothing created: an empty classic group stays what it was
            if g is not None and g.is_empty:
                log.info("group %s: the empty classic group became a consumer group", for_log(gid))
            else:
                log.info("group %s: created (consumer protocol) by client %s at %s", for_log(gid),
                         for_log(client_id) or "-", client_host)  # fmt: skip
            self._groups[gid] = cg
            changed = True
        if epoch == -1 and result.error == E.NONE and cg.members:
            self._after_removal(cg)  # the last consumer-protocol member may have left: online downgrade
            return result
        if changed:
            await self._save(cg)
        return result

    # ------------------------------------------------------------------ KIP-1071 streams groups

    async def streams_heartbeat(self, body: object, client_id: str, client_host: str, version: int) -> StreamsResult:
        """StreamsGroupHeartbeat; an empty classic group of this id becomes a streams group (keeping its offsets),
        any other kind of group is not one. A refused heartbeat leaves no group behind that it would create."""
        refused = validate_streams(body)
        if refused is not None:
            return refused
        gid, epoch = body.group_id, body.member_epoch  # type: ignore[attr-defined]
        if self.is_share_group(gid):
            return StreamsResult(E.GROUP_ID_NOT_FOUND, f"Group {gid} is not a streams group.")
        g = self._groups.get(gid)
        if isinstance(g, StreamsGroup):
            sg = g
        elif g is None:
            if epoch != 0:
                return StreamsResult(E.GROUP_ID_NOT_FOUND, f"Streams group {gid} not found.")
            sg = StreamsGroup(gid)
        elif isinstance(g, ClassicGroup) and g.is_empty and epoch == 0:
            sg = StreamsGroup(gid, offsets=g.offsets, txn_offsets=g.txn_offsets, persisted=g.persisted)
        else:
            return StreamsResult(E.GROUP_ID_NOT_FOUND, f"Group {gid} is not a streams group.")
        result, changed = self.streams.heartbeat(sg, body, client_id, client_host, version)
        if sg is not g:
            if result.error != E.NONE:
                return result
            self._groups[gid] = sg
            log.info("group %s: created (streams protocol) by client %s at %s", for_log(gid),
                     for_log(client_id) or "-", client_host)  # fmt: skip
            changed = True
        if changed:
            await self._save(sg)
        return result

    # ------------------------------------------------------------------ offsets and group deletion

    def check_commit(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        instance_id: str | None,
        version: int = 9,
        partitions: Iterable[TopicPartition] = (),
    ) -> E:
        """OffsetCommit's group check (`generation` is the member epoch for KIP-848 and streams groups, whose
        older epochs are checked against the tasks of `partitions`)."""
        if self.is_share_group(group_id):
            return E.GROUP_ID_NOT_FOUND  # a share group's progress is its share-partition state
        g = self._groups.get(group_id)
        if isinstance(g, StreamsGroup):
            return check_offset_commit(g, member_id, generation, partitions, version=version)
        return offsets.check_commit(g, member_id, generation, instance_id, version)

    def check_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> E:
        """OffsetFetch v9+'s member check (Kafka's ConsumerGroup.validateOffsetFetch): none for a classic
        group, nor for a request with a null member id and a negative epoch (admin tools); otherwise the
        member must exist (an empty id too) with exactly this epoch."""
        g = self._groups.get(group_id)
        if not isinstance(g, ConsumerGroup | StreamsGroup) or (member_id is None and member_epoch < 0):
            return E.NONE
        if isinstance(g, StreamsGroup):
            sm = g.members.get(member_id or "")
            if sm is None:
                return E.UNKNOWN_MEMBER_ID
            return E.STALE_MEMBER_EPOCH if member_epoch != sm.epoch else E.NONE
        m = g.members.get(member_id or "")
        if m is None:
            return E.UNKNOWN_MEMBER_ID
        if member_epoch != m.epoch:
            return E.ILLEGAL_GENERATION if m.classic is not None else E.STALE_MEMBER_EPOCH
        return E.NONE

    async def commit(self, group_id: str, committed: dict[TopicPartition, Committed]) -> None:
        """Store offsets (creating a memberless "simple" classic group if need be); returns once durable as
        `offsets_commit_sync` says: written to the log (kill -9 keeps it) and synced within the delay by a
        shared round, or synced by its own round. A consumer committing after every record waits for one
        round trip, not one fdatasync too (kafka-go's Reader sends each commit alone and waits: measured
        5.0 s for 10,000 with its own sync, 2.9 s without, Kafka 4.5 s)."""
        g = self._groups.get(group_id)
        if g is None:
            g = self._groups[group_id] = ClassicGroup(group_id, empty_since_ms=now_ms())
            log.info("group %s: created by an offset commit (no members)", for_log(group_id))
        items = offsets.commit(g, committed)
        if self.config.offsets_commit_sync != "shared" or not items:
            await self._persist(items)
            return
        self.store.append(items)
        self._durability.defer(self.config.offsets_commit_sync_delay_ms / 1000)

    def fetch_offsets(self, group_id: str, partitions: list[TopicPartition] | None) -> dict[TopicPartition, Committed]:
        """Committed offsets only: pending transactional ones are not visible."""
        return offsets.fetch(self._groups.get(group_id), partitions)

    def unstable_offsets(self, group_id: str, partitions: Iterable[TopicPartition]) -> set[TopicPartition]:
        """Those of `partitions` with transactional offsets pending: what a `require_stable` OffsetFetch (v7+,
        read_committed consumers) answers UNSTABLE_OFFSET_COMMIT for, so they wait rather than start from
        the offset the transaction is about to replace."""
        return offsets.unstable(self._groups.get(group_id), partitions)

    # ------------------------------------------------------------------ transactional offsets

    def check_txn_commit(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
        partitions: Iterable[TopicPartition] = (),
    ) -> E:
        """TxnOffsetCommit's group check alone (no change): INVALID_GROUP_ID for the empty id (Kafka's group
        coordinator refuses it here, unlike OffsetCommit), then Kafka's KIP-447 member checks."""
        if not group_id:
            return E.INVALID_GROUP_ID
        g = self._groups.get(group_id)
        if isinstance(g, StreamsGroup):
            # TxnOffsetCommit up to v5 tells a stale epoch as ILLEGAL_GENERATION (what producers understand).
            err = check_offset_commit(g, member_id, generation_id, partitions, transactional=True)
            return E.ILLEGAL_GENERATION if err == E.STALE_MEMBER_EPOCH else err
        return offsets.check_txn_commit(g, member_id, generation_id, group_instance_id)

    async def txn_commit(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
        offsets: dict[TopicPartition, Committed],
        version: int,
    ) -> dict[TopicPartition, E]:
        """TxnOffsetCommit: store `offsets` as pending for the producer's transaction, durably before it
        returns; they become committed (or are dropped) by `complete_txn`. A group-level refusal is every
        partition's error; metadata over offset.metadata.max.bytes is OFFSET_METADATA_TOO_LARGE for its
        partition. As in Kafka, an accepted commit to an unknown group creates a simple (memberless) one.
        `producer_epoch` and `version` are checked elsewhere (the transaction coordinator) or do not change
        the group rules; they are taken so the call carries the whole request."""
        err = self.check_txn_commit(group_id, member_id, generation_id, group_instance_id, list(offsets))
        if err != E.NONE:
            return dict.fromkeys(offsets, err)
        limit = self.config.offset_metadata_max_bytes
        result: dict[TopicPartition, E] = {}
        accepted: dict[TopicPartition, Committed] = {}
        for tp, c in offsets.items():  # (`offsets` is the parameter here, not the module)
            if metadata_too_large(c.metadata, limit):
                result[tp] = E.OFFSET_METADATA_TOO_LARGE
            else:
                result[tp] = E.NONE
                accepted[tp] = c
        g = self._groups.get(group_id)
        if g is None:
            g = self._groups[group_id] = ClassicGroup(group_id, empty_since_ms=now_ms())
            log.info("group %s: created by a transactional offset commit (no members)", for_log(group_id))
        if accepted:
            seq, self._txn_seq = self._txn_seq, self._txn_seq + 1
            await self._persist(store_pending(g, producer_id, accepted, seq))
        return result

    async def complete_txn(self, producer_id: int, group_ids: Iterable[str] | None, commit: bool) -> None:
        """The end of a producer's transaction in these groups (None: every group it has offsets pending in):
        commit moves its pending offsets into the committed ones, abort drops them; durable before it
        returns. Idempotent: a second call (a retried marker after a crash) finds nothing left to do."""
        ids = self.pending_groups(producer_id) if group_ids is None else group_ids
        records: list[Record] = []
        for gid in dict.fromkeys(ids):
            g = self._groups.get(gid)
            if g is not None:
                records += offsets.complete(g, producer_id, commit)
        await self._persist(records)

    def pending_groups(self, producer_id: int) -> list[str]:
        """Groups where this producer has an open transaction (offsets pending), e.g. for recovery checks."""
        return [gid for gid, g in self._groups.items() if producer_id in g.txn_offsets]

    async def delete_offsets(self, group_id: str, partitions: list[TopicPartition]) -> dict[TopicPartition, E]:
        """OffsetDelete; raises GroupError(GROUP_ID_NOT_FOUND) for an unknown group."""
        result, deletes = offsets.delete(self._groups.get(group_id), group_id, partitions, self.consumer.topics())
        await self._persist(deletes)
        if n := sum(1 for key, _ in deletes if key[0] == "o"):
            log.info("group %s: committed offsets of %d partitions deleted", for_log(group_id), n)
        return result

    async def delete_group(self, group_id: str) -> E:
        g = self._groups.get(group_id)
        if g is None:
            return E.GROUP_ID_NOT_FOUND
        if g.members or g.state != GroupState.EMPTY:
            return E.NON_EMPTY_GROUP
        deletes = offsets.delete_all(g)
        if g.persisted:
            deletes.append((group_key(group_id), None))
        del self._groups[group_id]
        self._active.discard(group_id)
        if isinstance(g, ClassicGroup):
            g.state = GroupState.DEAD
        await self._persist(deletes)
        log.info("group %s: deleted (%d committed offsets removed)", for_log(group_id), len(g.offsets))
        return E.NONE

    def forget_topic(self, topic: str) -> None:
        """A deleted topic takes its committed offsets with it (as in Kafka)."""
        deletes = offsets.forget_topic(self._groups.values(), topic)
        if deletes:
            self._persist_soon(deletes)


def _not_consumer(g: ClassicGroup, epoch: int) -> str:
    """Kafka's words for a KIP-848 heartbeat to a classic group (it has no online upgrade here)."""
    if epoch != 0:
        return f"Group {g.group_id} is not a consumer group."
    if g.protocol_type != "consumer":
        reason = "the group does not use the consumer embedded protocol"
    elif g.subscribed_topics() is None:
        reason = "the embedded consumer protocol is malformed"
    else:
        reason = "online upgrade is disabled"
    return f"Cannot upgrade classic group {g.group_id} to consumer group because {reason}."


def _log_failure(task: asyncio.Future[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("persisting group state failed: %s", task.exception())
