"""Damaged files and failing disks (issue 13): a real broker process over real files that Python damages
between runs, checked with real clients.

Each case damages what a bad disk or an operator would (a torn tail after a clean stop, a flipped byte, a
deleted index, an unreadable metadata file, a full disk, no descriptors left) and asserts that the broker
starts, says at WARNING/ERROR what it dropped or refuses, serves every record it still holds, and lands
the next produce at the right offset.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import struct
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest

from logbroker.broker.producer_ids import BLOCK, ProducerIdAllocator, ProducerIdStateError
from logbroker.protocol.errors import ErrorCode
from logbroker.protocol.records import NewRecord, build_batch, decode_batch
from logbroker.storage import LogConfig, LogManager, TopicMeta
from logbroker.storage.internal import InternalLog
from logbroker.storage.manager import TopicError
from logbroker_devtools.client.connection import BrokerError, KafkaClient, fetch_request
from logbroker_devtools.testing.process import BrokerProcess
from support import both_targets, flip, kafka_peer, log_since, log_size, missing_tool, read_topic, unique

pytestmark = pytest.mark.timeout(180)

MiB = 1 << 20
_BATCH = struct.Struct(">qi")  # base offset, batch length
_LAST_DELTA = 23  # position of lastOffsetDelta in a v2 batch


# ---------------------------------------------------------------------------------------------------------------
# Files


def batches_of(path: Path) -> list[tuple[int, int, int, int]]:
    """(position, size, base offset, last offset) of every whole batch in a segment file."""
    data = path.read_bytes()
    out, pos = [], 0
    while pos + 61 <= len(data):
        base, length = _BATCH.unpack_from(data, pos)
        size = length + 12
        if pos + size > len(data):
            break
        out.append((pos, size, base, base + struct.unpack_from(">i", data, pos + _LAST_DELTA)[0]))
        pos += size
    return out


# ---------------------------------------------------------------------------------------------------------------
# The broker's log


def log_line(broker: BrokerProcess, mark: int, *needles: str) -> str:
    """The first log line after byte `mark` holding every needle (the broker logs during start-up)."""
    text = log_since(broker, mark)
    for line in text.splitlines():
        if all(n in line for n in needles):
            return line
    raise AssertionError(f"no broker log line with {needles}; the log since the restart:\n{text[-4000:]}")


def assert_no_tracebacks(broker: BrokerProcess, mark: int) -> None:
    text = log_since(broker, mark)
    assert "Traceback" not in text, text[-4000:]


# ---------------------------------------------------------------------------------------------------------------
# Clients


def produce_batches(bootstrap: str, topic: str, batches: int, per: int = 10, size: int = 100) -> list[bytes]:
    """Acknowledged batches of `per` records (one Produce each, acks=all); returns the values in order."""
    values: list[bytes] = []
    with KafkaClient(bootstrap, timeout=30) as c:
        for b in range(batches):
            batch = [f"r{b * per + i:06d}-".encode().ljust(size, b"x") for i in range(per)]
            assert c.produce(topic, 0, [NewRecord(None, v) for v in batch]) == len(values)
            values += batch
    return values


def produce_one(bootstrap: str, topic: str, value: bytes) -> int:
    """Offset a confluent-kafka producer's acks=all record was stored at."""
    got: list[Any] = []
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 20000})
    p.produce(topic, value=value, on_delivery=lambda err, msg: got.append((err, msg)))
    assert p.flush(30) == 0
    err, msg = got[0]
    assert err is None, err
    return msg.offset()


