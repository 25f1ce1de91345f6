"""The log cleaner on real partition files: what is kept, offsets, compressed batches, producers, tombstones,
and the swap cut short at every step (what a kill -9 leaves) recovered on the next open."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

from logbroker.protocol.records import (
    Compression,
    NewRecord,
    build_batch,
    decode_batch,
    decode_records,
    validate_produce,
)
from logbroker.storage import LogConfig, PartitionLog
from logbroker.storage import compaction as c

DAY = 86_400_000


def cfg(**kw: object) -> LogConfig:
    base = {"segment_bytes": 4000, "index_interval_bytes": 200, "cleanup_compact": True, "cleanup_delete": False,
            "min_cleanable_dirty_ratio": 0.01}  # fmt: skip
    return LogConfig(**{**base, **kw})  # type: ignore[arg-type]


def put(plog: PartitionLog, records: list[tuple[bytes | None, bytes | None]], codec: int = Compression.NONE,
        pid: int = -1, seq: int = -1) -> None:  # fmt: skip
    buf = bytearray(build_batch([NewRecord(k, v) for k, v in records], compression=codec, producer_id=pid,
                                producer_epoch=0 if pid >= 0 else -1, base_sequence=seq))  # fmt: skip
    plog.append(buf, validate_produce(buf, 1 << 20))


def everything(plog: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    off = plog.log_start_offset
    while off < plog.next_offset:
        data = plog.read(off, 1 << 20)
        if not data:
            break
        recs = decode_records(bytes(data))
        out += [(r.offset, r.key, r.value) for r in recs if r.offset >= off]
        pos, last = 0, off
        while pos < len(data):  # step past whole batches, empty ones included
            h, _ = decode_batch(bytes(data[pos:]), verify_crc=True)
            last = h.next_offset
            pos += h.batch_length + 12
        off = last
    return out


def latest(history: list[tuple[bytes, bytes | None]]) -> dict[bytes, bytes | None]:
    out: dict[bytes, bytes | None] = {}
    for k, v in history:
        out[k] = v
    return out


def test_compaction_keeps_the_last_value_of_each_key_with_offsets_and_codecs(tmp_path: Path) -> None:
    plog = PartitionLog(tmp_path / "p", cfg(), True)
    rng = random.Random(7)
    history: list[tuple[bytes, bytes | None]] = []
    for i in range(300):
        batch = []
        for _ in range(5):
            k = b"k%03d" % rng.randrange(40)
            v = None if rng.random() < 0.1 else b"v%05d" % len(history)
            batch.append((k, v))
            history.append((k, v))
        put(plog, batch, codec=(Compression.NONE, Compression.GZIP, Compression.ZSTD, Compression.LZ4,
                                Compression.SNAPPY)[i % 5])  # fmt: skip
    put(plog, [(None, b"keyless")])  # Kafka's cleaner drops records without a key
    before = everything(plog)
    size_before = plog.size_bytes
    result = c.clean_now(plog, max_keys=1 << 20)
    assert result is not None and result.records_removed > 0
    after = everything(plog)
    # Offsets are kept, in order; every key still has its latest value (tombstones kept: their segments are new).
    assert [o for o, _k, _v in after] == sorted(o for o, _k, _v in after)
    assert set(after) <= set(before)
    closed_end = plog.segments[-1].base_offset
    want = latest([(k, v) for (o, k, v) in before if k is not None and o < closed_end])
    got = {k: v for o, k, v in after if o < closed_end}
    assert got == want
    assert plog.size_bytes < size_before
    # Reopened: the same log; the checkpoint leaves nothing to do until more is written.
    plog.close()
    again = PartitionLog(tmp_path / "p", cfg(), True)
    assert everything(again) == after
    assert c.plan(again, now_ms=10**13, max_keys=1 << 20) is None or c.read_checkpoint(again.dir)["first_dirty"] > 0


def test_tombstones_go_after_delete_retention_and_reading_a_removed_range_continues(tmp_path: Path) -> None:
    plog = PartitionLog(tmp_path / "p", cfg(delete_retention_ms=DAY), True)
    for i in range(60):
        put(plog, [(b"a", b"%d" % i), (b"b", b"%d" % i)])
    put(plog, [(b"a", None)])  # a tombstone
    for i in range(60):
        put(plog, [(b"c", b"%d" % i)])
    now = int(os_time() * 1000)
    c.clean_now(plog, now_ms=now)
    keys = {k: v for _o, k, v in everything(plog)}
    assert keys.get(b"a", b"x") is None  # kept: delete.retention.ms has not passed
    # A reader positioned inside a removed range continues at the next offset kept.
    kept = [o for o, _k, _v in everything(plog)]
    gap = next(o for o in range(kept[0], kept[-1]) if o not in kept)
    first = decode_records(bytes(plog.read(gap, 1 << 20)))
    assert min(r.offset for r in first if r.offset >= gap) > gap
    # A day later, a cleaning drops the tombstone (its segment is past delete.retention.ms).
    for i in range(60):
        put(plog, [(b"d", b"%d" % i)])
    c.clean_now(plog, now_ms=now + 2 * DAY)
    keys = {k for _o, k, _v in everything(plog)}
    assert b"a" not in keys and {b"b", b"c"} <= keys


def os_time() -> float:
    import time

    return time.time()


def test_the_last_batch_of_each_producer_is_kept_for_its_sequence_state(tmp_path: Path) -> None:
    plog = PartitionLog(tmp_path / "p", cfg(), True)
    for i in range(40):
        put(plog, [(b"k", b"%d" % i)], pid=7, seq=i)
    for i in range(40):
        put(plog, [(b"k", b"later-%d" % i)])
    c.clean_now(plog)
    data = b"".join(bytes(s_read) for s_read in [plog.read(0, 1 << 24)])
    headers = []
    pos = 0
    while pos < len(data):
        h, _ = decode_batch(data[pos:])
        headers.append(h)
        pos += h.batch_length + 12
    assert any(h.producer_id == 7 and h.base_sequence == 39 for h in headers)
    plog.close()
    again = PartitionLog(tmp_path / "p", cfg(), True)
    assert again.producers.producers[7].batches[-1].last_seq == 39


@pytest.mark.parametrize("step", ["staged", "committed", "old-deleted", "index-moved", "log-moved"])
def test_a_swap_cut_short_is_finished_or_undone_on_open(tmp_path: Path, step: str) -> None:
    """The states a kill -9 can leave between the cleaning and the end of the swap."""
    plog = PartitionLog(tmp_path / "p", cfg(), True)
    for i in range(200):
        put(plog, [(b"k%d" % (i % 10), b"v%d" % i)])
    before = everything(plog)
    p = c.plan(plog, int(os_time() * 1000), 1 << 20)
    assert p is not None
    result = c.clean_segments(p.job)
    group = result.groups[0]
    staging = Path(group.staging)
    name = c.segment_name(group.base)
    if step != "staged":
        c.write_marker(group)
    if step in ("old-deleted", "index-moved", "log-moved"):
        for old in group.replaced:
            for suffix in (".log", ".index", ".timeindex"):
                (plog.dir / f"{c.segment_name(old)}{suffix}").unlink(missing_ok=True)
    if step in ("index-moved", "log-moved"):
        for suffix in (".index", ".timeindex"):
            os.replace(staging / f"{name}{suffix}", plog.dir / f"{name}{suffix}")
    if step == "log-moved":
        os.replace(staging / f"{name}.log", plog.dir / f"{name}.log")
    for seg in plog.segments:
        seg.close()
    again = PartitionLog(tmp_path / "p", cfg(), clean_shutdown=False)
    assert not list(again.dir.glob(f"{c.STAGING_PREFIX}*"))
    after = everything(again)
    if step == "staged":  # not committed: the old segments stand
        assert after == before
    else:  # committed: the cleaned group is in place, nothing it should keep is lost
        assert latest([(k, v) for _o, k, v in before]) == latest([(k, v) for _o, k, v in after])
        assert set(after) <= set(before) and len(after) < len(before)
        untouched = [x for x in before if x[0] >= again.segments[1].base_offset]
        assert [x for x in after if x[0] >= again.segments[1].base_offset] == untouched
    shutil.rmtree(tmp_path / "p")
