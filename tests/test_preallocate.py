"""Space reserved ahead of small appends (setting log_preallocate_bytes): the reservation never shows as
data, is given back when a segment rolls or the broker stops, and a crash with reserved space loses and
reports nothing. Real files, and a real broker killed with SIGKILL."""

from __future__ import annotations

import os
from pathlib import Path

import confluent_kafka as ck
import pytest

from logbroker.protocol.records import NewRecord, build_batch, decode_records, validate_produce
from logbroker.storage import LogConfig, PartitionLog
from logbroker.storage.segment import RESERVE_AFTER
from logbroker_devtools.testing.process import BrokerProcess
from support import create_topic, data_end, read_topic

RESERVE = 64 << 10


def value(i: int) -> bytes:
    """~400 B: a few hundred records fill a segment past RESERVE_AFTER, where reserving starts."""
    return f"value-{i}".encode().ljust(400, b".")


def append_records(plog: PartitionLog, first: int, count: int) -> None:
    for i in range(first, first + count):
        buf = bytearray(build_batch([NewRecord(str(i).encode(), value(i))]))
        plog.append(buf, validate_produce(buf, 1 << 20))


def values(plog: PartitionLog) -> list[bytes]:
    """Every record value in the log, through the log's own read path (CRCs checked)."""
    out, offset = [], plog.log_start_offset
    while offset < plog.next_offset:
        data = bytes(plog.read(offset, 1 << 20))
        assert data, f"no batch returned at offset {offset} of {plog.next_offset}"
        for rec in decode_records(data):
            out.append(rec.value)
            offset = rec.offset + 1
    return out


def segment_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))


def test_small_appends_reserve_space_that_reads_never_return_and_close_gives_back(tmp_path: Path) -> None:
    plog = PartitionLog(tmp_path / "p", LogConfig(), clean_shutdown=True, preallocate=RESERVE)
    append_records(plog, 0, 200)
    (seg,) = segment_files(tmp_path / "p")
    stored = plog.active.size
    assert seg.stat().st_size > stored and seg.stat().st_size % 4096 == 0  # reserved ahead, page-rounded
    assert data_end(seg) == stored
    assert values(plog) == [value(i) for i in range(200)]
    plog.close()
    assert seg.stat().st_size == stored
    again = PartitionLog(tmp_path / "p", LogConfig(), clean_shutdown=True, preallocate=RESERVE)
    append_records(again, 200, 10)
    assert values(again) == [value(i) for i in range(210)]
    again.close()
    assert seg.stat().st_size == data_end(seg)


def test_a_crash_with_reserved_space_loses_and_reports_nothing(tmp_path: Path) -> None:
    """Opened again without the clean-stop marker (as after kill -9): the zeros past the data are not
    torn data; the next append lands right after the last batch."""
    plog = PartitionLog(tmp_path / "p", LogConfig(), clean_shutdown=True, preallocate=RESERVE)
    append_records(plog, 0, 300)
    plog.sync()
    (seg,) = segment_files(tmp_path / "p")
    assert seg.stat().st_size > data_end(seg)
    # No close: the crashed broker's descriptors simply vanish.
    after = PartitionLog(tmp_path / "p", LogConfig(), clean_shutdown=False, preallocate=RESERVE)
    assert after.truncations == [] and after.truncated_bytes == 0
    assert after.next_offset == 300
    append_records(after, 300, 5)
    assert values(after) == [value(i) for i in range(305)]
    after.close()


def test_damage_inside_reserved_space_is_still_reported(tmp_path: Path) -> None:
    """Bytes that are not zeros after the last batch are damage, reservation or not."""
    plog = PartitionLog(tmp_path / "p", LogConfig(), clean_shutdown=True, preallocate=RESERVE)
    append_records(plog, 0, 200)
    plog.sync()
    (seg,) = segment_files(tmp_path / "p")
    end = data_end(seg)
    assert seg.stat().st_size > end + 104
    with open(seg, "r+b") as f:
        f.seek(end + 100)
        f.write(b"torn")
    after = PartitionLog(tmp_path / "p", LogConfig(), clean_shutdown=False, preallocate=RESERVE)
    assert after.truncated_bytes > 0 and after.next_offset == 200
    assert seg.stat().st_size == end
    after.close()


def test_a_rolled_segment_ends_at_its_last_batch(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=128 << 10)  # ~270 records each: the fourth, active, holds ~87 KB
    plog = PartitionLog(tmp_path / "p", cfg, clean_shutdown=True, preallocate=RESERVE)
    append_records(plog, 0, 1000)
    files = segment_files(tmp_path / "p")
    assert len(files) == 4 and data_end(files[-1]) > RESERVE_AFTER
    for seg in files[:-1]:
        assert seg.stat().st_size == data_end(seg) > 0, seg
    assert files[-1].stat().st_size > data_end(files[-1])  # only the active one has space ahead
    assert values(plog) == [value(i) for i in range(1000)]
    plog.close()


def test_large_appends_small_segments_and_a_zero_setting_reserve_nothing(tmp_path: Path) -> None:
    plog = PartitionLog(tmp_path / "big", LogConfig(), clean_shutdown=True, preallocate=RESERVE)
    buf = bytearray(build_batch([NewRecord(b"k", os.urandom(RESERVE))]))
    plog.append(buf, validate_produce(buf, 1 << 20))
    (seg,) = segment_files(tmp_path / "big")
    assert seg.stat().st_size == len(buf)
    plog.close()
    small = PartitionLog(tmp_path / "small", LogConfig(), clean_shutdown=True, preallocate=RESERVE)
    append_records(small, 0, 20)  # a partition that gets a few records pays no fallocate and no space
    (seg,) = segment_files(tmp_path / "small")
    assert seg.stat().st_size == data_end(seg) < RESERVE_AFTER
    small.close()
    off = PartitionLog(tmp_path / "off", LogConfig(), clean_shutdown=True, preallocate=0)
    append_records(off, 0, 300)
    (seg,) = segment_files(tmp_path / "off")
    assert seg.stat().st_size == data_end(seg) > RESERVE_AFTER
    off.close()


@pytest.mark.timeout(120)
def test_broker_killed_with_reserved_space_keeps_every_acknowledged_record(tmp_path: Path) -> None:
    """One-record acks=all requests (each synced on its own, into reserved space), kill -9, restart: every
    acknowledged record is there, nothing is reported truncated, and a clean stop trims the file."""
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    try:
        topic = "prealloc"
        create_topic(broker.bootstrap, topic)
        p = ck.Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0,
                         "max.in.flight.requests.per.connection": 1})  # fmt: skip
        for i in range(300):
            p.produce(topic, value=value(i))
            p.flush(10)
        assert len(p) == 0
        broker.kill()
        (seg,) = segment_files(broker.data_dir / f"{topic}-0")
        stored = data_end(seg)
        assert seg.stat().st_size > stored  # the crash left reserved space behind the data
        broker.start()
        assert [m.value() for m in read_topic(broker.bootstrap, topic)] == [value(i) for i in range(300)]
        assert "truncated" not in broker.log_path.read_text()
        p = ck.Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
        p.produce(topic, value=b"after")
        assert p.flush(10) == 0
        assert broker.stop() == 0
        assert seg.stat().st_size == data_end(seg) > stored
        broker.start()
        got = [m.value() for m in read_topic(broker.bootstrap, topic)]
        assert got == [value(i) for i in range(300)] + [b"after"]
    finally:
        broker.kill()