def stored(bootstrap: str, topic: str, partitions: int = 1) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every record, read by confluent-kafka from the start to the end."""
    return [(m.partition(), m.offset(), m.value()) for m in read_topic(bootstrap, topic, partitions, timeout=30)]


def commit(bootstrap: str, group: str, topic: str, offset: int) -> None:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[ck.TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        c.close()


def committed(bootstrap: str, group: str, topic: str) -> int:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return c.committed([ck.TopicPartition(topic, 0)], timeout=15)[0].offset
    finally:
        c.close()


# ---------------------------------------------------------------------------------------------------------------
# 1. Torn tail after a clean stop


@pytest.mark.parametrize("segments", ["one-segment", "several-segments"])
def test_torn_tail_after_a_clean_stop_is_cut_and_the_log_continues(
    fresh_broker: BrokerProcess, topic: str, segments: str
) -> None:
    """The active segment's tail is checked on every start, marker or not: the torn batch's offsets are
    reported, every record before it is served and the next produce takes its offset."""
    several = segments == "several-segments"
    fresh_broker.start()
    with KafkaClient(fresh_broker.bootstrap) as c:
        c.create_topic(topic, 1, configs={"segment.bytes": str(MiB)} if several else None)
    sent = produce_batches(fresh_broker.bootstrap, topic, 36 if several else 20, size=10_000 if several else 100)
    assert fresh_broker.stop() == 0
    assert (fresh_broker.data_dir / ".clean-shutdown").exists()
    logs = sorted((fresh_broker.data_dir / f"{topic}-0").glob("*.log"))
    assert len(logs) >= 3 if several else len(logs) == 1
    pos, size, first, last = batches_of(logs[-1])[-1]
    assert last == len(sent) - 1
    os.truncate(logs[-1], pos + size // 2)  # half of the last batch: a torn write

    mark = log_size(fresh_broker)
    fresh_broker.start()
    assert stored(fresh_broker.bootstrap, topic) == [(0, i, v) for i, v in enumerate(sent[:first])]
    assert produce_one(fresh_broker.bootstrap, topic, b"after") == first
    assert stored(fresh_broker.bootstrap, topic)[-2:] == [(0, first - 1, sent[first - 1]), (0, first, b"after")]
    line = log_line(fresh_broker, mark, "WARNING", f"dropping offsets {first}-{last}")
    assert f"truncated {size // 2} bytes" in line and f"at byte {pos} of segment" in line
    assert_no_tracebacks(fresh_broker, mark)


# ---------------------------------------------------------------------------------------------------------------
# 2. Damaged groups log


def _groups_batches(data_dir: Path) -> list[tuple[Path, int, int, int, int, set[str]]]:
    """(segment file, position, size, base offset, last offset, group ids) of every groups-log batch."""
    out = []
    for seg in sorted((data_dir / "__groups").glob("*.log")):
        raw = seg.read_bytes()
        for pos, size, base, last in batches_of(seg):
            _h, records = decode_batch(raw[pos : pos + size])
            out.append((seg, pos, size, base, last, {json.loads(r.key)[1] for r in records if r.key}))
    return out


@pytest.mark.parametrize("damage", ["flipped-byte", "torn-tail"])
def test_damaged_groups_log_does_not_stop_start_up(fresh_broker: BrokerProcess, topic: str, damage: str) -> None:
    """A flipped byte loses only its own batch (later commits stay: the log is last-value-wins state); a torn
    tail after a clean stop is cut. Both are logged with offsets, the broker serves data and groups, and the
    damage is gone from disk after this start (the next one is quiet)."""
    fresh_broker.start()
    b = fresh_broker.bootstrap
    sent = produce_batches(b, topic, 2)
    a, bee, c = unique("ga"), unique("gb"), unique("gc")
    for group, offset in ((a, 1), (bee, 2), (c, 3), (a, 4)):
        commit(b, group, topic, offset)
    assert fresh_broker.stop() == 0
    batches = _groups_batches(fresh_broker.data_dir)
    if damage == "flipped-byte":
        ((seg, pos, size, base, last, _groups),) = [x for x in batches if bee in x[5]]  # b's only commit
        flip(seg, pos + size - 3)  # inside the record's value: the CRC no longer matches
    else:
        seg, pos, size, base, last, groups = batches[-1]
        assert groups == {a}  # a's second commit is the last batch
        os.truncate(seg, pos + size // 2)
    span = f"offset {base}" if base == last else f"offsets {base}-{last}"

    mark = log_size(fresh_broker)
    fresh_broker.start()
    expected = {a: 4, bee: ck.OFFSET_INVALID, c: 3} if damage == "flipped-byte" else {a: 1, bee: 2, c: 3}
    assert {g: committed(b, g, topic) for g in expected} == expected
    if damage == "flipped-byte":
        line = log_line(fresh_broker, mark, "WARNING", "__groups", f"skipped damaged records, {span} ")
        assert f"({size} bytes at byte {pos} of segment 0)" in line and "CRC32C" in line
    else:
        log_line(fresh_broker, mark, "WARNING", "__groups", f"dropping offsets {base}-{last}")
    assert stored(b, topic) == [(0, i, v) for i, v in enumerate(sent)]
    commit(b, bee, topic, 7)
    assert_no_tracebacks(fresh_broker, mark)

    assert fresh_broker.stop() == 0
    mark = log_size(fresh_broker)
    fresh_broker.start()
    expected[bee] = 7
    assert {g: committed(b, g, topic) for g in expected} == expected
    quiet = log_since(fresh_broker, mark)
    assert "skipped damaged records" not in quiet and "truncated " not in quiet, quiet


def test_internal_log_skips_a_damaged_batch_and_rewrites_itself(tmp_path: Path) -> None:
    """The reusable internal log (groups today; transactions, configs, ACLs later) on its own: a damaged
    batch in an older segment and one whose framing is broken lose only themselves or their segment's rest."""
    store = InternalLog(tmp_path / "__state", True, segment_bytes=600)
    for i in range(30):
        store.append([(("k", i % 7), {"v": i})])
    store.append([(("k", 3), None)])
    store.close()
    segs = sorted((tmp_path / "__state").glob("*.log"))
    assert len(segs) >= 3
    pos, size, base, _ = batches_of(segs[0])[1]
    flip(segs[0], pos + size - 2)
    again = InternalLog(tmp_path / "__state", True, segment_bytes=600)
    live = again.load()
    assert [(d.segment, d.position, d.first_offset) for d in again.damage] == [(0, pos, base)]
    latest = {i % 7: i for i in range(30)}
    assert live == {("k", k): {"v": v} for k, v in latest.items() if k != 3}  # base 1 was superseded anyway
    again.close()
    assert len(sorted((tmp_path / "__state").glob("*.log"))) < len(segs)  # rewritten without the damage
    third = InternalLog(tmp_path / "__state", True, segment_bytes=600)
    assert third.load() == live and third.damage == []
    third.close()


