"""The log cleaner on real partition files: what is kept, offsets, compressed batches, producers, tombstones,
and the swap cut short at every step (what a kill -9 leaves) recovered on the next open."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

from logbroker.protocol.records import (
    ABORT,
    TRANSACTIONAL_FLAG,
    BatchHeader,
    Compression,
    NewRecord,
    build_batch,
    control_type,
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


def test_an_open_leaves_the_staging_of_a_live_worker_and_a_second_worker_waits_for_it(tmp_path: Path) -> None:
    """A worker still writing (a killed broker's, not yet gone) holds the partition's cleaning lock: an open
    leaves its staging directory, and a second worker starts only once the first has let go."""
    import subprocess
    import sys
    import threading

    plog = PartitionLog(tmp_path / "p", cfg(), True)
    for i in range(200):
        put(plog, [(b"k%d" % (i % 10), b"v%d" % i)])
    before = everything(plog)
    p = c.plan(plog, int(os_time() * 1000), 1 << 20)
    assert p is not None
    staged = c.clean_segments(p.job).groups[0]  # uncommitted: no marker
    for seg in plog.segments:
        seg.close()
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR); fcntl.flock(fd, fcntl.LOCK_EX); "
        "print('held', flush=True); sys.stdin.read()"), str(plog.dir / c.LOCK)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        again = PartitionLog(tmp_path / "p", cfg(), clean_shutdown=False)
        assert Path(staged.staging).is_dir()  # left to its writer
        assert everything(again) == before
        done = threading.Event()
        second = threading.Thread(target=lambda: (c.clean_segments(p.job), done.set()))
        second.start()
        assert not done.wait(0.5)  # waits for the lock
    finally:
        holder.kill()
        holder.wait()
    second.join(10)
    assert done.is_set()
    for seg in again.segments:
        seg.close()
    third = PartitionLog(tmp_path / "p", cfg(), clean_shutdown=False)  # no live writer: discarded
    assert not list(third.dir.glob(f"{c.STAGING_PREFIX}*"))
    assert everything(third) == before


# ------------------------------------------------------------------------------------------ transactions


class Txn:
    """A transactional producer writing straight into a log (sequences per producer id)."""

    def __init__(self, plog: PartitionLog, pid: int) -> None:
        self.plog, self.pid, self.seq = plog, pid, 0

    def send(self, records: list[tuple[bytes, bytes | None]]) -> int:
        buf = bytearray(build_batch([NewRecord(k, v) for k, v in records], producer_id=self.pid, producer_epoch=0,
                                    base_sequence=self.seq, flags=TRANSACTIONAL_FLAG))  # fmt: skip
        headers = validate_produce(buf, 1 << 20)
        self.plog.check_duplicates(headers)
        self.seq += len(records)
        return self.plog.append(buf, headers)[0]

    def end(self, commit: bool) -> int:
        return self.plog.append_marker(self.pid, 0, commit)[0]


def filler(plog: PartitionLog, n: int, tag: bytes = b"f") -> None:
    """Plain records of keys of their own, enough to roll segments (4000 bytes each)."""
    for i in range(n):
        put(plog, [(tag + b"%03d" % (i % 50), b"x" * 40)])


def stored(plog: PartitionLog) -> list[tuple[BatchHeader, list, bytes]]:
    """Every stored batch (empty and control ones too) with its data records and bytes, CRC checked."""
    out = []
    for seg in plog.segments:
        data = os.pread(seg.fd, seg.size, 0)
        pos = 0
        while pos < len(data):
            h, recs = decode_batch(data[pos:], verify_crc=True)
            out.append((h, recs, data[pos : pos + h.batch_length + 12]))
            pos += h.batch_length + 12
    return out


def batches(plog: PartitionLog) -> list[tuple[BatchHeader, list]]:
    return [(h, recs) for h, recs, _raw in stored(plog)]


def read_committed(plog: PartitionLog) -> dict[bytes, bytes | None]:
    """What a read_committed consumer ends with: records below the LSO, aborted ones skipped the way Kafka's
    consumer skips them (the fetch's aborted transactions, closed by the producer's ABORT marker)."""
    lso = plog.last_stable_offset
    pending = sorted(plog.aborted_transactions(plog.log_start_offset, lso), key=lambda e: e.first_offset)
    aborting: set[int] = set()
    out: dict[bytes, bytes | None] = {}
    for h, recs, raw in stored(plog):
        if h.base_offset >= lso:
            break
        while pending and pending[0].first_offset <= h.last_offset:
            aborting.add(pending.pop(0).producer_id)
        if h.is_control:
            if control_type(raw) == ABORT:
                aborting.discard(h.producer_id)
            continue
        if h.is_transactional and h.producer_id in aborting:
            continue
        for r in recs:
            out[r.key] = r.value
    return out


def ours(plog: PartitionLog) -> dict[bytes, bytes | None]:
    """The read_committed view of the test's own one-letter keys (not the filler's)."""
    return {k: v for k, v in read_committed(plog).items() if len(k) == 1}


def stored_values(plog: PartitionLog, key: bytes) -> list[bytes | None]:
    return [r.value for _h, recs in batches(plog) for r in recs if r.key == key]


def test_aborted_records_are_removed_and_never_hide_the_committed_value(tmp_path: Path) -> None:
    """Commit k=v1, abort k=v2 (a later offset), leave k=v3 open: Kafka's cleaner keeps v1 for read_committed
    readers, drops v2 and does not touch the open transaction (nor anything from the segment holding it on)."""
    plog = PartitionLog(tmp_path / "p", cfg(), True)
    t1, t2, t3 = Txn(plog, 1), Txn(plog, 2), Txn(plog, 3)
    t1.send([(b"k", b"v1"), (b"j", b"j1")])
    t1.end(commit=True)
    filler(plog, 60)
    t2.send([(b"k", b"v2-aborted")])
    t2.send([(b"j", b"j2-aborted"), (b"only-aborted", b"x")])
    t2.end(commit=False)
    filler(plog, 60, b"g")
    open_at = t3.send([(b"k", b"v3-open")])
    filler(plog, 120, b"h")  # closes the open transaction's segment and a few more
    assert plog.last_stable_offset == open_at
    open_seg = next(s for s in plog.segments if s.base_offset <= open_at < s.next_offset)
    assert open_seg is not plog.active

    def from_open_segment() -> dict[int, bytes]:
        return {s.base_offset: os.pread(s.fd, s.size, 0) for s in plog.segments if s.next_offset > open_at}

    untouched = from_open_segment()
    entries = plog.aborted_transactions(0, plog.next_offset)
    assert [(e.producer_id, e.first_offset) for e in entries] == [(2, entries[0].first_offset)]
    before = read_committed(plog)
    assert before[b"k"] == b"v1" and before[b"j"] == b"j1" and b"only-aborted" not in before

    result = c.clean_now(plog)
    assert result is not None and result.end <= open_seg.base_offset
    assert read_committed(plog) == before
    assert stored_values(plog, b"k") == [b"v1", b"v3-open"]  # the aborted update is gone, the open one stays
    assert stored_values(plog, b"j") == [b"j1"] and stored_values(plog, b"only-aborted") == []
    assert from_open_segment() == untouched
    assert plog.last_stable_offset == open_at
    # Nothing more to do while the transaction is open, however far the clock goes.
    assert c.plan(plog, now_ms=10**13, max_keys=1 << 20) is None

    # Committed: the range reaches past it; v3 is now k's value and v1 goes.
    t3.end(commit=True)
    filler(plog, 120, b"i")
    c.clean_now(plog)
    assert stored_values(plog, b"k") == [b"v3-open"]
    assert read_committed(plog)[b"k"] == b"v3-open"
    plog.close()
    again = PartitionLog(tmp_path / "p", cfg(), True)
    assert read_committed(again)[b"k"] == b"v3-open" and again.last_stable_offset == again.next_offset


def test_the_aborted_index_survives_cleaning_and_a_restart_and_markers_go_after_the_horizon(tmp_path: Path) -> None:
    """Kafka's CleanedTransactionMetadata: the first cleaning removes an aborted transaction's records but keeps
    its entry and marker; the next one finds nothing of it left, drops the entry and gives the marker a delete
    horizon of delete.retention.ms; a cleaning past the horizon removes the marker. The same for a COMMIT
    marker once its records are overwritten. A marker whose committed records are still there stays, and a
    producer's last marker stays (it fences zombies)."""
    now = int(os_time() * 1000)
    plog = PartitionLog(tmp_path / "p", cfg(delete_retention_ms=DAY), True)
    kept, gone, last = Txn(plog, 1), Txn(plog, 2), Txn(plog, 3)
    kept.send([(b"a", b"a1")])
    kept_marker = kept.end(commit=True)  # a1 is overwritten below: this marker is spent after the first round
    first = gone.send([(b"a", b"a2-aborted")])
    gone_marker = gone.end(commit=False)
    gone.send([(b"b", b"b1")])
    b_marker = gone.end(commit=True)  # b1 stays: so does this marker
    last.send([(b"c", b"c-aborted")])
    last_marker = last.end(commit=False)  # producer 3's last batch: stays whatever happens
    put(plog, [(b"a", b"a-plain")])
    kept.send([(b"d", b"d1")])
    kept.end(commit=True)
    filler(plog, 120)
    want = ours(plog)
    entries = plog.aborted_transactions(0, plog.next_offset)
    want_entries = [(2, first, gone_marker), (3, last_marker - 1, last_marker)]
    assert [(e.producer_id, e.first_offset, e.last_offset) for e in entries] == want_entries

    def markers() -> set[int]:
        return {h.base_offset for h, _r in batches(plog) if h.is_control}

    assert want[b"a"] == b"a-plain" and want[b"b"] == b"b1" and b"c" not in want
    c.clean_now(plog, now_ms=now)
    assert stored_values(plog, b"a") == [b"a-plain"] and stored_values(plog, b"c") == []
    assert ours(plog) == want
    assert plog.aborted_transactions(0, plog.next_offset) == entries  # kept: the round began with their records
    assert {kept_marker, gone_marker, b_marker, last_marker} <= markers()
    plog.close()
    plog = PartitionLog(tmp_path / "p", cfg(delete_retention_ms=DAY), True)
    assert plog.aborted_transactions(0, plog.next_offset) == entries and ours(plog) == want

    # Second round: nothing of the aborted transactions is left, so their entries go; the spent markers get a
    # delete horizon in their header (Kafka's attribute), their record's timestamp unchanged.
    filler(plog, 120, b"g")
    stamps = {h.base_offset: [r.timestamp for r in recs] for h, recs in batches(plog) if h.is_control}
    c.clean_now(plog, now_ms=now)
    assert plog.aborted_transactions(0, plog.next_offset) == []
    horizons = {h.base_offset: h.base_timestamp for h, _r in batches(plog) if h.attributes & c.DELETE_HORIZON_FLAG}
    assert horizons == {kept_marker: now + DAY, gone_marker: now + DAY, last_marker: now + DAY}
    assert {h.base_offset: [r.timestamp for r in recs] for h, recs in batches(plog) if h.is_control} == stamps
    assert ours(plog) == want
    # Before the horizon they stay; past it, they go (the producer's last marker excepted).
    filler(plog, 120, b"h")
    c.clean_now(plog, now_ms=now + DAY - 1)
    assert {kept_marker, gone_marker, b_marker, last_marker} <= markers()
    assert c.read_checkpoint(plog.dir)["tombstones_until"] == now + DAY  # the cleaner comes back then
    filler(plog, 120, b"i")
    c.clean_now(plog, now_ms=now + DAY + 1)
    assert kept_marker not in markers() and gone_marker not in markers() and {b_marker, last_marker} <= markers()
    assert ours(plog) == want
    # Rebuilt from the log alone (no producer snapshot): no transaction looks open, no abort is invented.
    plog.close()
    (plog.dir / "producer-state.json").unlink()
    again = PartitionLog(tmp_path / "p", cfg(delete_retention_ms=DAY), True)
    assert again.last_stable_offset == again.next_offset
    assert ours(again) == want


