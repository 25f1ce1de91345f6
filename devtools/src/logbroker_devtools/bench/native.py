"""Native load generators, so the benchmark measures the broker rather than a Python client.

One confluent-kafka producer driven from Python tops out near 150-180 MB/s whatever the broker. Here
the load comes from Kafka's own ``ProducerPerformance`` / ``ConsumerPerformance`` (Maven's
``kafka-tools``, fetched by ``.ci/fetch-jars tools``) and, where a JVM per client is too heavy (several
producers, hundreds of connections), from ``lbload``: our small franz-go program in ``loadgen/``, built
with the local Go toolchain on first use into a cache directory. Every workload reports the broker
process tree's CPU seconds per GB and per request next to its rate (see ``procstat``).

A missing JVM, tools jars or Go toolchain raises :class:`ToolMissing` with one line saying what to
install; the driver turns it into a skipped workload.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from logbroker_devtools.bench.clients import create_topic as create_topic_fn
from logbroker_devtools.bench.model import MB, ONE_PER_REQUEST_WORKLOADS, BenchError
from logbroker_devtools.bench.procstat import BrokerView

LOADGEN_SRC = Path(__file__).with_name("loadgen")
PRODUCER_PERF = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_PERF = "org.apache.kafka.tools.ConsumerPerformance"
TOOL_TIMEOUT_S = 900.0
# franz-go opens with the newest ApiVersions it knows, on which Tansu 0.6 hangs up; Kafka 3.7's request
# versions suit all three brokers (and are what a typical client of theirs speaks).
LOADGEN_MAX_VERSION = "3.7"

# ~1 MB acks=all batches, as a throughput-minded Kafka producer would be set up.
BATCH_PROPS = (
    "acks=all",
    "batch.size=1000000",
    "linger.ms=20",
    "max.request.size=2000000",
    "buffer.memory=67108864",
    "compression.type=none",
)
# One record per produce request: a batch never holds two 100 B records (batch.size below one record),
# no waiting for company (linger 0) and one request in flight, so a request carries one partition's
# single-record batch. The producer's own records-per-request-avg metric checks it.
ONE_PER_REQUEST_PROPS = ("acks=all", "batch.size=1", "linger.ms=0", "max.in.flight.requests.per.connection=1")
# The same on a topic whose every append is flushed to disk before it is acknowledged: Kafka's own way to
# give logbroker's default promise (UnifiedLog flushes in the append once flush.messages are unflushed).
FLUSH_EACH_APPEND = {"flush.messages": "1"}
# One record per produce request with many in flight, as librdkafka's clients (Python, Go, .NET, C/C++)
# send by default: a MessageSet holds one message (batch.num.messages=1), one partition is one MessageSet
# per request, linger 0, acks=all and librdkafka's default pipelining (max.in.flight 1,000,000 per
# connection). kcat is the generator; what the broker stored (one batch per record) checks it.
PIPELINED_ONE_PER_REQUEST_PROPS = ("acks=all", "linger.ms=0", "batch.num.messages=1")
# The pipelined workload sends this many times the one-in-flight count (it runs ~5x faster).
PIPELINED_RECORDS_FACTOR = 5


class ToolMissing(Exception):
    """The load generator cannot run here; the message is the one line the report shows."""


def java_tools_missing() -> str | None:
    """Why Kafka's perf tools cannot run (None when they can)."""
    from logbroker_devtools.testing.kafka_tools import tools_available

    return tools_available()


def _cache_dir() -> Path:
    env = os.environ.get("LOGBROKER_BENCH_CACHE")
    if env:
        return Path(env)
    from logbroker.jars import repo_root

    root = repo_root()
    return (root / ".ci" / "cache" / "bench") if root else Path.home() / ".cache" / "logbroker-bench"


_STANDARD_GO = "/usr/local/go/bin/go"  # the official tarball's place, often left off PATH


def loadgen_binary() -> Path:
    """The built ``lbload`` for the current source (keyed by its hash), building it when absent."""
    return go_binary(LOADGEN_SRC, "lbload", "the franz-go load generator")