# ---------------------------------------------------------------------------------------------------------------
# 3. A rebuilt index over a damaged segment


def test_rebuilding_an_index_over_a_flipped_byte_keeps_the_intact_batches(
    fresh_broker: BrokerProcess, topic: str
) -> None:
    """A deleted .index is rebuilt by re-reading its segment. A corrupt batch in a closed segment is
    quarantined, not cut at (Kafka's recovery cuts there and drops the rest of the segment: issue 32 lost 260
    acknowledged records so): its offsets are logged at WARNING and become a gap consumers step over, every
    intact batch after it is kept, and the next produce follows the old end."""
    fresh_broker.start()
    with KafkaClient(fresh_broker.bootstrap) as c:
        c.create_topic(topic, 1, configs={"segment.bytes": str(MiB)})
    sent = produce_batches(fresh_broker.bootstrap, topic, 40, size=10_000)
    assert fresh_broker.stop() == 0
    logs = sorted((fresh_broker.data_dir / f"{topic}-0").glob("*.log"))
    assert len(logs) >= 3
    seg = logs[1]
    pos, size, first, last = batches_of(seg)[3]
    flip(seg, pos + size // 2)
    seg.with_suffix(".index").unlink()

    mark = log_size(fresh_broker)
    fresh_broker.start()
    kept = [(0, i, v) for i, v in enumerate(sent) if not first <= i <= last]
    assert stored(fresh_broker.bootstrap, topic) == kept
    assert produce_one(fresh_broker.bootstrap, topic, b"after") == len(sent)
    log_line(fresh_broker, mark, "rebuilding indexes of segment")
    line = log_line(fresh_broker, mark, "WARNING", "quarantined")
    span = f"offset {first}" if first == last else f"offsets {first}-{last}"
    assert f"{span} ({size} bytes at byte {pos})" in line and "CRC32C" in line, line
    assert seg.with_suffix(".quarantine").exists()
    assert_no_tracebacks(fresh_broker, mark)


# ---------------------------------------------------------------------------------------------------------------
# 4. Unreadable topic metadata


def _metadata(conn: Any, topic: str, auto_create: bool) -> Any:
    req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                          allow_auto_topic_creation=auto_create, include_topic_authorized_operations=False)  # fmt: skip
    return conn.do(req).topics[0]


