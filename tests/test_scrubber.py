"""Rot in closed segments (issue 32, beyond Kafka: it repairs from replicas, a single broker cannot): a flipped
byte used to leave every reader looping at that offset, and an index rebuild over it dropped the rest of the
segment. Now the damaged stretch is quarantined and readers step over it; the batches after it are kept; a
background scrubber finds such damage before a reader does. On real files, then on a real broker with a
real consumer."""

from __future__ import annotations

import json
import os
import time
import urllib.request
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest

from logbroker.protocol.records import LOG_OVERHEAD, NewRecord, build_batch, decode_batch, validate_produce
from logbroker.storage import LogConfig, PartitionLog
from logbroker.storage import compaction as c
from logbroker.storage.segment import Scrub, scrub_part
from logbroker_devtools.testing.net import free_ports
from logbroker_devtools.testing.process import BrokerProcess
from support import create_topic, unique
from support import flip as _flip

pytestmark = pytest.mark.timeout(300)


def cfg(**kw: Any) -> LogConfig:
    return LogConfig(**{"segment_bytes": 4000, "index_interval_bytes": 200, **kw})


def fill(plog: PartitionLog, n: int, key: bool = False) -> None:
    for i in range(n):
        buf = bytearray(build_batch([NewRecord(b"k%d" % (i % 7) if key else None, b"value-%04d" % i)]))
        plog.append(buf, validate_produce(buf, 1 << 20))


def offsets(plog: PartitionLog) -> list[int]:
    """Every offset readable from the start, reading as a consumer does (from the offset after the last)."""
    out: list[int] = []
    off = plog.log_start_offset
    while off < plog.next_offset:
        data = plog.read(off, 1 << 20)
        if not len(data):
            break
        pos = 0
        while pos < len(data):
            size = int.from_bytes(data[pos + 8 : pos + 12], "big") + LOG_OVERHEAD
            _h, records = decode_batch(bytes(data[pos : pos + size]), verify_crc=True)
            out += [r.offset for r in records]
            pos += size
        off = out[-1] + 1
    return out


def batch_positions(plog: PartitionLog, seg_index: int) -> list[tuple[int, int, int]]:
    """(position, size, base offset) of every batch of a segment."""
    seg = plog.segments[seg_index]
    return [(h.position, h.batch_length + LOG_OVERHEAD, h.base_offset) for h in seg.iter_headers(0)]


def flip(path: Path, at: int) -> None:
    _flip(path, at, 0xFF)


def reopen(plog: PartitionLog, drop_indexes: bool, **kw: Any) -> PartitionLog:
    d = plog.dir
    plog.close()
    if drop_indexes:
        for p in d.glob("*.index"):
            p.unlink()
    return PartitionLog(d, cfg(**kw), clean_shutdown=True)


@pytest.mark.parametrize("where", ["payload", "length"])
def test_an_index_rebuild_keeps_every_intact_batch_after_a_damaged_one(tmp_path: Path, where: str,
                                                                      caplog: Any) -> None:  # fmt: skip
    plog = PartitionLog(tmp_path / "p", cfg(), True)
    fill(plog, 300)
    assert len(plog.segments) >= 3
    before = offsets(plog)
    batches = batch_positions(plog, 0)
    pos, size, base = batches[5]
    # The payload's last byte (the CRC fails) or the length field (the framing no longer parses).
    flip(plog.segments[0].log_path, pos + size - 1 if where == "payload" else pos + 9)
    again = reopen(plog, drop_indexes=True)
    assert offsets(again) == [o for o in before if o != base]  # one record per batch: just its offset gone
    seg = again.segments[0]
    assert [(d.position, d.first_offset, d.last_offset) for d in seg.quarantined] == [(pos, base, base)]
    assert json.loads(seg.quarantine_path.read_text())[0][:4] == [pos, size, base, base]
    assert "quarantined" in caplog.text and f"offset {base}" in caplog.text
    # A reader positioned in the gap continues at the next offset kept, zero-copy reads included.
    data = again.read(base, 1 << 20)
    assert decode_batch(bytes(data[: int.from_bytes(data[8:12], "big") + LOG_OVERHEAD]))[1][0].offset == base + 1
    rng = again.read(base - 3, 1 << 20, zero_copy_min=1)
    assert not isinstance(rng, memoryview) and rng.end_offset == base  # stops before the stretch
    rng.close()
    # It stays fenced off across restarts without another rebuild.
    third = reopen(again, drop_indexes=False)
    assert offsets(third) == [o for o in before if o != base]
    third.close()


def test_damage_in_the_active_segment_is_still_cut_as_kafka_does(tmp_path: Path) -> None:
    plog = PartitionLog(tmp_path / "p", cfg(segment_bytes=1 << 20), True)
    fill(plog, 50)
    pos, size, base = batch_positions(plog, 0)[40]
    flip(plog.segments[0].log_path, pos + size - 1)
    d = plog.dir
    plog.close()
    again = PartitionLog(d, cfg(segment_bytes=1 << 20), clean_shutdown=False)
    assert offsets(again) == list(range(base)) and again.next_offset == base
    assert not again.segments[0].quarantined
    again.close()


