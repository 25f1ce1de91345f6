"""The transaction coordinator (KIP-98): Kafka's state machine per transactional id, on one node.

Every state change is written to the coordinator's internal log (`<data>/__transactions`) and made durable
before it is acted on or answered, so an acknowledged EndTxn survives kill -9. Ending a transaction is
Kafka's two-phase sequence, run here without a network in between: PrepareCommit/PrepareAbort is made
durable (the decision), then the markers are written into every partition of the transaction and the
producer's pending offsets are committed or dropped in each group, made durable, and only then is the id
CompleteCommit/CompleteAbort and the client answered: two fsync rounds, since the decision must be on disk
before any marker is (a marker made durable without it could be contradicted by a timeout abort after a
crash). A crash between the decision and the markers is finished on the next start (`start`): what was
decided is carried out, whatever the client saw.

While a change is being written the id is `pending` and every other request for it gets
CONCURRENT_TRANSACTIONS (the client retries), exactly as Kafka answers during its own writes. Errors and
their order follow Kafka's TransactionCoordinator (handleInitProducerId, handleAddPartitionsToTransaction,
handleEndTransaction, abortTimedOutTransactions).

Transaction version 2 (KIP-890 part 2) is decided per request, as Kafka decides it, by the request's version:
EndTxn v5, Produce v12 and TxnOffsetCommit v5 (which join the partition or group to the transaction
themselves: `add_partitions(..., tv=2)`). Its end bumps the producer's epoch (at the decision, so the markers
carry the new epoch) and answers the new epoch, or a new producer id with epoch 0 once the epoch is exhausted;
a retried end is recognised by the epoch one below the current one. The broker's finalized transaction.version
(`broker/features.py`) is what clients read to choose it, and what the coordinator's own aborts
(timeouts, fencing) use.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from logbroker.protocol.errors import ErrorCode as E
from logbroker.storage.internal import InternalLog
from logbroker.storage.producers import SequenceError

from ..seams import Durability, OpenTransactions, ProducerIds, TxnOffsets
from .model import (
    IDLE,
    MAX_EPOCH,
    NO_EPOCH,
    NO_PRODUCER_ID,
    PREPARED,
    TopicPartition,
    TxnMeta,
    TxnState,
    epoch_exhausted,
    now_ms,
)

log = logging.getLogger(__name__)

STORE_DIR = "__transactions"
MARKER_RETRY_S = 1.0


class TxnStore(InternalLog):
    """The coordinator's internal log: one record per transactional id, key ("x", id)."""

    def __init__(self, data_dir: Path, clean_shutdown: bool) -> None:
        super().__init__(data_dir / STORE_DIR, clean_shutdown)


@dataclass(frozen=True, slots=True)
class InitResult:
    error: E
    producer_id: int = NO_PRODUCER_ID
    epoch: int = NO_EPOCH


@dataclass(frozen=True, slots=True)
class TxnSettings:
    max_timeout_ms: int
    id_expiration_ms: int
    abort_interval_ms: int
    expire_interval_ms: int


@dataclass(frozen=True, slots=True)
class EndResult:
    """EndTxn's answer; v5 carries the producer id and epoch the producer goes on with."""

    error: E
    producer_id: int = NO_PRODUCER_ID
    epoch: int = NO_EPOCH