def _produce_error(conn: Any, topic: str) -> int:
    P = ProduceRequest.TopicProduceData
    req = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
        P(name=topic, partition_data=[P.PartitionProduceData(index=0, records=build_batch([NewRecord(None, b"x")]))])
    ])  # fmt: skip
    return conn.do(req).responses[0].partition_responses[0].error_code


@pytest.mark.parametrize("damage", ["garbage", "missing"])
def test_unreadable_topic_metadata_is_refused_never_recreated(
    fresh_broker: BrokerProcess, topic: str, damage: str
) -> None:
    """The topic id and configs live only in `__topics/<topic>.json`, so its directories cannot soundly be
    turned back into a topic: the topic is refused with KAFKA_STORAGE_ERROR (Metadata with auto-create,
    Produce, CreateTopics), its data is left alone, other topics are served; restoring the file brings it
    back whole, with its old id."""
    fresh_broker.start()
    b = fresh_broker.bootstrap
    other = unique("other")
    with KafkaClient(b) as c:
        c.create_topic(topic, 1, configs={"retention.ms": "-1"})
        c.create_topic(other, 1)
        old_id = str(c.describe_topic(topic).topic_id)
    sent, kept = produce_batches(b, topic, 3), produce_batches(b, other, 2)
    assert fresh_broker.stop() == 0
    meta = fresh_broker.data_dir / "__topics" / f"{topic}.json"
    original = meta.read_bytes()
    if damage == "garbage":
        meta.write_bytes(original[:20] + b"\x00garbage")
    else:
        meta.unlink()

    mark = log_size(fresh_broker)
    fresh_broker.start()
    with KafkaClient(b) as c:
        for auto in (True, False):
            assert _metadata(c.conn, topic, auto).error_code == ErrorCode.KAFKA_STORAGE_ERROR
        assert _produce_error(c.conn, topic) == ErrorCode.KAFKA_STORAGE_ERROR
        [ft] = c.conn.do(fetch_request(topic, 0, 0, 0)).responses
        assert ft.partitions[0].error_code == ErrorCode.KAFKA_STORAGE_ERROR
        with pytest.raises(BrokerError) as refused:
            c.create_topic(topic, 1)
        assert refused.value.code == ErrorCode.KAFKA_STORAGE_ERROR and "unavailable" in str(refused.value)
        assert topic not in {t.name for t in c.list_topics()}
    assert (meta.read_bytes() != original) if damage == "garbage" else not meta.exists()
    assert len(batches_of(fresh_broker.data_dir / f"{topic}-0" / ("0" * 20 + ".log"))) == 3
    assert stored(b, other) == [(0, i, v) for i, v in enumerate(kept)]
    line = log_line(fresh_broker, mark, "ERROR", f"topic '{topic}' is unavailable")
    assert ("is unreadable" if damage == "garbage" else "is missing") in line

    assert fresh_broker.stop() == 0
    meta.write_bytes(original)
    fresh_broker.start()
    with KafkaClient(b) as c:
        assert str(c.describe_topic(topic).topic_id) == old_id
    assert stored(b, topic) == [(0, i, v) for i, v in enumerate(sent)]
    assert produce_one(b, topic, b"after") == len(sent)