def test_the_scrub_finds_rot_that_no_recovery_looks_at_and_readers_step_over_it(tmp_path: Path) -> None:
    plog = PartitionLog(tmp_path / "p", cfg(), True)
    fill(plog, 300)
    before = offsets(plog)
    pos, size, base = batch_positions(plog, 1)[3]
    seg = plog.segments[1]
    flip(seg.log_path, pos + size - 1)
    state = Scrub(0, seg.base_offset, [])
    while state.position < seg.size:
        state = scrub_part(seg.fd, state, seg.size, seg.next_offset, {}, 1000)
    assert [(d.position, d.first_offset) for d in state.found] == [(pos, base)]
    assert state.verified == seg.size  # the damaged bytes were read too
    assert seg.quarantine(state.found) and not seg.quarantine(state.found)  # recorded once
    assert offsets(plog) == [o for o in before if o != base]
    # Compaction cleans around the stretch and the cleaned segment carries no quarantine.
    plog.close()
    compacted = PartitionLog(tmp_path / "q", cfg(cleanup_compact=True, cleanup_delete=False,
                                                  min_cleanable_dirty_ratio=0.01), True)  # fmt: skip
    fill(compacted, 300, key=True)
    seg = compacted.segments[0]
    pos, size, _base = batch_positions(compacted, 0)[2]
    flip(seg.log_path, pos + size - 1)
    seg.quarantine(scrub_part(seg.fd, Scrub(0, seg.base_offset, []), seg.size, seg.next_offset, {}, 1 << 30).found)
    assert c.clean_now(compacted) is not None
    assert not list(compacted.dir.glob("*.quarantine"))
    assert all(not s.quarantined for s in compacted.segments)
    compacted.close()


N = 1000


def test_a_broker_scrubs_and_a_consumer_reads_past_rot(tmp_path: Path) -> None:
    """The issue's case on a real broker: a flipped byte in an old segment, indexes intact (no recovery looks
    at it). The scrubber finds it and a consumer from the beginning gets every other record, not stuck."""
    plain, metrics = free_ports(2)
    proc = BrokerProcess(tmp_path / "data", port=plain, env={
        "LOGBROKER_LOG_SCRUBBER_INTERVAL_MS": "1000", "LOGBROKER_METRICS_LISTEN": f"127.0.0.1:{metrics}"})  # fmt: skip
    with proc:
        topic = create_topic(proc.bootstrap, unique("rot"), config={"segment.bytes": "4096"})
        p = ck.Producer({"bootstrap.servers": proc.bootstrap, "linger.ms": 0, "batch.num.messages": 5})
        for i in range(N):
            p.produce(topic, value=b"v%04d" % i)
            p.poll(0)
        assert p.flush(30) == 0
    d = tmp_path / "data" / f"{topic}-0"
    logs = sorted(d.glob("*.log"))
    assert len(logs) >= 3
    old = PartitionLog(d, cfg(segment_bytes=4096), True)
    pos, size, base = batch_positions(old, 1)[2]
    n_in_batch = sum(1 for _ in decode_batch(old.segments[1].batch_at(base))[1])
    old.close()
    flip(logs[1], pos + size - 1)
    with proc:
        deadline = time.monotonic() + 60
        while "found by the scrubber" not in proc.log_path.read_text():
            assert time.monotonic() < deadline, proc.log_tail()
            time.sleep(0.2)
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=10) as r:
            text = r.read().decode()
        assert "logbroker_scrubber_damaged_batches_total 1.0" in text and "logbroker_quarantined_batches 1.0" in text
        c = ck.Consumer({"bootstrap.servers": proc.bootstrap, "group.id": unique("g"), "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})  # fmt: skip
        try:
            c.subscribe([topic])
            got: list[int] = []
            deadline = time.monotonic() + 60
            while len(got) < N - n_in_batch and time.monotonic() < deadline:
                m = c.poll(1.0)
                if m is not None and not m.error():
                    got.append(m.offset())
        finally:
            c.close()
        assert got == [o for o in range(N) if not base <= o < base + n_in_batch]
    assert os.path.exists(d / (logs[1].stem + ".quarantine"))


def test_several_stretches_and_reads_from_every_offset_return_only_intact_batches(tmp_path: Path) -> None:
    """Two damaged stretches in one closed segment (one of two consecutive batches, found as one stretch; one
    alone), fenced off by the scrub and again by an index rebuild; a read from every offset of the log, gaps
    included, returns only batches whose CRC holds (index entries may point inside a stretch)."""
    plog = PartitionLog(tmp_path / "p", cfg(), True)
    fill(plog, 300)
    before = offsets(plog)
    batches = batch_positions(plog, 0)
    seg = plog.segments[0]
    damaged = {batches[i][2] for i in (3, 4, 9)}
    for i in (3, 4, 9):
        pos, size, _base = batches[i]
        flip(seg.log_path, pos + size - 1)
    found = scrub_part(seg.fd, Scrub(0, seg.base_offset, []), seg.size, seg.next_offset, {}, 1 << 30).found
    assert [(d.first_offset, d.last_offset) for d in found] == [(batches[3][2], batches[4][2]),
                                                                (batches[9][2], batches[9][2])]  # fmt: skip
    seg.quarantine(found)

    def every_read_intact(log: PartitionLog) -> None:
        for off in range(log.log_start_offset, log.next_offset):
            data = bytes(log.read(off, 400))
            pos = 0
            while pos < len(data):
                size = int.from_bytes(data[pos + 8 : pos + 12], "big") + LOG_OVERHEAD
                decode_batch(data[pos : pos + size], verify_crc=True)  # raises on a damaged batch
                pos += size

    every_read_intact(plog)
    assert offsets(plog) == [o for o in before if o not in damaged]
    rebuilt = reopen(plog, drop_indexes=True)
    assert len(rebuilt.segments[0].quarantined) == 2
    every_read_intact(rebuilt)
    assert offsets(rebuilt) == [o for o in before if o not in damaged]
    rebuilt.close()
