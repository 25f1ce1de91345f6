"""The transaction coordinator in process, on real partition logs and a real state log: what is kept on
disk across many transactions and a reopen (the black-box behaviour is in test_transactions.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path

from logbroker.broker.txn import TxnCoordinator, TxnSettings, TxnState, TxnStore
from logbroker.protocol.errors import ErrorCode as E
from logbroker.protocol.records import TRANSACTIONAL_FLAG, NewRecord, build_batch, validate_produce
from logbroker.storage import LogConfig, PartitionLog
from logbroker.storage.internal import COMPACT_MIN_RECORDS


class Node:
    """The coordinator's seams on a data directory: one partition log, fsync on every commit."""

    def __init__(self, data: Path) -> None:
        self.data = data
        self.plog = PartitionLog(data / "t-0", LogConfig(), True)
        self.completed: list[tuple[int, bool]] = []
        self._ids = iter(range(1000, 10**6))
        self.coord = self._coordinator()

    # OpenTransactions
    def log(self, topic: str, partition: int) -> PartitionLog | None:
        return self.plog if (topic, partition) == ("t", 0) else None

    def with_open_transactions(self) -> list[tuple[str, int, PartitionLog]]:
        return [("t", 0, self.plog)] if self.plog.producers.ongoing else []

    def table(self) -> dict[str, tuple[str, int]]:
        return {}

    def by_id(self, topic_id: str | None) -> None:
        return None

    # Durability
    async def commit(self) -> None:
        self.plog.sync()
        self.store.log.sync()

    def defer(self, delay: float) -> None:
        self.plog.sync()
        self.store.log.sync()

    # ProducerIds
    def next_id(self) -> int:
        return next(self._ids)

    # TxnOffsets
    async def complete_txn(self, producer_id: int, groups: Iterable[str], commit: bool) -> None:
        self.completed.append((producer_id, commit))

    def _coordinator(self) -> TxnCoordinator:
        self.store = TxnStore(self.data, clean_shutdown=True)
        return TxnCoordinator(
            self.store,
            TxnSettings(max_timeout_ms=900_000, id_expiration_ms=10**9, abort_interval_ms=10**6,
                        expire_interval_ms=10**6),
            logs=self, durability=self, producer_ids=self, offsets=self,
        )  # fmt: skip

    def reopen(self) -> None:
        self.coord.close()
        self.coord = self._coordinator()

    def produce(self, pid: int, epoch: int, seq: int) -> None:
        buf = bytearray(build_batch([NewRecord(None, b"v")], producer_id=pid, producer_epoch=epoch,
                                    base_sequence=seq, flags=TRANSACTIONAL_FLAG))  # fmt: skip
        self.plog.append(buf, validate_produce(buf, 1 << 20))


def test_the_state_log_is_compacted_while_running_and_reopens_to_the_same_state(tmp_path: Path) -> None:
    node = Node(tmp_path)

    async def run() -> None:
        c = node.coord
        init = await c.init_producer_id("a", 60_000, -1, -1)
        assert init.error == E.NONE
        pid, epoch = init.producer_id, init.epoch
        rounds = COMPACT_MIN_RECORDS  # three records each: far more than one per id
        for i in range(rounds):
            assert await c.add_partitions("a", pid, epoch, {("t", 0)}) == E.NONE
            node.produce(pid, epoch, i)
            assert await c.end_txn("a", pid, epoch, commit=i % 2 == 0) == E.NONE
        await asyncio.sleep(0)  # the unawaited Complete writes
        await asyncio.gather(*c._tasks)
        before = sum(p.stat().st_size for p in (tmp_path / "__transactions").glob("*.log"))
        assert c.compact()
        after = sum(p.stat().st_size for p in (tmp_path / "__transactions").glob("*.log"))
        assert after < before / 100
        assert not c.compact()  # nothing superseded any more
        # And the log goes on working after the rewrite.
        assert await c.add_partitions("a", pid, epoch, {("t", 0)}) == E.NONE
        node.produce(pid, epoch, rounds)

    asyncio.run(run())
    node.reopen()
    meta = node.coord.txns["a"]
    assert meta.state == TxnState.ONGOING and meta.partitions == {("t", 0)}
    assert node.plog.last_stable_offset < node.plog.next_offset
    assert len(node.completed) == 0  # no groups took part