def go_binary(src: Path, name: str, what: str) -> Path:
    """The Go program in ``src`` built once per source (its go.mod, go.sum and *.go hashed) into the cache."""
    digest = hashlib.sha256()
    for path in [*sorted(src.glob("*.go")), src / "go.mod", src / "go.sum"]:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    binary = _cache_dir() / f"{name}-{digest.hexdigest()[:12]}"
    if binary.is_file():
        return binary
    go = os.environ.get("LOGBROKER_GO") or shutil.which("go") or _STANDARD_GO
    if not go or not Path(go).is_file():
        raise ToolMissing(f"Go toolchain not found (needed once to build {what}; install Go)")
    binary.parent.mkdir(parents=True, exist_ok=True)
    tmp = binary.with_name(f".{binary.name}.{os.getpid()}")
    proc = subprocess.run(
        [go, "build", "-buildvcs=false", "-o", str(tmp), "."],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise ToolMissing(f"building {what} failed: {proc.stderr.strip().splitlines()[-1:]}")
    os.replace(tmp, binary)  # atomic: two runs building at once both end with a whole binary
    return binary


@dataclass
class Sample:
    """What one workload moved, and the broker CPU it cost."""

    records: int
    bytes: int
    seconds: float
    requests: int | None
    cpu_s: float | None
    extra: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        gb = self.bytes / 1e9
        out: dict[str, Any] = {
            "records": self.records,
            "bytes": self.bytes,
            "seconds": self.seconds,
            "records_per_s": self.records / self.seconds if self.seconds > 0 else math.nan,
            "MB_per_s": self.bytes / MB / self.seconds if self.seconds > 0 else math.nan,
            "requests": self.requests,
            "broker_cpu_s": self.cpu_s,
            "cpu_s_per_GB": self.cpu_s / gb if self.cpu_s is not None and gb > 0 else None,
            "cpu_us_per_request": (
                self.cpu_s / self.requests * 1e6 if self.cpu_s is not None and self.requests else None
            ),
        }
        return {**out, **self.extra}


def _java_env() -> dict[str, str]:
    env = dict(os.environ)
    for var in ("JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "KAFKA_OPTS"):
        env.pop(var, None)
    return env


def _run_java(main: str, *args: str) -> str:
    from logbroker_devtools.testing.kafka_tools import ToolError, tool_command

    if (why := java_tools_missing()) is not None:
        raise ToolMissing(why)
    try:
        cmd = tool_command(main, *args)
    except ToolError as exc:
        raise ToolMissing(str(exc)) from exc
    # The perf tools are long-running clients: the JIT's full tiers and a bigger heap, not the admin flags.
    cmd = [c for c in cmd if c not in ("-XX:TieredStopAtLevel=1", "-Xmx256m")]
    cmd.insert(1, "-Xmx512m")
    proc = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=TOOL_TIMEOUT_S,
        env=_java_env(),
        stdin=subprocess.DEVNULL,
        check=False,
    )
    if proc.returncode != 0:
        raise BenchError(f"{main.rsplit('.', 1)[1]} exited {proc.returncode}: {(proc.stdout + proc.stderr)[-1500:]}")
    return proc.stdout


_METRIC_LINE = re.compile(r"^([\w-]+):([\w-]+):\{([^}]*)\}\s*:\s*(\S+)\s*$")


def _client_metrics(text: str) -> dict[str, float]:
    """``group:name`` -> value from a perf tool's ``--print-metrics`` dump (client-wide entries only)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _METRIC_LINE.match(line.strip())
        if m and "," not in m.group(3):  # tags beyond client-id are per node/topic/partition
            try:
                out.setdefault(f"{m.group(1)}:{m.group(2)}", float(m.group(4)))
            except ValueError:
                continue
    return out


_PRODUCE_SUMMARY = re.compile(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\)")


def producer_perf(bootstrap: str, topic: str, records: int, size: int, props: tuple[str, ...]) -> Sample:
    """Kafka's ProducerPerformance, unthrottled; the rate is the tool's (JVM start-up excluded)."""
    out = _run_java(
        PRODUCER_PERF,
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--num-records",
        str(records),
        "--record-size",
        str(size),
        "--throughput",
        "-1",
        "--print-metrics",
        "--command-property",
        *props,
    )
    summaries = _PRODUCE_SUMMARY.findall(out)
    if not summaries:
        raise BenchError(f"no ProducerPerformance summary in its output: {out[-800:]}")
    sent, rate = int(summaries[-1][0]), float(summaries[-1][1])
    metrics = _client_metrics(out)
    if metrics.get("producer-metrics:record-error-total", 0) > 0:
        raise BenchError(f"ProducerPerformance: {metrics['producer-metrics:record-error-total']:.0f} records failed")
    requests = metrics.get("producer-metrics:request-total")
    extra = {
        "tool": "ProducerPerformance",
        "records_per_request_avg": metrics.get("producer-metrics:records-per-request-avg"),
        "batch_size_avg": metrics.get("producer-metrics:batch-size-avg"),
        "client_request_total_note": "all requests the producer sent (a few are metadata/api-versions)",
    }
    return Sample(
        sent, sent * size, sent / rate if rate > 0 else math.nan, int(requests) if requests else None, None, extra
    )


def kcat_produce(bootstrap: str, topic: str, records: int, size: int, props: tuple[str, ...]) -> Sample:
    """kcat (librdkafka) producing ``records`` values of ``size`` bytes to partition 0 from a file, with
    librdkafka properties ``props``. Its requests are counted afterwards (`count_stored_batches`)."""
    kcat = os.environ.get("LOGBROKER_KCAT") or shutil.which("kcat")
    if not kcat or not Path(kcat).is_file():
        raise ToolMissing("kcat not found (apt-get install kcat)")
    args = [kcat, "-P", "-q", "-b", bootstrap, "-t", topic, "-p", "0"]
    for prop in props:
        args += ["-X", prop]
    line = b"x" * size + b"\n"
    with tempfile.TemporaryFile() as data, tempfile.TemporaryFile() as err:
        for done in range(0, records, 10_000):
            data.write(line * min(10_000, records - done))
        data.seek(0)
        started = time.monotonic()
        proc = subprocess.run(args, stdin=data, stdout=subprocess.DEVNULL, stderr=err, timeout=TOOL_TIMEOUT_S)
        seconds = time.monotonic() - started
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    if proc.returncode != 0:
        raise BenchError(f"kcat failed (exit {proc.returncode}): {stderr[-800:]}")
    return Sample(records, records * size, seconds, None, None, {"tool": "kcat (librdkafka)", "topic": topic})


def count_stored_batches(bootstrap: str, line: dict[str, Any]) -> None:
    """After a kcat workload (outside its timing and CPU): the batches its partition holds are its produce
    requests; the broker's CPU per request follows from them."""
    batches, stored = stored_batches(bootstrap, line["topic"], 0)
    if stored != line["records"]:
        raise BenchError(f"kcat: {stored} of {line['records']} records stored")
    line["requests"] = line["stored_batches"] = batches
    line["records_per_request_avg"] = stored / batches if batches else None
    line["one_record_per_request"] = batches == stored
    if line.get("broker_cpu_s") is not None and batches:
        line["cpu_us_per_request"] = line["broker_cpu_s"] / batches * 1e6


def stored_batches(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    """(batches, records) of a partition, read from its start: a broker keeps a producer's batches as they
    arrived, so one batch per record means one record per produce request."""
    from logbroker.protocol.records import iter_headers
    from logbroker_devtools.client.connection import Connection, fetch_request, parse_bootstrap

    batches = records = 0
    offset = 0
    with contextlib.closing(Connection(*parse_bootstrap(bootstrap), client_id="bench-check")) as conn:
        while True:
            [t] = conn.do(fetch_request(topic, partition, offset, max_wait_ms=0, max_bytes=8 << 20)).responses
            [p] = t.partitions
            if p.error_code:
                raise BenchError(f"reading back {topic}-{partition}: error {p.error_code}")
            data = bytes(p.records or b"")
            before = batches
            for h in iter_headers(data):
                batches += 1
                records += h.records_count
                offset = h.next_offset
            if batches == before or offset >= p.high_watermark:
                return batches, records


def consumer_perf(bootstrap: str, topic: str, records: int, size: int) -> Sample:
    """Kafka's ConsumerPerformance reading ``records`` from the start; the rate is its fetch time
    (the group join is left out)."""
    out = _run_java(
        CONSUMER_PERF,
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--messages",
        str(records),
        "--timeout",
        "60000",
        "--print-metrics",
        # One property per flag (joptsimple): values after the first were ignored, so the client's defaults
        # hold (1 MB per partition, 50 MB per fetch: ~1,000 fetches per GB from one partition, measured).
        "--command-property",
        "auto.offset.reset=earliest",
    )
    lines = [ln for ln in out.splitlines() if ln.strip()]
    head = next((i for i, ln in enumerate(lines) if ln.startswith("start.time")), None)
    if head is None or head + 1 >= len(lines):
        raise BenchError(f"no ConsumerPerformance summary in its output: {out[-800:]}")
    row = dict(
        zip([c.strip() for c in lines[head].split(",")], [v.strip() for v in lines[head + 1].split(",")], strict=False)
    )
    got = int(row["data.consumed.in.nMsg"])
    if got < records:
        raise BenchError(f"ConsumerPerformance read {got} of {records} records")
    metrics = _client_metrics(out)
    fetches = metrics.get("consumer-fetch-manager-metrics:fetch-total")
    extra = {"tool": "ConsumerPerformance", "rebalance_ms": float(row.get("rebalance.time.ms", "nan"))}
    return Sample(got, got * size, float(row["fetch.time.ms"]) / 1000, int(fetches) if fetches else None, None, extra)


def lbload(
    bootstrap: str,
    topic: str,
    *,
    clients: int,
    records: int,
    size: int,
    round_robin: bool = False,
    linger_ms: int = 5,
    partitions: int = 0,
    on_connected: Callable[[dict[str, Any]], None] | None = None,
    compression: str = "none",
    payload: str = "x",
    batch_bytes: int = 1_000_000,
) -> Sample:
    """The franz-go generator: ``clients`` independent producers (acks=all); ``on_connected`` runs
    once all of them hold their connections, before the timed produce starts. With ``partitions``,
    each partition first takes one untimed record, so a topic still opening its logs is not timed.
    ``compression``: the producers' codec; ``payload``: "x" (one repeated byte) or "text" (log-like
    values that compress as logs do, the same bytes every run); ``batch_bytes``: a partition's batch limit."""
    args = [str(loadgen_binary()), "-bootstrap", bootstrap, "-topic", topic, "-clients", str(clients),
            "-records", str(records), "-size", str(size), "-linger-ms", str(linger_ms), "-wait",
            "-partitions", str(partitions), "-max-version", LOADGEN_MAX_VERSION, "-compression", compression,
            "-payload", payload, "-batch-bytes", str(batch_bytes)]  # fmt: skip
    if round_robin:
        args.append("-round-robin")
    with (
        tempfile.TemporaryFile() as err,
        subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True) as proc,
    ):
        assert proc.stdin is not None and proc.stdout is not None
        lines: list[dict[str, Any]] = []
        try:
            for raw in proc.stdout:
                line = json.loads(raw)
                lines.append(line)
                if line["phase"] == "connected":
                    if on_connected is not None:
                        on_connected(line)
                    proc.stdin.write("go\n")
                    proc.stdin.flush()
                elif line["phase"] in ("done", "failed"):
                    break
            proc.wait(timeout=TOOL_TIMEOUT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
        err.seek(0)
        stderr = err.read().decode(errors="replace")[-800:]
    last = lines[-1] if lines else {}
    if last.get("phase") != "done" or last.get("errors"):
        raise BenchError(f"lbload failed (exit {proc.returncode}): {last.get('first_error') or stderr}")
    connected = next((line for line in lines if line["phase"] == "connected"), {})
    extra = {"tool": "lbload (franz-go)", "clients": clients, "connect_s": last["connect_seconds"],
             "prime_s": last["prime_seconds"], "broker_connections": connected.get("broker_connections")}  # fmt: skip
    return Sample(last["records"], last["bytes"], last["seconds"], last["produce_requests"], None, extra)


def measured(view: BrokerView | None, run: Callable[[Callable[[], None]], Sample]) -> dict[str, Any]:
    """``run(mark)`` with the broker's CPU seconds read before and after (None for a broker not on this
    host); ``mark()`` moves the start to now, so a generator's connecting phase can be left out.

    Everything dirty in the page cache is written back first: a broker that acks from the page cache
    (Kafka) leaves its last run's data for the next one that syncs to write out (0.56 s of writeback
    after a 1 GB Kafka round, measured), so without this one target's timing would carry another's."""
    t_sync = time.monotonic()
    os.sync()
    synced_s = time.monotonic() - t_sync
    start = [view.cpu_times() if view is not None else (0.0, 0.0)]

    def mark() -> None:
        if view is not None:
            start[0] = view.cpu_times()

    t0 = time.monotonic()
    sample = run(mark)
    user = system = None
    if view is not None:
        end = view.cpu_times()
        user, system = end[0] - start[0][0], end[1] - start[0][1]
        sample.cpu_s = user + system
    out = sample.as_dict()
    out.update(broker_cpu_user_s=user, broker_cpu_system_s=system, wall_s=time.monotonic() - t0, synced_s=synced_s)
    if view is not None:
        out["broker_rss_MB"] = view.rss() / MB
    return out


# ---------------------------------------------------------------------------------------------- workloads


@dataclass(frozen=True)
class NativeSizes:
    """How much each native workload moves (``--quick`` divides the records)."""

    records_1kb: int
    one_per_request: int
    producers: int
    connections: int
    scale_partitions: tuple[int, ...]
    scale_connections: tuple[int, ...]
    scale_records: int
    faces_messages: int = 100_000


CLIENT_CONNECTIONS = 2  # lbload's franz-go clients each hold two: metadata (seed) and produce
# Records each client of a many-connection workload sends at least. With 200,000 records over 250 clients
# each sent one ~800 KB request: the whole workload was a half-second burst, and Kafka's rate swung from
# 193 to 427 MB/s between runs (logbroker's from 323 to 391). 4,000 x 1 KB make it several seconds; a
# scale point's 2,500 clients get 400 each (1 GB in all).
CONNECTIONS_RECORDS_PER_CLIENT = 4_000
SCALE_RECORDS_PER_CLIENT = 400
# One CreateTopics may not add more than 10,000 metadata records (Kafka's MAX_RECORDS_PER_USER_OP, which
# logbroker keeps): a topic of 10,000 partitions is 10,001 of them, so larger points use several topics.
SCALE_TOPIC_PARTITIONS = 5_000


def _connections_to_clients(connections: int) -> int:
    return max(1, connections // CLIENT_CONNECTIONS)


Step = Callable[[str, int], Callable[[int], None]]


def run_native(bootstrap: str, run_id: str, sizes: NativeSizes, step: Step) -> tuple[dict[str, Any], dict[str, str]]:
    """The native workloads (model.NATIVE_WORKLOADS) on fresh topics: (details per workload, skip reasons per workload).

    The consume reads back what the 1-partition produce wrote, so it is skipped with it.
    """
    view = BrokerView.find(bootstrap)
    n, done, skipped = sizes.records_1kb, {}, {}
    details: dict[str, Any] = {"broker_pids": view.pids if view else None}

    def topic(key: str, partitions: int = 1, config: dict[str, str] | None = None) -> str:
        name = f"native-{key.replace('_', '-')}-{run_id}"
        details[f"topic_{key}"] = {
            "name": name,
            "partitions": partitions,
            "config": config or {},
            "created_by": create_topic_fn(bootstrap, name, partitions=partitions, timeout=300.0, config=config),
        }
        return name

    def lb(
        key: str, partitions: int, clients: int, rr: bool = False, per_client: int = 0
    ) -> Callable[[Callable[[], None]], Sample]:
        def run(mark: Callable[[], None]) -> Sample:
            name = topic(key, partitions)
            return lbload(
                bootstrap,
                name,
                clients=clients,
                records=max(n, clients * per_client),
                size=1024,
                round_robin=rr,
                partitions=partitions,
                on_connected=lambda line: _connected(line, mark, view),
            )

        return run

    def perf(
        key: str, records: int, size: int, props: tuple[str, ...], config: dict[str, str] | None = None
    ) -> Callable[[Callable[[], None]], Sample]:
        def run(mark: Callable[[], None]) -> Sample:
            name = topic(key, config=config)
            mark()  # the topic's creation is not the workload
            return producer_perf(bootstrap, name, records, size, props)

        return run

    def pipelined(mark: Callable[[], None]) -> Sample:
        name = topic("one_per_request_pipelined")
        mark()
        records = sizes.one_per_request * PIPELINED_RECORDS_FACTOR
        return kcat_produce(bootstrap, name, records, 100, PIPELINED_ONE_PER_REQUEST_PROPS)

    def consume(_mark: Callable[[], None]) -> Sample:
        return consumer_perf(bootstrap, details["topic_produce_1p"]["name"], n, 1024)

    try:  # untimed: a JVM broker's JIT (and any broker's caches) warm before the first timed workload
        warm = topic("warmup", 8)
        details["warmup"] = lbload(
            bootstrap, warm, clients=1, records=min(n, 50_000), size=1024, partitions=8
        ).as_dict()
    except ToolMissing:
        pass  # each workload below says what is missing

    plan: list[tuple[str, Callable[[Callable[[], None]], Sample]]] = [
        ("produce_1p", perf("produce_1p", n, 1024, BATCH_PROPS)),
        ("consume_1p", consume),
        ("produce_8p", lb("produce_8p", 8, sizes.producers)),
        ("one_per_request", perf("one_per_request", sizes.one_per_request, 100, ONE_PER_REQUEST_PROPS)),
        (
            "one_per_request_flush",
            perf("one_per_request_flush", sizes.one_per_request, 100, ONE_PER_REQUEST_PROPS, FLUSH_EACH_APPEND),
        ),
        ("one_per_request_pipelined", pipelined),
        ("produce_1000p", lb("produce_1000p", 1000, sizes.producers, rr=True)),
        (
            "connections",
            lb("connections", 8, _connections_to_clients(sizes.connections), per_client=CONNECTIONS_RECORDS_PER_CLIENT),
        ),
    ]
    for key, make in plan:
        on_step = step(f"native {key}", 1)
        if key == "consume_1p" and "produce_1p" not in done:
            skipped[key] = skipped.get("produce_1p", "nothing was produced to read back")
            continue
        try:
            done[key] = measured(view, make)
            if key == "one_per_request_pipelined":
                count_stored_batches(bootstrap, done[key])
        except ToolMissing as exc:
            skipped[key] = str(exc)
        on_step(1)
    details.update(done)
    for key in ONE_PER_REQUEST_WORKLOADS:
        if (one := done.get(key)) is not None:
            rpr = one.get("records_per_request_avg")
            one["one_record_per_request"] = rpr is not None and abs(rpr - 1.0) < 1e-9
    return details, skipped


def _connected(line: dict[str, Any], mark: Callable[[], None], view: BrokerView | None) -> None:
    """lbload's clients are all connected: note the broker's side of it, then start the CPU clock."""
    if view is not None:
        line["broker_connections"] = view.connections()
        line["broker_rss_MB"] = view.rss() / MB
    mark()


def run_scale(bootstrap: str, run_id: str, sizes: NativeSizes, step: Step) -> tuple[dict[str, Any], dict[str, str]]:
    """Memory, readiness time and produce rate as partitions, then connections, grow (same broker, so
    memory accumulates in that order: each point also records the growth since the previous one)."""
    view = BrokerView.find(bootstrap)
    details: dict[str, Any] = {"idle_rss_MB": view.rss() / MB if view else None}
    skipped: dict[str, str] = {}
    curves = (("partitions", "p", sizes.scale_partitions), ("connections", "c", sizes.scale_connections))
    for kind, tag, points in curves:
        for n in points:
            on_step = step(f"scale {n} {kind}", 1)
            try:
                details[f"{kind}_{n}"] = _scale_point(bootstrap, f"scale-{tag}{n}-{run_id}", view, sizes, **{kind: n})
            except ToolMissing as exc:
                skipped[kind] = str(exc)
                break
            on_step(1)
    return details, skipped


def _scale_point(
    bootstrap: str,
    topic: str,
    view: BrokerView | None,
    sizes: NativeSizes,
    *,
    partitions: int = 8,
    connections: int = CLIENT_CONNECTIONS,
) -> dict[str, Any]:
    """One point of a curve: create the topic (timed), connect the clients, produce (round robin over
    the partitions); memory is read once every client is connected."""
    rss0 = view.rss() if view is not None else 0
    n_topics = math.ceil(partitions / SCALE_TOPIC_PARTITIONS)
    per_topic = math.ceil(partitions / n_topics)
    names = [topic] if n_topics == 1 else [f"{topic}-{i}" for i in range(n_topics)]
    t0 = time.monotonic()
    how = ", ".join(sorted({create_topic_fn(bootstrap, name, partitions=per_topic, timeout=300.0) for name in names}))
    point: dict[str, Any] = {"partitions": per_topic * n_topics, "topics": n_topics, "created_by": how,
                             "created_s": time.monotonic() - t0}  # fmt: skip
    clients = _connections_to_clients(connections)
    at_connect: dict[str, Any] = {}

    def connected(line: dict[str, Any], mark: Callable[[], None]) -> None:
        _connected(line, mark, view)
        at_connect.update(line)

    point["produce"] = measured(
        view,
        lambda mark: lbload(
            bootstrap,
            ",".join(names),
            clients=clients,
            records=max(sizes.scale_records, clients * SCALE_RECORDS_PER_CLIENT),
            size=1024,
            round_robin=True,
            partitions=per_topic,
            on_connected=lambda line: connected(line, mark),
        ),
    )
    point.update(
        # created, and every partition has taken a record: what a restarted or growing cluster waits for
        ready_s=point["created_s"] + point["produce"]["prime_s"],
        clients=clients,
        connect_s=at_connect.get("connect_seconds"),
        broker_connections=at_connect.get("broker_connections"),
        rss_MB=at_connect.get("broker_rss_MB"),
    )
    if view is not None and point["rss_MB"] is not None:
        point["rss_growth_MB"] = point["rss_MB"] - rss0 / MB
    return point