class TxnCoordinator:
    """Transactional ids -> state. Runs on the broker's event loop."""

    def __init__(
        self,
        store: TxnStore,
        settings: TxnSettings,
        *,
        logs: OpenTransactions,
        durability: Durability,
        producer_ids: ProducerIds,
        offsets: TxnOffsets,
        transaction_version: Callable[[], int] = lambda: 2,
    ) -> None:
        self.store = store
        self._transaction_version = transaction_version  # the finalized level: the coordinator's own aborts use it
        self.settings = settings
        self._logs = logs  # the partitions markers go to, and those holding open transactions (`abort_hanging`)
        self._durability = durability
        self._producer_ids = producer_ids
        self._offsets = offsets  # the group coordinator's pending transactional offsets
        # Hanging transactions found (topic, partition, producer id, first offset) -> when first seen.
        self.hanging: dict[tuple[str, int, int, int], int] = {}
        self.hanging_aborted = 0
        self.txns: dict[str, TxnMeta] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._sweeper: asyncio.Task[None] | None = None
        for key, value in store.load().items():
            if key[0] == "x":
                try:
                    self.txns[key[1]] = TxnMeta.from_json(key[1], value)
                except (KeyError, ValueError, TypeError) as exc:
                    log.warning("transaction state of %r unreadable, dropped: %s", key[1], exc)

    # ------------------------------------------------------------------ life cycle

    def start(self) -> None:
        """Finish what a crash interrupted (decided transactions get their markers), then sweep timeouts."""
        for meta in self.txns.values():
            if meta.state in PREPARED:
                meta.pending = True
                self._spawn(self._finish(meta, meta.state == TxnState.PREPARE_COMMIT, recovering=True))
        self.find_hanging()  # said at start, not only after the first sweep
        self._sweeper = asyncio.create_task(self._sweep_loop(), name="txn-sweeper")

    async def stop(self) -> None:
        tasks = [t for t in (self._sweeper, *self._tasks) if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _write(self, meta: TxnMeta) -> None:
        self.store.append([(("x", meta.transactional_id), meta.to_json())])
        await self._durability.commit()

    async def _transit(self, meta: TxnMeta, new: TxnMeta) -> E:
        """Write `new` durably, then make it the state; CONCURRENT_TRANSACTIONS is answered meanwhile."""
        meta.pending = True
        try:
            await self._write(new)
        except OSError as exc:
            log.error("transaction %r: state not durable (%s)", meta.transactional_id, exc)
            return E.NOT_COORDINATOR  # the client finds the coordinator again and retries
        finally:
            meta.pending = False
        meta.apply(new)
        return E.NONE

    # ------------------------------------------------------------------ InitProducerId

    async def init_producer_id(self, tid: str, timeout_ms: int, expected_pid: int, expected_epoch: int) -> InitResult:
        """A producer id and epoch for `tid`, fencing any older producer of it (KIP-98, KIP-360)."""
        if not tid:
            return InitResult(E.INVALID_REQUEST)
        if not 0 < timeout_ms <= self.settings.max_timeout_ms:
            return InitResult(E.INVALID_TRANSACTION_TIMEOUT)
        expected = (
            None if expected_pid == NO_PRODUCER_ID and expected_epoch == NO_EPOCH else (expected_pid, expected_epoch)
        )
        meta = self.txns.get(tid)
        if meta is None:
            meta = self.txns[tid] = TxnMeta(
                tid, self._producer_ids.next_id(), timeout_ms=timeout_ms, update_ms=now_ms()
            )
        if meta.pending:
            return InitResult(E.CONCURRENT_TRANSACTIONS)
        if expected is not None and not (
            meta.epoch == NO_EPOCH
            or expected[0] == meta.producer_id
            or (expected[0] == meta.prev_producer_id and epoch_exhausted(expected[1]))
        ):
            return InitResult(E.PRODUCER_FENCED)
        if meta.state in PREPARED:
            return InitResult(E.CONCURRENT_TRANSACTIONS)
        if meta.state == TxnState.ONGOING:
            # Kafka's fencing: abort the open transaction under a bumped epoch (never returned), then let the
            # client retry, which bumps the epoch again.
            err = await self.abort_fencing(meta)
            return InitResult(err if err != E.NONE else E.CONCURRENT_TRANSACTIONS)
        if meta.state not in IDLE:
            return InitResult(E.CONCURRENT_TRANSACTIONS)
        base = {"timeout_ms": timeout_ms, "state": TxnState.EMPTY, "partitions": set(), "groups": set(), "start_ms": -1}
        if epoch_exhausted(meta.epoch) and (expected is None or expected[1] == meta.epoch):
            new = meta.transit(
                producer_id=self._producer_ids.next_id(),
                prev_producer_id=meta.producer_id,
                epoch=0,
                last_epoch=meta.epoch if expected is not None else NO_EPOCH,
                **base,
            )
        elif expected is None:
            new = meta.transit(epoch=meta.epoch + 1, last_epoch=NO_EPOCH, **base)
        elif meta.epoch == NO_EPOCH or expected[1] == meta.epoch:
            new = meta.transit(epoch=meta.epoch + 1, last_epoch=meta.epoch, **base)
        elif expected[1] == meta.last_epoch:
            new = meta.transit(**base)  # a retry of a bump whose answer was lost: the same epoch again
        else:
            return InitResult(E.PRODUCER_FENCED)
        err = await self._transit(meta, new)
        if err != E.NONE:
            return InitResult(err)
        log.info("initialized transactional id %r: producer id %d epoch %d", tid, meta.producer_id, meta.epoch)
        return InitResult(E.NONE, meta.producer_id, meta.epoch)

    # ------------------------------------------------------------------ adding partitions and groups

    def _check_producer(self, tid: str, pid: int, epoch: int, verifying: bool = False) -> tuple[E, TxnMeta | None]:
        """Kafka's common checks. A verification (of a produce or TxnOffsetCommit) does not wait out a state
        write in flight, as Kafka's handleVerifyPartitionsInTransaction does not: only a prepared end is
        CONCURRENT_TRANSACTIONS to it."""
        if not tid:
            return E.INVALID_REQUEST, None
        meta = self.txns.get(tid)
        if meta is None or meta.producer_id != pid:
            return E.INVALID_PRODUCER_ID_MAPPING, None
        if meta.epoch != epoch:
            return E.PRODUCER_FENCED, None
        if (meta.pending and not verifying) or meta.state in PREPARED:
            return E.CONCURRENT_TRANSACTIONS, None
        return E.NONE, meta

    async def add_partitions(
        self,
        tid: str,
        pid: int,
        epoch: int,
        partitions: set[TopicPartition],
        groups: set[str] = frozenset(),
        tv: int = 0,
    ) -> E:
        """AddPartitionsToTxn / AddOffsetsToTxn, or (tv=2) a Produce v12 / TxnOffsetCommit v5 joining its
        partition or group: the transaction begins (Ongoing) or grows. Kafka's order of checks: a state write
        in flight comes first (after an exhausted epoch the producer may already use the new id)."""
        if not tid:
            return E.INVALID_REQUEST
        meta = self.txns.get(tid)
        if meta is None:
            return E.INVALID_PRODUCER_ID_MAPPING
        if meta.pending:
            return E.CONCURRENT_TRANSACTIONS
        err, meta = self._check_producer(tid, pid, epoch)
        if meta is None:
            return err
        if meta.state == TxnState.ONGOING and partitions <= meta.partitions and groups <= meta.groups:
            return E.NONE
        start = meta.start_ms if meta.state == TxnState.ONGOING else now_ms()
        new = meta.transit(state=TxnState.ONGOING, start_ms=start, client_tv=tv)
        new.partitions |= partitions
        new.groups |= groups
        return await self._transit(meta, new)

    def verify_partitions(
        self, tid: str, pid: int, epoch: int, partitions: set[TopicPartition]
    ) -> dict[TopicPartition, E]:
        """AddPartitionsToTxn's VerifyOnly (Kafka's handleVerifyPartitionsInTransaction): each partition is in
        the producer's open transaction, or TRANSACTION_ABORTABLE."""
        err, meta = self._check_producer(tid, pid, epoch, verifying=True)
        if meta is None:
            return dict.fromkeys(partitions, err)
        ongoing = meta.state == TxnState.ONGOING
        return {tp: E.NONE if ongoing and tp in meta.partitions else E.TRANSACTION_ABORTABLE for tp in partitions}

    def check_offset_commit(self, tid: str, pid: int, epoch: int, group_id: str) -> E:
        """TxnOffsetCommit's verification (KIP-890 part 1): the group must be in the producer's open
        transaction. Errors as Kafka's broker turns the coordinator's answer into for this request."""
        err, meta = self._check_producer(tid, pid, epoch, verifying=True)
        if err == E.PRODUCER_FENCED:
            return E.INVALID_PRODUCER_EPOCH
        if meta is None:
            return err
        if meta.state != TxnState.ONGOING or group_id not in meta.groups:
            return E.INVALID_TXN_STATE
        return E.NONE

    def check_produce(self, tid: str, pid: int, epoch: int, tp: TopicPartition, version: int) -> E:
        """A transactional batch's verification (KIP-890 part 1): its partition must be in the producer's
        open transaction. The errors are what Kafka's broker answers Produce with."""
        err, meta = self._check_producer(tid, pid, epoch, verifying=True)
        if err == E.PRODUCER_FENCED:
            return E.INVALID_PRODUCER_EPOCH
        if err == E.CONCURRENT_TRANSACTIONS:
            return E.NOT_ENOUGH_REPLICAS  # retriable for every client version, no metadata refresh
        if meta is None:
            return err
        if meta.state != TxnState.ONGOING or tp not in meta.partitions:
            return E.TRANSACTION_ABORTABLE if version >= 11 else E.INVALID_TXN_STATE
        return E.NONE

    # ------------------------------------------------------------------ ending transactions

    async def end_txn_v2(self, tid: str, pid: int, epoch: int, commit: bool) -> EndResult:
        """EndTxn v5 (Kafka's endTransaction for transaction version 2): the epoch is bumped at every end,
        an empty transaction may be aborted (a producer in error aborts what it cannot know was begun), and
        a retry (the epoch one below, or the previous id after an exhausted epoch) is answered again."""
        if not tid:
            return EndResult(E.INVALID_REQUEST)
        meta = self.txns.get(tid)
        if meta is None:
            return EndResult(E.INVALID_PRODUCER_ID_MAPPING)
        if meta.pending:
            return EndResult(E.CONCURRENT_TRANSACTIONS)
        retry_overflow = meta.prev_producer_id == pid and epoch == MAX_EPOCH - 1 and meta.epoch == 0
        retry_bump = meta.epoch == epoch + 1
        if pid != meta.producer_id and not retry_overflow:
            return EndResult(E.INVALID_PRODUCER_ID_MAPPING)
        state = meta.state
        if state in (TxnState.ONGOING, TxnState.EMPTY):
            valid = epoch == meta.epoch
        elif state in PREPARED:
            valid = retry_bump
        else:
            valid = retry_bump or retry_overflow or epoch == meta.epoch
        if not valid:
            return EndResult(E.PRODUCER_FENCED)
        retry = retry_bump or retry_overflow
        current = EndResult(E.NONE, meta.producer_id, meta.epoch)
        if state == TxnState.ONGOING or (not commit and not retry and state in IDLE):
            err = await self._end(meta, commit, tv=2)
            return EndResult(err, meta.producer_id, meta.epoch) if err == E.NONE else EndResult(err)
        if state == TxnState.EMPTY:
            return EndResult(E.PRODUCER_FENCED if retry else E.INVALID_TXN_STATE)
        if state == TxnState.COMPLETE_ABORT:
            return current if retry and not commit else EndResult(E.INVALID_TXN_STATE)
        if state == TxnState.COMPLETE_COMMIT:
            return current if retry and commit else EndResult(E.INVALID_TXN_STATE)
        wanted = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        return EndResult(E.CONCURRENT_TRANSACTIONS if state == wanted else E.INVALID_TXN_STATE)

    async def end_txn(self, tid: str, pid: int, epoch: int, commit: bool) -> E:
        if not tid:
            return E.INVALID_REQUEST
        meta = self.txns.get(tid)
        if meta is None or meta.producer_id != pid:
            return E.INVALID_PRODUCER_ID_MAPPING
        if epoch != meta.epoch:
            return E.PRODUCER_FENCED
        if meta.pending:
            return E.CONCURRENT_TRANSACTIONS
        state = meta.state
        if state == TxnState.ONGOING:
            return await self._end(meta, commit)
        if state == TxnState.COMPLETE_COMMIT:
            return E.NONE if commit else E.INVALID_TXN_STATE  # a retried commit is answered again
        if state == TxnState.COMPLETE_ABORT:
            return E.INVALID_TXN_STATE if commit else E.NONE
        if state == TxnState.PREPARE_COMMIT:
            return E.CONCURRENT_TRANSACTIONS if commit else E.INVALID_TXN_STATE
        if state == TxnState.PREPARE_ABORT:
            return E.INVALID_TXN_STATE if commit else E.CONCURRENT_TRANSACTIONS
        return E.INVALID_TXN_STATE  # Empty: no transaction to end

    async def abort_fencing(self, meta: TxnMeta) -> E:
        """Abort the open transaction under a bumped epoch: the producer that opened it is fenced (its
        batches and EndTxn carry the old epoch). Used for timeouts and for InitProducerId on an open one."""
        return await self._end(meta, False, fence=True, tv=self._transaction_version())

    async def _end(self, meta: TxnMeta, commit: bool, fence: bool = False, tv: int = 0) -> E:
        changes: dict = {"state": TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT}
        if meta.state != TxnState.ONGOING:  # version 2's abort of an empty transaction
            changes.update(partitions=set(), groups=set(), start_ms=now_ms())
        if tv >= 2:
            # The bump is part of the decision, so the markers carry it; an exhausted epoch hands over to a
            # new producer id once the markers are in (the markers go out at the last epoch of the old one).
            if meta.epoch < MAX_EPOCH:
                changes.update(epoch=meta.epoch + 1, last_epoch=meta.epoch)
            if epoch_exhausted(meta.epoch):
                changes.update(next_producer_id=self._producer_ids.next_id())
            changes.update(client_tv=tv)
        elif fence:
            changes.update(epoch=meta.epoch + 1, last_epoch=NO_EPOCH)
        err = await self._transit(meta, meta.transit(**changes))
        if err != E.NONE:
            return err
        meta.pending = True  # until the markers are written
        await self._finish(meta, commit, recovering=False)
        return E.NONE

    async def _finish(self, meta: TxnMeta, commit: bool, recovering: bool) -> None:
        """Write the markers of a decided transaction and complete it; retried until it succeeds (the
        decision is durable: only carrying it out can be late)."""
        while True:
            try:
                await self._write_markers(meta, commit, recovering)
                handover = {}
                if meta.next_producer_id != NO_PRODUCER_ID:
                    handover = {"producer_id": meta.next_producer_id, "prev_producer_id": meta.producer_id,
                                "epoch": 0, "next_producer_id": NO_PRODUCER_ID}  # fmt: skip
                done = meta.transit(
                    state=TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT,
                    partitions=set(),
                    groups=set(),
                    start_ms=-1,
                    **handover,
                )
                # Not awaited: the markers are durable, so the outcome is settled; were this record lost, the
                # restart would find the prepared state and find no open transaction left to mark. The next
                # state change of this id is written after it in the same log and its fsync covers both.
                self.store.append([(("x", meta.transactional_id), done.to_json())])
                self._spawn(self._durability.commit())
            except OSError as exc:
                log.error("transaction %r: markers not written (%s); retrying", meta.transactional_id, exc)
                await asyncio.sleep(MARKER_RETRY_S)
                recovering = True  # some markers may be in: write only where the transaction is still open
                continue
            meta.apply(done)
            meta.pending = False
            return

    async def _write_markers(self, meta: TxnMeta, commit: bool, recovering: bool) -> None:
        pid, epoch = meta.producer_id, meta.epoch
        written = False
        for topic, index in sorted(meta.partitions):
            plog = self._logs.log(topic, index)
            if plog is None:
                continue  # the topic was deleted meanwhile
            if recovering and pid not in plog.producers.ongoing:
                continue  # written before the crash (or nothing was produced there)
            try:
                plog.append_marker(pid, epoch, commit, transaction_version=meta.client_tv)
            except SequenceError as exc:
                log.warning("transaction %r: no marker in %s-%d: %s", meta.transactional_id, topic, index, exc)
                continue
            written = True
        if written:
            await self._durability.commit()
        if meta.groups:
            await self._offsets.complete_txn(pid, meta.groups, commit)

    # ------------------------------------------------------------------ timeouts and expiry

    async def _sweep_loop(self) -> None:
        abort_every = self.settings.abort_interval_ms / 1000
        expire_every = self.settings.expire_interval_ms / 1000
        loop = asyncio.get_running_loop()
        next_expire = loop.time() + expire_every
        while True:
            await asyncio.sleep(min(abort_every, max(next_expire - loop.time(), 0.001)))
            try:
                await self.abort_timed_out()
                await self.abort_hanging()
                if loop.time() >= next_expire:
                    next_expire = loop.time() + expire_every
                    await self.expire_ids()
                self.compact()
            except OSError as exc:
                log.error("transaction sweep failed: %s", exc)

    def compact(self) -> bool:
        """Rewrite the state log with one record per id once it is mostly superseded records: every
        transaction appends three, so without this it would grow by ~600 bytes per transaction for as
        long as the broker runs. Only between writes (no state change in flight)."""
        if not self.store.superseded(len(self.txns)) or self._tasks or any(m.pending for m in self.txns.values()):
            return False
        self.store.rewrite({("x", tid): m.to_json() for tid, m in self.txns.items()})
        return True

    async def abort_timed_out(self, now: int | None = None) -> int:
        """Abort (fencing the producer) every open transaction older than its timeout."""
        now = now_ms() if now is None else now
        due = [
            m
            for m in self.txns.values()
            if m.state == TxnState.ONGOING and not m.pending and m.start_ms + m.timeout_ms < now
        ]
        for meta in due:
            log.info(
                "aborting transaction %r (producer id %d): open for longer than its timeout of %d ms",
                meta.transactional_id,
                meta.producer_id,
                meta.timeout_ms,
            )
            await self.abort_fencing(meta)
        return len(due)

    def find_hanging(self, now: int | None = None) -> list[tuple[str, int, int, int, int]]:
        """Open transactions in partition logs that no coordinator state explains (Kafka's `kafka-transactions
        find-hanging`: the producer's transaction is unknown here, over, or does not name the partition), as
        (topic, partition, producer id, first offset, last write ms). Each is logged at ERROR when first found:
        read_committed readers of its partition cannot get past its first offset until it ends."""
        now = now_ms() if now is None else now
        explained: dict[int, TxnMeta] = {}
        for m in self.txns.values():
            if m.state in (TxnState.ONGOING, *PREPARED) or m.pending:
                explained[m.producer_id] = m
        found = []
        seen = set()
        for topic, index, plog in self._logs.with_open_transactions():
            for pid, first in list(plog.producers.ongoing.items()):
                meta = explained.get(pid)
                if meta is not None and (topic, index) in meta.partitions:
                    continue
                entry = plog.producers.producers.get(pid)
                last = entry.last_timestamp if entry is not None else -1
                key = (topic, index, pid, first)
                seen.add(key)
                found.append((topic, index, pid, first, last))
                if key not in self.hanging:
                    self.hanging[key] = now
                    log.error(
                        "%s-%d: a transaction of producer id %d open since offset %d is unknown to the transaction "
                        "coordinator (a hanging transaction: its state was lost, or a client wrote without adding "
                        "the partition); read_committed readers stop at that offset. It is aborted once it has "
                        "been idle for transaction.max.timeout.ms (%d ms), or now with kafka-transactions.sh abort "
                        "--topic %s --partition %d --start-offset %d",
                        topic, index, pid, first, self.settings.max_timeout_ms, topic, index, first,
                    )  # fmt: skip
        for key in [k for k in self.hanging if k not in seen]:
            del self.hanging[key]  # ended (a marker came: the tool's abort, or ours)
        return found

    async def abort_hanging(self, now: int | None = None) -> int:
        """Abort, with an ABORT marker in the partition, every hanging transaction (`find_hanging`) whose
        producer has not written for transaction.max.timeout.ms, and that was found that long ago: no client
        can end it any more."""
        now = now_ms() if now is None else now
        aborted = 0
        for topic, index, pid, first, last in self.find_hanging(now):
            # Idle by the broker's clock too: a batch's timestamp is the client's (old, or skewed ahead).
            since = max(last, self.hanging.get((topic, index, pid, first), now))
            if now - since < self.settings.max_timeout_ms:
                continue
            plog = self._logs.log(topic, index)
            if plog is None or plog.producers.ongoing.get(pid) != first:
                continue
            entry = plog.producers.producers.get(pid)
            epoch = entry.epoch if entry is not None else 0
            try:
                offset, _done = plog.append_marker(pid, epoch, False, max(entry.coordinator_epoch, 0) if entry else 0)
            except SequenceError as exc:
                log.error("%s-%d: the hanging transaction of producer id %d could not be aborted: %s",
                          topic, index, pid, exc)  # fmt: skip
                continue
            aborted += 1
            self.hanging.pop((topic, index, pid, first), None)
            log.error(
                "%s-%d: aborted the hanging transaction of producer id %d (epoch %d) open since offset %d, idle for "
                "%d ms: ABORT marker at offset %d; read_committed readers go on past it",
                topic, index, pid, epoch, first, now - since, offset,
            )  # fmt: skip
        if aborted:
            self.hanging_aborted += aborted
            await self._durability.commit()
        return aborted

    async def expire_ids(self, now: int | None = None) -> int:
        """Forget transactional ids idle for transactional.id.expiration.ms (Kafka's expiry)."""
        now = now_ms() if now is None else now
        due = [
            m
            for m in self.txns.values()
            if m.state in IDLE and not m.pending and now - m.update_ms >= self.settings.id_expiration_ms
        ]
        if due:
            self.store.append([(("x", m.transactional_id), None) for m in due])
            await self._durability.commit()
            for m in due:
                if self.txns.get(m.transactional_id) is m and m.state in IDLE and not m.pending:
                    del self.txns[m.transactional_id]
            log.info("expired %d transactional ids", len(due))
        return len(due)

    # ------------------------------------------------------------------ admin

    def describe(self, tid: str) -> tuple[E, TxnMeta | None]:
        if not tid:
            return E.INVALID_REQUEST, None
        meta = self.txns.get(tid)
        if meta is None or meta.state == TxnState.DEAD:
            return E.TRANSACTIONAL_ID_NOT_FOUND, None
        return E.NONE, meta

    def list(
        self, states: Iterable[str], producer_ids: Iterable[int], duration_ms: int = -1, pattern: str | None = None
    ) -> tuple[E, list[str], list[TxnMeta]]:
        """ListTransactions: (error, unknown state filters, matching transactions)."""
        names = list(states)
        wanted = {s for n in names if (s := TxnState.from_name(n)) is not None}
        unknown = [n for n in names if TxnState.from_name(n) is None]
        pids = set(producer_ids)
        regex = None
        if pattern:
            try:
                regex = re.compile(pattern)
            except re.error:
                return E.INVALID_REGULAR_EXPRESSION, [], []
        now = now_ms()
        out = []
        for tid in sorted(self.txns):
            m = self.txns[tid]
            if m.state == TxnState.DEAD or (pids and m.producer_id not in pids) or (names and m.state not in wanted):
                continue
            if duration_ms >= 0 and now - m.start_ms <= duration_ms:
                continue
            if regex is not None and not regex.fullmatch(tid):
                continue
            out.append(m)
        return E.NONE, unknown, out

    def close(self) -> None:
        self.store.close()