def test_create_reuses_a_leftover_empty_partition_directory_but_not_one_with_records(tmp_path: Path) -> None:
    """An interrupted create leaves empty directories: reused. Records without metadata: refused, kept."""
    (tmp_path / "fresh-0").mkdir(parents=True)
    (tmp_path / "fresh-0" / ("0" * 20 + ".log")).write_bytes(b"")
    (tmp_path / "old-0").mkdir()
    (tmp_path / "old-0" / ("0" * 20 + ".log")).write_bytes(build_batch([NewRecord(None, b"kept")]))
    m = LogManager(tmp_path, LogConfig())
    try:
        assert "old" in m.unavailable and "fresh" not in m.unavailable
        assert m.create_topic("fresh", 1).partitions == 1
        with pytest.raises(TopicError) as e:
            m.create_topic("old", 1)
        assert e.value.error is ErrorCode.KAFKA_STORAGE_ERROR
        assert (tmp_path / "old-0" / ("0" * 20 + ".log")).stat().st_size > 0
        assert not (tmp_path / "__topics" / "old.json").exists()
    finally:
        m.close()


# ---------------------------------------------------------------------------------------------------------------
# 5. Full disk, no descriptors


def _open_files(broker: BrokerProcess) -> list[str]:
    assert broker.proc is not None
    out = []
    base = f"/proc/{broker.proc.pid}/fd"
    for fd in os.listdir(base):
        with contextlib.suppress(OSError):
            out.append(os.readlink(f"{base}/{fd}"))
    return out


def _created(admin: AdminClient, topic: str, partitions: int) -> int:
    """The error code CreateTopics answered (0 for success), through confluent-kafka's admin client."""
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=10)[topic].result(20)
    except ck.KafkaException as exc:
        return exc.args[0].code()
    return 0


def _grown(admin: AdminClient, topic: str, count: int) -> int:
    try:
        admin.create_partitions([NewPartitions(topic, count)], operation_timeout=10)[topic].result(20)
    except ck.KafkaException as exc:
        return exc.args[0].code()
    return 0


@contextlib.contextmanager
def broker_on_tmpfs(tmp_path: Path, options: str) -> Iterator[tuple[BrokerProcess, Path]]:
    """A broker whose data directory is a tiny tmpfs of its own (a private mount namespace, so no root
    needed where user namespaces are allowed); yields the broker and its data directory as the test sees
    it (through /proc/<pid>/root)."""
    if shutil.which("unshare") is None:
        missing_tool("unshare (util-linux) not found")
    data = tmp_path / "data"
    data.mkdir()
    probe = os.system(f"unshare -rm sh -c 'mount -t tmpfs -o size=64k probe {data}' >/dev/null 2>&1")
    if probe != 0:  # a kernel or container policy, not a missing tool: the file-size-limit test still runs
        pytest.skip("this machine allows no tmpfs in a private user+mount namespace (unshare -rm)")
    script = 'mount -t tmpfs -o "$LB_TMPFS_OPTIONS" logbroker-test "$LB_TMPFS_DIR" && exec "$@"'
    proc = BrokerProcess(data, python="unshare", wrap=["-rm", "sh", "-c", script, "sh", sys.executable],
                         env={"LB_TMPFS_OPTIONS": options, "LB_TMPFS_DIR": str(data)})  # fmt: skip
    proc.start()
    try:
        assert proc.proc is not None
        yield proc, Path(f"/proc/{proc.proc.pid}/root{data}")
        assert proc.stop() == 0, proc.log_tail()
    finally:
        proc.kill()


def _fill(path: Path, what: str) -> list[Path]:
    """Fill the filesystem under `path`: its space (one file) or its inodes (empty files)."""
    made: list[Path] = []
    try:
        if what == "space":
            made.append(path / "filler")
            with open(made[0], "wb") as f:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
        else:
            for i in range(100_000):
                (path / f"inode-{i}").touch()
                made.append(path / f"inode-{i}")
    except OSError as exc:
        assert exc.errno == 28, exc  # ENOSPC
    return made


