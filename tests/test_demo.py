"""`logbroker demo` end to end, plus the pieces it adds (the Notifier clock hook, the stream generator).

The demo runs as a user would start it: a subprocess in a fresh working directory with the default
output directory, small enough for two shared cores. Its outputs are then checked independently of
the demo's own summary: the archive through Spark (`read_archive`, which honours `_spark_metadata`),
the rollup (a Delta table) with delta-rs against counts recomputed from the archived notifications, the
chart as a PNG.
Every process the demo starts carries a marker in its environment, so the test can prove none is
left behind (the JVM in particular) after a normal end and after Ctrl-C.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import struct
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Consumer

from logbroker.demo import MARKER, MAX_LATENESS_S, OWNED, DemoError, generate, reset_outputs
from logbroker.embedded import EmbeddedBroker
from logbroker.notify import Notifier
from logbroker.notify.notifier import decode, format_timestamp
from support import missing_tool, require_spark

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MARK_ENV = "LOGBROKER_DEMO_TEST_MARK"
RUN_TIMEOUT = 1500  # seconds; two shared cores with other Spark jobs can be very slow
N1, N2 = 3000, 1200  # notifications of the first and second run
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@dataclass
class DemoRun:
    cwd: Path
    mark: str
    returncode: int
    output: str

    @property
    def out(self) -> Path:
        return self.cwd / "logbroker-demo"

    def path(self, label: str) -> Path:
        """A path the demo printed on a line starting with `label`."""
        m = re.search(rf"^{re.escape(label)}[^:]*:\s+(\S+)\s*$", self.output, re.M)
        assert m, f"no {label!r} path printed:\n{self.output}"
        return Path(m.group(1))

    def summary(self) -> dict[str, Any]:
        return json.loads(self.path("summary").read_text())


def _env(mark: str) -> dict[str, str]:
    env = dict(os.environ)
    env[MARK_ENV] = mark
    env["COLUMNS"] = "160"
    env.pop("FORCE_COLOR", None)
    return env


def run_demo_process(cwd: Path, *args: str, mark: str | None = None) -> DemoRun:
    mark = mark or uuid.uuid4().hex
    cwd.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [sys.executable, "-m", "logbroker", "demo", *args],
        cwd=cwd,
        env=_env(mark),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=RUN_TIMEOUT,
    )
    print(proc.stdout)  # shown on failure
    return DemoRun(cwd, mark, proc.returncode, proc.stdout)


def marked_processes(mark: str) -> list[str]:
    """Processes (of any parent) whose environment carries `mark`: everything a demo run started."""
    found = []
    needle = f"{MARK_ENV}={mark}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")[:200]
                found.append(f"{entry.name}: {cmdline!r}")
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def assert_no_leftovers(mark: str) -> None:
    """Wait (generously: no timing is asserted) for the demo's processes to be gone."""
    deadline = time.monotonic() + 120
    while (left := marked_processes(mark)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, f"processes of the demo still running: {left}"


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """The demo with its default output directory in a fresh working directory."""
    require_spark("matplotlib")
    return run_demo_process(
        tmp_path_factory.mktemp("demo-cwd"), "--notifications", str(N1), "--minutes", "12", "--seed", "3"
    )


@pytest.fixture(scope="module")
def spark(first_run: DemoRun) -> Iterator[SparkSession]:
    """A reader session of the test's own, started after the demo ran (never two JVMs at once)."""
    from logbroker.spark import session

    s = session(master="local[2]", app_name="logbroker-test-demo")
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()


def _archived(spark: SparkSession, archive: Path) -> list[tuple[str, bytes]]:
    from logbroker.spark.builtins import read_archive

    rows = read_archive(str(archive), spark).select("topic", "value").collect()
    return [(r["topic"], bytes(r["value"])) for r in rows]


def _rollup_rows(path: Path) -> list[dict[str, Any]]:
    from deltalake import DeltaTable

    # The rollup is a Delta table: read through its log by delta-rs, an implementation independent of Spark.
    return DeltaTable(str(path)).to_pyarrow_table().to_pylist()


def _minute(ts: str) -> dt.datetime:
    return dt.datetime.strptime(ts[:16], "%Y-%m-%d %H:%M").replace(tzinfo=dt.UTC)


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert data.rstrip(b"\0").endswith(b"IEND\xaeB`\x82"), f"{path} is truncated"
    return width, height


# ------------------------------------------------------------------------------- end to end


@pytest.mark.spark
@pytest.mark.timeout(RUN_TIMEOUT + 300)
def test_demo_runs_and_prints_its_outputs(first_run: DemoRun) -> None:
    assert first_run.returncode == 0, first_run.output
    out = first_run.out
    assert first_run.path("archive") == out / "archive"
    assert first_run.path("rollup") == out / "rollup"
    assert first_run.path("chart") == out / "rollup.png"
    for label in ("archive", "rollup", "chart", "summary"):
        assert first_run.path(label).exists()
    assert (out / MARKER).exists()
    summary = first_run.summary()
    assert summary["published"] == N1
    assert sum(summary["by_priority"].values()) == N1
    assert set(summary["by_priority"]) >= {"INFO", "WARN", "ERROR"}
    assert summary["archived_records"] == N1
    assert summary["rollup_total"] == N1
    assert summary["pipeline_rows"] == {"archive": N1, "rollup": N1}
    assert summary["late_events"] > 0
    assert summary["incident_minutes"], "the simulated incident is not visible in the rollup"
    for text in ("notifications published", "archived records", "Parquet files", "rollup rows", "incident"):
        assert text in first_run.output
    assert_no_leftovers(first_run.mark)


@pytest.mark.spark
@pytest.mark.timeout(RUN_TIMEOUT + 300)
def test_archive_holds_every_notification_once(first_run: DemoRun, spark: SparkSession) -> None:
    assert first_run.returncode == 0, first_run.output
    summary = first_run.summary()
    records = _archived(spark, first_run.out / "archive")
    assert len(records) == N1
    ids = Counter()
    by_priority: Counter[str] = Counter()
    by_type: Counter[str] = Counter()
    for topic, value in records:
        _ctxt, msg = decode(value)
        ids[msg["message_id"]] += 1
        assert topic == f"notifications.{msg['priority'].lower()}"
        by_priority[msg["priority"]] += 1
        by_type[msg["event_type"]] += 1
    assert len(ids) == N1, "a notification was archived more than once"
    assert dict(by_priority) == summary["by_priority"]
    assert dict(by_type) == summary["by_event_type"]
    assert summary["archived_bytes"] == sum(len(v) for _, v in records)


@pytest.mark.spark
@pytest.mark.timeout(RUN_TIMEOUT + 300)
def test_rollup_matches_the_archived_notifications(first_run: DemoRun, spark: SparkSession) -> None:
    assert first_run.returncode == 0, first_run.output
    summary = first_run.summary()
    expected: Counter[tuple[dt.datetime, str, str]] = Counter()
    expected_bytes: Counter[tuple[dt.datetime, str, str]] = Counter()
    for _topic, value in _archived(spark, first_run.out / "archive"):
        _ctxt, msg = decode(value)
        key = (_minute(msg["timestamp"]), msg["event_type"], msg["priority"])
        expected[key] += 1
        expected_bytes[key] += len(value)
    rows = _rollup_rows(first_run.out / "rollup")
    got = {(r["window_start"].replace(tzinfo=dt.UTC), r["event_type"], r["priority"]): r for r in rows}
    assert len(got) == len(rows), "the rollup holds a key twice"
    assert {k: r["count"] for k, r in got.items()} == dict(expected)
    assert {k: r["bytes"] for k, r in got.items()} == dict(expected_bytes)
    for r in rows:
        assert r["window_end"] - r["window_start"] == dt.timedelta(minutes=1)
    per_priority: Counter[str] = Counter()
    per_type: Counter[str] = Counter()
    for r in rows:
        per_priority[r["priority"]] += r["count"]
        per_type[r["event_type"]] += r["count"]
    assert dict(per_priority) == summary["by_priority"]
    assert dict(per_type) == summary["by_event_type"]


@pytest.mark.spark
@pytest.mark.timeout(RUN_TIMEOUT + 300)
def test_chart_is_a_png(first_run: DemoRun) -> None:
    assert first_run.returncode == 0, first_run.output
    chart = first_run.path("chart")
    width, height = _png_size(chart)
    assert 600 <= width <= 3000 and 300 <= height <= 2000, (width, height)
    assert chart.stat().st_size > 10_000  # bars, axes and labels, not an empty canvas


@pytest.mark.spark
@pytest.mark.timeout(RUN_TIMEOUT + 300)
def test_second_run_replaces_only_its_own_outputs(first_run: DemoRun, spark: SparkSession) -> None:
    assert first_run.returncode == 0, first_run.output
    keep = first_run.out / "notes.txt"
    keep.write_text("mine")
    second = run_demo_process(first_run.cwd, "--notifications", str(N2), "--minutes", "6", "--seed", "5")
    assert second.returncode == 0, second.output
    assert keep.read_text() == "mine"
    summary = second.summary()
    assert summary["published"] == N2
    assert summary["archived_records"] == N2
    assert len(_archived(spark, second.out / "archive")) == N2
    assert sum(r["count"] for r in _rollup_rows(second.out / "rollup")) == N2
    _png_size(second.path("chart"))
    assert_no_leftovers(second.mark)


@pytest.mark.spark
@pytest.mark.timeout(RUN_TIMEOUT + 300)
def test_ctrl_c_stops_everything(tmp_path: Path, first_run: DemoRun) -> None:
    """SIGINT while a pipeline runs: exit 130 with a message, no JVM or other process left behind."""
    assert first_run.returncode == 0, first_run.output  # the tools work; now interrupt one
    mark = uuid.uuid4().hex
    proc = subprocess.Popen(
        [sys.executable, "-m", "logbroker", "demo", "--out", str(tmp_path / "out"), "--notifications", "4000"],
        cwd=tmp_path,
        env=_env(mark),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "Spark session" in line:  # the archive pipeline starts next
                time.sleep(1.0)
                proc.send_signal(signal.SIGINT)
                break
        rest, _ = proc.communicate(timeout=RUN_TIMEOUT)
        lines.append(rest)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output = "".join(lines)
    print(output)
    assert proc.returncode == 130, output
    assert "interrupted" in output
    assert "Traceback" not in output  # a clean stop, not pyspark's py4j errors
    assert_no_leftovers(mark)


# ------------------------------------------------------------------------------- the pieces


def test_without_java_says_what_to_install(tmp_path: Path) -> None:
    """Checked before anything starts: exit 1, one message, nothing written."""
    try:
        import matplotlib  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError:
        missing_tool("pyspark or matplotlib is not installed (pip install -e '.[demo]')")
    env = _env(uuid.uuid4().hex)
    env.pop("JAVA_HOME", None)
    env["PATH"] = str(tmp_path / "empty-bin")  # no java on it; the interpreter is called by full path
    proc = subprocess.run(
        [sys.executable, "-m", "logbroker", "demo", "--out", str(tmp_path / "out")],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout
    assert "Java runtime" in proc.stdout and "Traceback" not in proc.stdout, proc.stdout
    assert not (tmp_path / "out").exists()


def test_reset_removes_only_what_the_demo_owns(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign"
    (foreign / "archive").mkdir(parents=True)
    (foreign / "archive" / "precious.parquet").write_bytes(b"x")
    with pytest.raises(DemoError, match="not written by logbroker demo"):
        reset_outputs(foreign)
    assert (foreign / "archive" / "precious.parquet").exists()

    out = tmp_path / "out"
    reset_outputs(out)  # a new directory is claimed with the marker
    assert (out / MARKER).exists()
    for name in (*OWNED, "rollup.old", "rollup.tmp-3-abcd1234"):
        target = out / name
        if "." in name:
            target.write_text("old")
        else:
            (target / "sub").mkdir(parents=True)
    (out / "other.txt").write_text("keep")
    (out / "other-dir").mkdir()
    reset_outputs(out)
    assert sorted(p.name for p in out.iterdir()) == sorted([MARKER, "other.txt", "other-dir"])
    assert (out / "other.txt").read_text() == "keep"
    assert (out / "other-dir").is_dir()


def test_stream_is_deterministic_spread_and_has_an_incident() -> None:
    start = dt.datetime(2026, 1, 5, 10, 0, tzinfo=dt.UTC)
    events = list(generate(6000, minutes=20, seed=11, start=start))
    again = list(generate(6000, minutes=20, seed=11, start=start))
    assert len(events) == 6000
    assert [(e.publisher_id, e.event_type, e.priority, e.when) for e in events] == [
        (e.publisher_id, e.event_type, e.priority, e.when) for e in again
    ]
    assert all(start <= e.when < start + dt.timedelta(minutes=20) for e in events)
    assert {e.publisher_id.split(".")[0] for e in events} >= {"compute", "network", "volume", "identity", "image"}
    assert len({e.publisher_id for e in events if e.publisher_id.startswith("compute.")}) > 3
    assert Counter(e.priority for e in events).most_common(1)[0][0] == "INFO"
    # Late events come after newer ones, but never later than the rollup's watermark tolerates.
    newest = start
    late = 0
    for e in events:
        if e.when < newest:
            late += 1
            assert newest - e.when <= dt.timedelta(seconds=MAX_LATENESS_S + 60)
        newest = max(newest, e.when)
    assert late > 0
    # The incident: some minute has many times the median of non-INFO events.
    bad = Counter(e.when.replace(second=0, microsecond=0) for e in events if e.priority != "INFO")
    values = sorted(bad.get(start + dt.timedelta(minutes=m), 0) for m in range(20))
    assert values[-1] >= 5 * max(values[len(values) // 2], 1)
    sizes = [len(json.dumps(e.payload)) for e in events]
    assert min(sizes) < 600 and max(sizes) > 1500  # payloads of varied sizes


def test_notifier_clock_stamps_the_envelope(tmp_path: Path) -> None:
    """`clock=` sets each envelope's timestamp (UTC); without it the wall clock is used as before."""
    fixed = dt.datetime(2026, 3, 1, 12, 30, 15, 123456, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    with EmbeddedBroker(tmp_path / "broker") as broker:
        url = f"kafka://{broker.bootstrap}"
        stamped = Notifier(url, "gen.host1", ["clock"], clock=lambda: fixed)
        before = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        plain = Notifier(url, "real.host1", ["clock"])
        try:
            stamped.info({}, "demo.stamped", {"n": 1})
            stamped.prepare(publisher_id="gen.host2").info({}, "demo.prepared", {"n": 2})
            plain.info({}, "demo.plain", {"n": 3})
        finally:
            stamped.close()
            plain.close()
        after = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        consumer = Consumer({
            "bootstrap.servers": broker.bootstrap, "group.id": "clock-test", "auto.offset.reset": "earliest",
        })  # fmt: skip
        consumer.subscribe(["clock.info"])
        got: dict[str, dict[str, Any]] = {}
        deadline = time.monotonic() + 60
        try:
            while len(got) < 3 and time.monotonic() < deadline:
                m = consumer.poll(1.0)
                if m is not None and m.error() is None:
                    _ctxt, msg = decode(m.value())
                    got[msg["event_type"]] = msg
        finally:
            consumer.close()
    assert got["demo.stamped"]["timestamp"] == "2026-03-01 10:30:15.123456"  # converted to UTC
    assert got["demo.prepared"]["timestamp"] == "2026-03-01 10:30:15.123456"  # prepare() keeps the clock
    wall = dt.datetime.strptime(got["demo.plain"]["timestamp"], "%Y-%m-%d %H:%M:%S.%f")
    assert before <= wall <= after
    assert format_timestamp(dt.datetime(2026, 3, 1, 1, 2, 3)) == "2026-03-01 01:02:03.000000"  # naive = UTC