def test_an_aborted_transaction_whose_marker_is_past_the_range_is_removed_and_keeps_its_entry(tmp_path: Path) -> None:
    plog = PartitionLog(tmp_path / "p", cfg(), True)
    t = Txn(plog, 4)
    put(plog, [(b"k", b"plain")])
    first = t.send([(b"k", b"aborted")])  # the key's last record, but aborted: the plain value must stay
    filler(plog, 120)  # the transaction's batch is in a closed segment, its marker comes in the active one
    marker = t.end(commit=False)
    entries = plog.aborted_transactions(0, plog.next_offset)
    assert [(e.first_offset, e.last_offset) for e in entries] == [(first, marker)]
    c.clean_now(plog)
    assert stored_values(plog, b"k") == [b"plain"]
    assert plog.aborted_transactions(0, plog.next_offset) == entries
    assert read_committed(plog)[b"k"] == b"plain"


@pytest.mark.parametrize("step", ["committed", "others-deleted", "indexes-moved", "txnindex-moved", "log-moved"])
def test_a_swap_cut_short_keeps_the_cleaned_aborted_index(tmp_path: Path, step: str) -> None:
    """A kill -9 at each step of a swap whose new segment has an aborted index: after the open, the entries
    are those of the cleaned segment, no file of a replaced segment is left, and the swap can run twice."""
    plog = PartitionLog(tmp_path / "p", cfg(segment_bytes=1500), True)
    t = Txn(plog, 9)
    for i in range(4):
        t.send([(b"k", b"aborted-%d" % i)])
        filler(plog, 12)  # a few segments between the transaction's batches and its marker
    put(plog, [(b"k", b"plain")])
    t.end(commit=False)
    filler(plog, 40, b"g")
    entries = plog.aborted_transactions(0, plog.next_offset)
    assert len(entries) == 1
    want = read_committed(plog)
    plog.config.segment_bytes = 1 << 20  # cleaned into one segment
    p = c.plan(plog, int(os_time() * 1000), 1 << 20)
    assert p is not None
    result = c.clean_segments(p.job)
    assert len(result.groups) == 1 and len(result.groups[0].replaced) > 3
    group = result.groups[0]
    staging = Path(group.staging)
    name = c.segment_name(group.base)
    c.write_marker(group)
    if step != "committed":
        for old in group.replaced[1:]:
            for suffix in c.SUFFIXES:
                (plog.dir / f"{c.segment_name(old)}{suffix}").unlink(missing_ok=True)
    moved = {"indexes-moved": (".index", ".timeindex"), "txnindex-moved": (".index", ".timeindex", ".txnindex"),
             "log-moved": c.SUFFIXES}.get(step, ())  # fmt: skip
    for suffix in moved:
        os.replace(staging / f"{name}{suffix}", plog.dir / f"{name}{suffix}")
    for seg in plog.segments:
        seg.close()
    again = PartitionLog(tmp_path / "p", cfg(segment_bytes=1500), clean_shutdown=False)
    assert not list(again.dir.glob(f"{c.STAGING_PREFIX}*"))
    assert again.aborted_transactions(0, again.next_offset) == entries
    assert read_committed(again) == want and stored_values(again, b"k") == [b"plain"]
    bases = {s.base_offset for s in again.segments}
    assert {int(f.name.split(".")[0]) for f in again.dir.iterdir() if f.name[0].isdigit()} == bases
    # Recovery running the same swap again (a crash during recovery) changes nothing.
    c.finish_swap(again.dir, staging)
    assert (again.dir / f"{name}.txnindex").stat().st_size > 0