def _assert_nothing_of(root: Path, broker: BrokerProcess, topic: str, partitions: range) -> None:
    for i in partitions:
        assert not (root / f"{topic}-{i}").exists(), f"{topic}-{i} left behind"
    assert not [p for p in (root / "__topics").iterdir() if p.name.startswith(f"{topic}.json.")]
    assert not [f for f in _open_files(broker) if any(f"/{topic}-{i}/" in f for i in partitions)]


def test_create_topics_and_partitions_on_a_full_disk_answer_storage_error(tmp_path: Path) -> None:
    """No space (the metadata write fails) or no inodes (a partition's files cannot be made): CreateTopics,
    CreatePartitions and auto-create answer KAFKA_STORAGE_ERROR, leave no directory, metadata or open file
    of the failed topic, and the same requests succeed once space is back."""
    with broker_on_tmpfs(tmp_path, "size=1m,nr_inodes=200") as (broker, root):
        b = broker.bootstrap
        admin = AdminClient({"bootstrap.servers": b})
        grown = unique("grown")
        assert _created(admin, grown, 1) == 0
        mark = log_size(broker)

        filler = _fill(root, "space")
        topic = unique("full")
        assert _created(admin, topic, 3) == ErrorCode.KAFKA_STORAGE_ERROR
        _assert_nothing_of(root, broker, topic, range(3))
        assert not (root / "__topics" / f"{topic}.json").exists()
        assert _grown(admin, grown, 3) == ErrorCode.KAFKA_STORAGE_ERROR
        _assert_nothing_of(root, broker, grown, range(1, 3))
        with KafkaClient(b) as c:
            assert len(c.describe_topic(grown).partitions) == 1
            auto = unique("auto")
            assert _metadata(c.conn, auto, True).error_code == ErrorCode.KAFKA_STORAGE_ERROR
        _assert_nothing_of(root, broker, auto, range(1))
        log_line(broker, mark, "WARNING", f"could not create topic '{topic}'", "No space left on device")
        for f in filler:
            f.unlink()

        inodes = _fill(root, "inodes")
        for f in inodes[-6:]:  # room for the first partition (directory and three files), not the second
            f.unlink()
        assert _created(admin, topic, 3) == ErrorCode.KAFKA_STORAGE_ERROR
        _assert_nothing_of(root, broker, topic, range(3))
        log_line(broker, mark, "WARNING", f"could not create partition 1 of topic '{topic}'")
        for f in inodes[:-6]:
            f.unlink()

        assert _created(admin, topic, 3) == 0
        assert _grown(admin, grown, 3) == 0
        with KafkaClient(b) as c:
            assert c.produce(topic, 2, [NewRecord(None, b"x")]) == 0
            assert len(c.describe_topic(grown).partitions) == 3
        assert_no_tracebacks(broker, mark)


# Runs the broker with a file-size limit (RLIMIT_FSIZE) while its log goes through a pipe (to which no such
# limit applies) and a copier process: argv is the limit, then the broker's own arguments.
_FSIZE_LAUNCHER = """
import os, resource, sys
limit = int(sys.argv[1])
r, w = os.pipe()
if os.fork() == 0:
    os.close(w)
    while chunk := os.read(r, 65536):
        os.write(1, chunk)
    os._exit(0)
os.close(r)
os.dup2(w, 1)
os.dup2(w, 2)
os.close(w)
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
os.execv(sys.executable, [sys.executable, *sys.argv[2:]])
"""


