"""Partition logs on real files: offsets, segments, indexes, recovery, retention, producer state."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from logbroker.protocol.errors import ErrorCode
from logbroker.protocol.records import NewRecord, build_batch, decode_records, validate_produce
from logbroker.storage import LogConfig, LogManager, PartitionLog
from logbroker.storage.manager import TopicError
from logbroker.storage.producers import SequenceError


def append(plog: PartitionLog, values: list[bytes], ts: int | None = None, **kw) -> tuple[int, int]:
    buf = bytearray(build_batch([NewRecord(None, v, timestamp=ts) for v in values], **kw))
    return plog.append(buf, validate_produce(buf, 1 << 20))


def offsets(data: bytes) -> list[int]:
    return [r.offset for r in decode_records(data)]


def test_offsets_are_assigned_contiguously_across_segment_rolls(tmp_path: Path) -> None:
    plog = PartitionLog(tmp_path / "p", LogConfig(segment_bytes=1000, index_interval_bytes=100), True)
    for i in range(100):
        assert append(plog, [b"x" * 20, b"y" * 20]) == (2 * i, 2 * i + 1)
    assert len(plog.segments) > 5
    assert plog.next_offset == 200
    # Every offset is readable, from any segment, starting at the batch that holds it.
    for off in (0, 1, 57, 133, 199):
        got = offsets(plog.read(off, 300))
        assert got[0] <= off <= got[-1] or got[0] == off
    assert plog.read(200, 1000) == b""


def test_read_returns_whole_batches_and_at_least_one(tmp_path: Path) -> None:
    plog = PartitionLog(tmp_path / "p", LogConfig(), True)
    append(plog, [b"a" * 5000])
    append(plog, [b"b" * 10])
    assert offsets(plog.read(0, 100)) == [0]  # over max_bytes, but a consumer must progress
    assert offsets(plog.read(0, 100, first_whole=False)) == []
    assert offsets(plog.read(0, 1 << 20)) == [0, 1]


def test_reopen_after_clean_close_keeps_everything(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=2000)
    plog = PartitionLog(tmp_path / "p", cfg, True)
    for _ in range(40):
        append(plog, [b"v" * 50])
    plog.close()
    again = PartitionLog(tmp_path / "p", cfg, True)
    assert again.next_offset == 40
    assert offsets(again.read(0, 1 << 20))[:3] == [0, 1, 2]
    assert append(again, [b"more"]) == (40, 40)


def test_torn_tail_is_truncated_on_unclean_start(tmp_path: Path) -> None:
    plog = PartitionLog(tmp_path / "p", LogConfig(), True)
    for _ in range(10):
        append(plog, [b"v" * 100])
    seg = plog.active.log_path
    for s in plog.segments:
        s.close()
    good = seg.stat().st_size
    with open(seg, "ab") as f:  # half of a batch, as if the process died mid-write
        f.write(build_batch([NewRecord(None, b"z" * 300)])[:150])
    again = PartitionLog(tmp_path / "p", LogConfig(), clean_shutdown=False)
    assert again.next_offset == 10
    assert seg.stat().st_size == good
    assert again.truncated_bytes == 150
    assert append(again, [b"after"]) == (10, 10)


def test_corrupt_batch_in_tail_is_cut_with_everything_after_it(tmp_path: Path) -> None:
    plog = PartitionLog(tmp_path / "p", LogConfig(), True)
    for _ in range(10):
        append(plog, [b"v" * 100])
    seg = plog.active
    pos, h = seg.position_of(6)
    assert h is not None
    path = seg.log_path
    for s in plog.segments:
        s.close()
    with open(path, "r+b") as f:  # flip a byte inside batch 6's CRC-covered payload
        f.seek(pos + 70)
        b = f.read(1)
        f.seek(pos + 70)
        f.write(bytes([b[0] ^ 0xFF]))
    again = PartitionLog(tmp_path / "p", LogConfig(), clean_shutdown=False)
    assert again.next_offset == 6
    assert offsets(again.read(0, 1 << 20)) == list(range(6))


@pytest.mark.parametrize("damage", ["delete", "garbage", "truncate"])
def test_missing_or_damaged_indexes_are_rebuilt(tmp_path: Path, damage: str) -> None:
    cfg = LogConfig(segment_bytes=3000, index_interval_bytes=200)
    plog = PartitionLog(tmp_path / "p", cfg, True)
    for _ in range(60):
        append(plog, [b"v" * 60])
    plog.close()
    first = sorted((tmp_path / "p").glob("*.index"))[0]
    if damage == "delete":
        first.unlink()
    elif damage == "garbage":
        first.write_bytes(os.urandom(24))
    else:
        first.write_bytes(first.read_bytes()[:-3])
    again = PartitionLog(tmp_path / "p", cfg, True)
    assert again.next_offset == 60
    for off in range(0, 60, 7):
        assert off in offsets(again.read(off, 200))
    assert first.exists() and first.stat().st_size % 8 == 0


def test_offset_for_timestamp_uses_record_timestamps(tmp_path: Path) -> None:
    plog = PartitionLog(tmp_path / "p", LogConfig(index_interval_bytes=50), True)
    for i in range(20):
        append(plog, [b"a", b"b"], ts=1_000_000 + i * 1000)
    assert plog.offset_for_timestamp(1_000_000) == (0, 1_000_000)
    assert plog.offset_for_timestamp(1_005_500) == (12, 1_006_000)
    assert plog.offset_for_timestamp(9_999_999) is None
    assert plog.max_timestamp() == (38, 1_019_000)  # the first record carrying it, as Kafka 4


@pytest.mark.parametrize("how", ["clean", "recovered"])
def test_max_timestamp_from_the_time_index_across_segments_and_restarts(tmp_path: Path, how: str) -> None:
    """The first record carrying the largest timestamp: found through the time index, also after a
    restart that loads the indexes (clean) or rebuilds them (unclean), with maxima between index points."""
    cfg = LogConfig(index_interval_bytes=200, segment_bytes=700)
    plog = PartitionLog(tmp_path / "p", cfg, True)
    assert plog.max_timestamp() == (-1, -1)
    t = 1_000_000
    stamps = [[t + 1, t + 3], [t + 2], [t + 9, t + 4, t + 9], [t + 5], [t + 9], [t + 7, t + 8]] * 3
    for batch in stamps:
        buf = bytearray(build_batch([NewRecord(None, b"x" * 40, timestamp=ts) for ts in batch]))
        plog.append(buf, validate_produce(buf, 1 << 20))
    assert len(plog.segments) > 2
    assert plog.max_timestamp() == (3, t + 9)  # offsets: 0-1, 2, 3-5 (t+9 first at 3)
    plog.close()
    again = PartitionLog(tmp_path / "p", cfg, how == "clean")
    assert again.max_timestamp() == (3, t + 9)
    buf = bytearray(build_batch([NewRecord(None, b"y", timestamp=t + 8), NewRecord(None, b"z", timestamp=t + 10)]))
    again.append(buf, validate_produce(buf, 1 << 20))
    assert again.max_timestamp() == (again.next_offset - 1, t + 10)


def test_retention_by_size_and_time_deletes_whole_old_segments(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=1000, retention_bytes=3000)
    plog = PartitionLog(tmp_path / "p", cfg, True)
    for _ in range(60):
        append(plog, [b"v" * 100])
    before = len(plog.segments)
    assert plog.enforce_retention() > 0
    assert plog.size_bytes <= 3000 + 1000
    assert len(plog.segments) < before
    assert plog.log_start_offset == plog.segments[0].base_offset > 0
    from logbroker.storage.log import OffsetOutOfRange

    with pytest.raises(OffsetOutOfRange):
        plog.read(0, 100)
    # Time: everything but the active segment is older than retention.ms.
    old = int(time.time() * 1000) - 10_000
    cfg2 = LogConfig(segment_bytes=1000, retention_ms=5_000)
    plog2 = PartitionLog(tmp_path / "q", cfg2, True)
    for _ in range(30):
        append(plog2, [b"v" * 100], ts=old)
    plog2.roll()
    append(plog2, [b"new"])
    assert plog2.enforce_retention() > 0
    assert len(plog2.segments) == 1 and plog2.log_start_offset == 30
    # An idle partition whose active segment is all past retention is emptied too (as in Kafka).
    plog3 = PartitionLog(tmp_path / "r", cfg2, True)
    for _ in range(3):
        append(plog3, [b"v"], ts=old)
    assert plog3.enforce_retention() == 1
    assert plog3.log_start_offset == plog3.next_offset == 3
    assert append(plog3, [b"next"]) == (3, 3)


def test_delete_records_moves_log_start_durably(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=1000)
    plog = PartitionLog(tmp_path / "p", cfg, True)
    for _ in range(50):
        append(plog, [b"v" * 100])
    assert plog.delete_records_before(23) == 23
    plog.close()
    again = PartitionLog(tmp_path / "p", cfg, True)
    assert again.log_start_offset == 23
    assert offsets(again.read(23, 10_000))[0] <= 23


def test_idempotent_duplicates_and_gaps(tmp_path: Path) -> None:
    plog = PartitionLog(tmp_path / "p", LogConfig(), True)

    def batch(seq: int, n: int = 2, epoch: int = 0) -> tuple[bytearray, list]:
        buf = bytearray(
            build_batch([NewRecord(None, b"x")] * n, producer_id=7, producer_epoch=epoch, base_sequence=seq)
        )
        return buf, validate_produce(buf, 1 << 20)

    buf, hs = batch(0)
    assert plog.check_duplicates(hs) is None
    assert plog.append(buf, hs) == (0, 1)
    buf, hs = batch(2)
    plog.append(buf, hs)
    dup = plog.check_duplicates(batch(0)[1])
    assert dup is not None and dup.base_offset == 0
    with pytest.raises(SequenceError) as gap:
        plog.check_duplicates(batch(9)[1])
    assert gap.value.error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    with pytest.raises(SequenceError):
        plog.check_duplicates(batch(3, epoch=1)[1])  # a new epoch must restart at 0
    # After an unclean restart, the producer state comes back from the log itself.
    for s in plog.segments:
        s.close()
    again = PartitionLog(tmp_path / "p", LogConfig(), clean_shutdown=False)
    dup = again.check_duplicates(batch(2)[1])
    assert dup is not None and dup.base_offset == 2
    assert again.check_duplicates(batch(4)[1]) is None


def test_manager_topics_survive_restart_and_names_are_checked(tmp_path: Path) -> None:
    m = LogManager(tmp_path, LogConfig())
    m.create_topic("orders", 3, {"retention.ms": "1000"})
    with pytest.raises(TopicError) as e:
        m.create_topic("orders", 1)
    assert e.value.error is ErrorCode.TOPIC_ALREADY_EXISTS
    for bad in ("", "a/b", "x" * 250, ".."):
        with pytest.raises(TopicError):
            m.create_topic(bad, 1)
    with pytest.raises(TopicError) as e:
        m.create_topic("cfg", 1, {"retention.ms": "soon"})
    assert e.value.error is ErrorCode.INVALID_CONFIG
    with pytest.raises(RuntimeError, match="in use"):
        LogManager(tmp_path, LogConfig())
    m.close()
    m2 = LogManager(tmp_path, LogConfig())
    assert m2.clean_start
    assert m2.topics["orders"].partitions == 3
    assert m2.get("orders", 2).config.retention_ms == 1000
    m2.delete_topic("orders")
    assert not list(tmp_path.glob("orders-*"))
    m2.close()


def test_segment_files_share_a_bounded_budget_of_descriptors(tmp_path: Path) -> None:
    """Twenty partitions of several segments each (over 100 files) through a budget of 7 descriptors:
    every write lands, every read comes back, the budget is never exceeded, and a partition reopened
    after a crash-like close (no flush) has everything an eviction closed."""
    from logbroker.storage.files import FileCache

    files = FileCache(7)
    cfg = LogConfig(segment_bytes=300, index_interval_bytes=100)
    logs = [PartitionLog(tmp_path / f"p{i}", cfg, True, files=files) for i in range(20)]
    for round_ in range(12):
        for i, plog in enumerate(logs):
            assert append(plog, [f"{i}:{round_}".encode() * 8]) == (round_, round_)
            assert files.open_count <= 7
    assert files.evictions > 100
    for i, plog in enumerate(logs):
        assert len(plog.segments) > 2
        values = [r.value for r in decode_records(bytes(plog.read(0, 1 << 20)))]
        while len(values) < 12:  # read() stops at a segment's end
            values += [r.value for r in decode_records(bytes(plog.read(len(values), 1 << 20)))]
        assert values == [f"{i}:{r}".encode() * 8 for r in range(12)]
        assert files.open_count <= 7
    # A descriptor closed by the budget was synced first: take_unsynced hands out only open ones.
    fds = [fd for plog in logs for fd in plog.take_unsynced()]
    assert len(fds) <= 7
    before = len(os.listdir("/proc/self/fd"))
    for plog in logs:
        for s in plog.segments:
            s.close()
    assert len(os.listdir("/proc/self/fd")) <= before
    again = PartitionLog(tmp_path / "p3", cfg, clean_shutdown=False)
    assert again.next_offset == 12
    again.close()
