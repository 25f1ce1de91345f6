"""The fsync group commit's two shortcuts: a lone commit of a small write syncs on the event loop's thread,
and a round over many files syncs each file system once (syncfs). Both must leave every written log synced
and say so in the flusher's counts; a descriptor closed under a round (retention) must not fail it."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from logbroker.broker.flusher import INLINE_MAX_BYTES, SYNCFS_MIN_FILES, Flusher, _sync_fds
from logbroker.config import FsyncPolicy
from logbroker.protocol.records import NewRecord, build_batch, validate_produce
from logbroker.storage import LogConfig, PartitionLog


def _logs(tmp_path: Path, n: int) -> list[PartitionLog]:
    logs = [PartitionLog(tmp_path / f"p{i}", LogConfig(), True) for i in range(n)]
    for plog in logs:
        plog.sync()  # created clean: only what the test writes is unsynced
    return logs


def _write(plog: PartitionLog, flusher: Flusher, size: int = 100) -> None:
    buf = bytearray(build_batch([NewRecord(None, b"x" * size)]))
    plog.append(buf, validate_produce(buf, 1 << 20))
    flusher.written(plog, len(buf))


def test_a_lone_commit_syncs_inline_and_shared_ones_on_the_thread(tmp_path: Path) -> None:
    async def main() -> tuple[int, int]:
        busy = [1]
        flusher = Flusher(FsyncPolicy.ALWAYS, 0, solo=lambda: busy[0] <= 1)
        flusher.start()
        [plog] = _logs(tmp_path, 1)
        _write(plog, flusher)
        await flusher.commit()  # alone: inline
        assert not plog.unsynced
        _write(plog, flusher, INLINE_MAX_BYTES)
        await flusher.commit()  # alone but large: the sync takes a while, the loop goes on receiving
        busy[0] = 3  # two more requests in progress: their commits share a round on the thread
        _write(plog, flusher)
        await asyncio.gather(flusher.commit(), flusher.commit())
        assert not plog.unsynced
        await flusher.close()
        plog.close()
        return flusher.inline_rounds, flusher.rounds

    inline, rounds = asyncio.run(main())
    assert inline == 1
    assert rounds == 3  # the inline round, the large write's and one shared round for both waiters


def test_a_round_over_many_files_syncs_them_all(tmp_path: Path) -> None:
    async def main() -> None:
        flusher = Flusher(FsyncPolicy.ALWAYS, 0, solo=lambda: False)
        flusher.start()
        logs = _logs(tmp_path, SYNCFS_MIN_FILES + 4)
        for plog in logs:
            _write(plog, flusher)
        await flusher.commit()
        assert not any(plog.unsynced for plog in logs)
        await flusher.close()
        for plog in logs:
            plog.close()

    asyncio.run(main())


def test_a_descriptor_closed_under_a_round_does_not_fail_it(tmp_path: Path) -> None:
    fds = [os.open(tmp_path / f"f{i}", os.O_RDWR | os.O_CREAT) for i in range(SYNCFS_MIN_FILES + 2)]
    try:
        os.close(fds[0])  # retention deleted a segment between the take and the sync
        _sync_fds(fds)  # syncfs path
        _sync_fds(fds[:2])  # fdatasync path
    finally:
        for fd in fds[1:]:
            os.close(fd)


def test_a_descriptor_a_round_synced_closes_without_syncing_again(tmp_path: Path, monkeypatch) -> None:
    """The descriptor budget closes the least recently used file: when a round already covered every write
    through it, the close syncs nothing (over 10,000 partitions that was an fdatasync per eviction); a
    write no round covered yet is synced as it closes, as before."""
    from logbroker.storage.files import FileCache

    synced: list[str] = []
    real = os.fdatasync

    def counting(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fdatasync", counting)

    async def main() -> None:
        flusher = Flusher(FsyncPolicy.ALWAYS, 0, solo=lambda: False)  # every commit a round on the thread
        flusher.start()
        files = FileCache(3)  # one segment's three files at a time: each log evicts the other's
        a, b = (PartitionLog(tmp_path / name, LogConfig(), True, files=files) for name in "ab")
        _write(a, flusher)
        await flusher.commit()
        assert [p for p in synced if p.endswith(".log")] == [str(a.active.log_path)]
        synced.clear()
        _write(b, flusher)  # a's log is evicted: a round covered its write
        assert files.evictions and not synced
        _write(a, flusher)  # b's log is evicted before any round covered its write: synced as it closes
        assert synced == [str(b.active.log_path)]
        await flusher.commit()
        await flusher.close()
        a.close()
        b.close()

    asyncio.run(main())


def test_a_deferred_write_is_synced_within_the_delay_or_by_an_earlier_round(tmp_path: Path) -> None:
    """`defer` (offset commits under offsets_commit_sync=shared): nothing waits, yet the write is synced by a
    round of its own within the delay when nothing else syncs, or by the next round another commit runs."""

    async def main() -> None:
        flusher = Flusher(FsyncPolicy.ALWAYS, 0, solo=lambda: False)
        flusher.start()
        [plog] = _logs(tmp_path, 1)
        _write(plog, flusher)
        flusher.defer(0.2)
        flusher.defer(0.2)  # one round promised, not two
        assert plog.unsynced
        await asyncio.sleep(0.1)
        assert plog.unsynced and flusher.rounds == 0  # not before the delay
        await asyncio.sleep(0.3)
        assert not plog.unsynced and flusher.rounds == 1
        _write(plog, flusher)
        flusher.defer(5.0)
        _write(plog, flusher)
        await flusher.commit()  # a produce's round covers the deferred write long before its delay
        assert not plog.unsynced and flusher.rounds == 2
        _write(plog, flusher)
        flusher.defer(5.0)
        await flusher.close()  # and a clean shutdown syncs it
        assert not plog.unsynced
        plog.close()

    asyncio.run(main())


def test_defer_is_free_under_the_other_policies(tmp_path: Path) -> None:
    async def main() -> None:
        for policy in (FsyncPolicy.INTERVAL, FsyncPolicy.NEVER):
            flusher = Flusher(policy, 60_000)
            flusher.start()
            flusher.defer(0.01)
            await asyncio.sleep(0.05)
            assert flusher.rounds == 0
            await flusher.close()

    asyncio.run(main())