def test_create_topics_and_partitions_past_the_file_size_limit_answer_storage_error(tmp_path: Path) -> None:
    """The same all-or-nothing creates where no tmpfs can be mounted: a file-size limit that a topic's
    metadata file exactly fits with 9 partitions makes the write for 10 (or for a longer name) fail with
    EFBIG, as a full disk fails a write."""
    grown, too_long = unique("grown"), unique("full") + "-longer-name"
    limit = len(json.dumps(TopicMeta(grown, 9, str(uuid.uuid4())).to_json()).encode())
    broker = BrokerProcess(tmp_path / "data", wrap=["-c", _FSIZE_LAUNCHER, str(limit)])
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert _created(admin, grown, 9) == 0
        meta = broker.data_dir / "__topics" / f"{grown}.json"
        assert meta.stat().st_size == limit
        assert _grown(admin, grown, 10) == ErrorCode.KAFKA_STORAGE_ERROR
        _assert_nothing_of(broker.data_dir, broker, grown, range(9, 10))
        assert json.loads(meta.read_bytes())["partitions"] == 9
        assert _created(admin, too_long, 2) == ErrorCode.KAFKA_STORAGE_ERROR
        _assert_nothing_of(broker.data_dir, broker, too_long, range(2))
        assert not (broker.data_dir / "__topics" / f"{too_long}.json").exists()
        with KafkaClient(broker.bootstrap) as c:
            assert _metadata(c.conn, too_long, True).error_code == ErrorCode.KAFKA_STORAGE_ERROR
            assert len(c.describe_topic(grown).partitions) == 9
            assert c.produce(grown, 8, [NewRecord(None, b"x")]) == 0
        _assert_nothing_of(broker.data_dir, broker, too_long, range(1))
        assert "File too large" in log_line(broker, 0, "WARNING", f"could not create topic '{too_long}'")
        assert "File too large" in log_line(broker, 0, "WARNING", f"could not add partitions to topic '{grown}'")
        assert _created(admin, "s", 1) == 0  # a shorter metadata file fits
        assert broker.stop() == 0, broker.log_tail()
    finally:
        broker.kill()


def test_create_topics_within_a_tiny_descriptor_limit(tmp_path: Path) -> None:
    """64 descriptors in all: segment files share their budget (storage/files.py), so a topic of 40
    partitions (120 files) is created, written and read back, and the process stays within its limit."""
    if shutil.which("prlimit") is None:
        missing_tool("prlimit (util-linux) not found")
    broker = BrokerProcess(tmp_path / "data", python="prlimit", wrap=["--nofile=64:64", sys.executable])
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        topic = unique("fewfd")
        assert _created(admin, topic, 40) == 0
        assert produce_one(broker.bootstrap, topic, b"fits") == 0
        assert len(_open_files(broker)) < 64
        assert broker.stop() == 0, broker.log_tail()
        broker.start()
        assert [(o, v) for _p, o, v in stored(broker.bootstrap, topic, 40)] == [(0, b"fits")]
        assert broker.stop() == 0, broker.log_tail()
    finally:
        broker.kill()


def test_create_topics_out_of_descriptors_answers_storage_error(tmp_path: Path) -> None:
    """With the descriptor limit (soft and hard) too low for a topic's files (a segment-file budget set
    above it), CreateTopics answers KAFKA_STORAGE_ERROR, every descriptor it opened is closed again and
    nothing stays on disk."""
    if shutil.which("prlimit") is None:
        missing_tool("prlimit (util-linux) not found")
    broker = BrokerProcess(
        tmp_path / "data",
        python="prlimit",
        wrap=["--nofile=64:64", sys.executable],
        env={"LOGBROKER_LOG_MAX_OPEN_FILES": "1000"},
    )
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.list_topics(timeout=10)  # connections made before the descriptors run out
        before = [f for f in _open_files(broker) if not f.startswith("socket:")]  # clients may reconnect
        topic = unique("nofd")
        assert _created(admin, topic, 40) == ErrorCode.KAFKA_STORAGE_ERROR
        _assert_nothing_of(broker.data_dir, broker, topic, range(40))
        assert not (broker.data_dir / "__topics" / f"{topic}.json").exists()
        after = [f for f in _open_files(broker) if not f.startswith("socket:")]
        assert len(after) <= len(before), sorted((Counter(after) - Counter(before)).elements())
        assert "Too many open files" in log_line(broker, 0, "WARNING", f"of topic '{topic}'")
        assert _created(admin, topic, 2) == 0
        assert produce_one(broker.bootstrap, topic, b"fits") == 0
        assert broker.stop() == 0, broker.log_tail()
    finally:
        broker.kill()


# ---------------------------------------------------------------------------------------------------------------
# Producer ids


def _init_producer_id(bootstrap: str) -> int:
    with KafkaClient(bootstrap) as c:
        r = c.conn.do(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000,
                                            producer_id=-1, producer_epoch=-1))  # fmt: skip
        assert r.error_code == 0
        return r.producer_id


def test_damaged_producer_id_file_never_hands_an_id_out_twice(fresh_broker: BrokerProcess) -> None:
    """An unreadable reservation refuses the start (any id picked could repeat one a client holds) and says
    what to do; one damaged slot of the two is survived by starting a block above the other."""
    fresh_broker.start()
    first = [_init_producer_id(fresh_broker.bootstrap) for _ in range(3)]
    assert fresh_broker.stop() == 0
    path = fresh_broker.data_dir / "__producer_ids"
    original = path.read_bytes()
    path.write_bytes(b"\x00garbage".ljust(len(original), b"?"))
    with pytest.raises(RuntimeError) as refused:
        fresh_broker.start(timeout=15)
    assert "__producer_ids is damaged" in str(refused.value) and "refusing to start" in str(refused.value)

    path.write_bytes(original)
    flip(path, 6)  # one slot's limit
    fresh_broker.start()
    after = _init_producer_id(fresh_broker.bootstrap)
    assert after >= BLOCK and after not in first


def test_producer_id_slots_survive_torn_writes_and_read_the_old_format(tmp_path: Path) -> None:
    path = tmp_path / "__producer_ids"
    path.write_text("3000")  # the first version's file
    ids = ProducerIdAllocator(path)
    assert ids.next_id() == 3000
    assert len(path.read_bytes()) == 32
    for _ in range(BLOCK):
        ids.next_id()  # a second reservation overwrites one slot only
    raw = bytearray(path.read_bytes())
    limits = [int.from_bytes(raw[i * 16 + 4 : i * 16 + 12], "big") for i in range(2)]
    assert sorted(limits) == [4000, 5000]  # the newest reservation and the one before it
    raw[limits.index(5000) * 16 + 14] ^= 1  # the newest slot's write was torn
    path.write_bytes(bytes(raw))
    assert ProducerIdAllocator(path).next_id() == 5000  # the older slot (4000) plus one block
    path.write_bytes(b"\xff" * 32)
    with pytest.raises(ProducerIdStateError):
        ProducerIdAllocator(path)


# ---------------------------------------------------------------------------------------------------------------
# 6. DeleteGroups on an empty KIP-848 group


@pytest.mark.parametrize("target", both_targets())
def test_delete_an_empty_kip848_group_and_it_stays_deleted(fresh_broker: BrokerProcess, target: str) -> None:
    """An empty group.protocol=consumer group is deleted with error 0 (logbroker and Kafka), and stays deleted
    across a restart (logbroker)."""
    with contextlib.ExitStack() as stack:
        if target == "kafka":
            b = stack.enter_context(kafka_peer())
        else:
            fresh_broker.start()
            b = fresh_broker.bootstrap
        topic, group = unique("t848"), unique("g848")
        admin = AdminClient({"bootstrap.servers": b})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        produce_one(b, topic, b"v")
        c = ck.Consumer({"bootstrap.servers": b, "group.id": group, "group.protocol": "consumer",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
        c.subscribe([topic])
        deadline = time.monotonic() + 60
        msg = None
        while msg is None and time.monotonic() < deadline:
            msg = c.poll(0.5)
        assert msg is not None and msg.error() is None
        c.commit(msg, asynchronous=False)
        c.close()  # leaves: the group is empty, with its committed offset
        admin.delete_consumer_groups([group])[group].result(30)
        assert group not in {g.group_id for g in admin.list_consumer_groups().result(30).valid}
        if target == "logbroker":
            assert fresh_broker.stop() == 0
            fresh_broker.start()
            admin = AdminClient({"bootstrap.servers": b})
            assert group not in {g.group_id for g in admin.list_consumer_groups().result(30).valid}
            assert committed(b, group, topic) == ck.OFFSET_INVALID
