"""What a benchmark run is made of: targets, workloads, metrics and their parameters."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

ALL_TARGETS = ("logbroker", "tansu", "kafka")
DEFAULT_RECORDS_100B = 1_000_000
DEFAULT_RECORDS_1KB = 200_000
DEFAULT_LATENCY_SAMPLES = 2_000
QUICK_DIVISOR = 10
QUICK_LATENCY_SAMPLES = 300
LATENCY_WARMUP = 20
CONSUME_BATCH = 10_000
READY_TIMEOUT_S = 90.0
STALL_TIMEOUT_S = 60.0
MB = 1_000_000  # MB/s means 10^6 payload bytes per second (keys/headers/framing excluded)

WORKLOADS = ("throughput", "latency", "groups", "transactions", "native", "scale", "faces")
# native/scale need Java/Go, faces takes minutes: on request
DEFAULT_WORKLOADS = ("throughput", "latency", "groups", "transactions")
DEFAULT_GROUP_SAMPLES = (7, 5)  # (first-assignment samples, rebalance samples)
QUICK_GROUP_SAMPLES = (3, 2)
REBALANCE_MEMBERS = 3  # stable members before the newcomer joins
REBALANCE_PARTITIONS = 6
GROUP_TIMEOUT_S = 60.0  # per sample: longer means the broker failed to assign
REBALANCE_HEARTBEAT_MS = 100

RECORD_SIZES = {"100B": 100, "1KB": 1024}

DEFAULT_TRANSACTIONS = 2_000  # committed transactions to time (quick: / QUICK_DIVISOR)
TXN_RECORDS = 10  # records per transaction
TXN_RECORD_SIZE = RECORD_SIZES["1KB"]
TXN_MAX_SECONDS = 60.0  # a slow broker stops early: the rate is what matters, not the count

# Native load generators (``native`` and ``scale`` workloads, ``logbroker_devtools.bench.native``).
DEFAULT_NATIVE_RECORDS_1KB = 500_000  # per produce workload (quick: / QUICK_DIVISOR)
DEFAULT_ONE_PER_REQUEST = 20_000
NATIVE_PRODUCERS = 4  # concurrent producers of the 8- and 1,000-partition workloads
NATIVE_CONNECTIONS = 500
SCALE_PARTITIONS = (100, 1_000, 10_000)
SCALE_CONNECTIONS = (100, 1_000, 5_000)
QUICK_SCALE_PARTITIONS = (100, 1_000)
QUICK_SCALE_CONNECTIONS = (100, 1_000)
DEFAULT_FACES_MESSAGES = 200_000  # messages per face workload (quick: a quarter; fewer measure start-up)
DEFAULT_SCALE_RECORDS = 200_000  # 1 KB records produced at each point of a curve
# key -> row label; every one also gets CPU per GB and per request rows.
NATIVE_WORKLOADS = {
    "produce_1p": "native produce 1KB 1 partition",
    "consume_1p": "native consume 1KB 1 partition",
    "produce_8p": f"native produce 1KB 8 partitions x{NATIVE_PRODUCERS} producers",
    "one_per_request": "native produce 100B 1 record/request",
    "one_per_request_flush": "native produce 100B 1 record/request, flush.messages=1",
    "one_per_request_pipelined": "native produce 100B 1 record/request, pipelined (librdkafka)",
    "produce_1000p": f"native produce 1KB 1000 partitions x{NATIVE_PRODUCERS}",
    "connections": f"native produce 1KB {NATIVE_CONNECTIONS} connections",
}


# Rates of tiny records: requests, not bytes, are the work. The second runs on a topic with flush.messages=1
# (every append on disk before its acknowledgement on Kafka too: logbroker's default promise).
ONE_PER_REQUEST_WORKLOADS = ("one_per_request", "one_per_request_flush")
# Rated in records (= requests) per second, not MB/s.
RECORD_RATE_WORKLOADS = (*ONE_PER_REQUEST_WORKLOADS, "one_per_request_pipelined")


class BenchError(RuntimeError):
    """A workload could not complete (broker stalled, refused records, died...)."""


@dataclass(frozen=True)
class Metric:
    """One reported number; ``higher_is_better`` drives the colour of the ratio column."""

    key: str
    label: str
    unit: str
    kind: str  # "records", "bytes", "latency", "groups" or "transactions": selects the chart panel
    higher_is_better: bool
    source: str | None = None  # the workload, when the panel does not say it (read_committed consume)

    @property
    def tick(self) -> str:
        """Short two-line label for chart x ticks."""
        label = self.label.removeprefix("acks=all latency ").removeprefix("group ")
        label = label.removeprefix("native produce ").removeprefix("native ")
        return label.replace(" partitions", "p").replace(" partition", "p").replace(" ", "\n")

    @property
    def workload(self) -> str:
        """The workload (``WORKLOADS``) that produces this metric."""
        return self.source or {"records": "throughput", "bytes": "throughput"}.get(self.kind, self.kind)


def _build_metrics() -> tuple[Metric, ...]:
    out: list[Metric] = []
    for op in ("produce", "consume"):
        for size in RECORD_SIZES:
            out.append(Metric(f"{op}_{size}_records_per_s", f"{op} {size}", "records/s", "records", True))
            out.append(Metric(f"{op}_{size}_MB_per_s", f"{op} {size}", "MB/s", "bytes", True))
    out.append(Metric("latency_p50_ms", "acks=all latency p50", "ms", "latency", False))
    out.append(Metric("latency_p99_ms", "acks=all latency p99", "ms", "latency", False))
    out.append(Metric("group_first_assignment_ms", "group first assignment", "ms", "groups", False))
    out.append(Metric("group_rebalance_ms", "group rebalance 3+1", "ms", "groups", False))
    out.append(Metric("txn_commits_per_s", "transactions committed", "txn/s", "transactions", True))
    out.append(Metric("txn_consume_records_per_s", "read_committed consume", "records/s", "records", True,
                      "transactions"))  # fmt: skip
    out.append(Metric("txn_consume_MB_per_s", "read_committed consume", "MB/s", "bytes", True, "transactions"))
    for key, label in NATIVE_WORKLOADS.items():
        if key in RECORD_RATE_WORKLOADS:
            out.append(Metric(f"native_{key}_records_per_s", label, "records/s", "native_detail", True, "native"))
        else:
            out.append(Metric(f"native_{key}_MB_per_s", label, "MB/s", "native", True, "native"))
        out.append(Metric(f"native_{key}_cpu_s_per_GB", f"{label} broker CPU", "s/GB", "native_detail", False,
                          "native"))  # fmt: skip
        out.append(Metric(f"native_{key}_cpu_us_per_request", f"{label} broker CPU", "µs/req", "native_detail",
                          False, "native"))  # fmt: skip
    from logbroker_devtools.bench.faces import FACES_ROWS

    for key, label in FACES_ROWS.items():
        out.append(Metric(f"faces_{key}_per_s", label, "msg/s", "faces", True, "faces"))
        out.append(Metric(f"faces_{key}_x_raw", f"{label} / raw confluent-kafka", "x", "faces", True, "faces"))
    out.append(Metric("scale_startup_s", "scale start-up (empty broker)", "s", "scale", False))
    out.append(Metric("scale_idle_rss_MB", "scale RSS idle", "MB", "scale", False))
    for parts in SCALE_PARTITIONS:
        out.append(Metric(f"scale_p{parts}_ready_s", f"scale {parts} partitions: topic ready", "s", "scale", False))
        out.append(Metric(f"scale_p{parts}_rss_MB", f"scale {parts} partitions: RSS", "MB", "scale", False))
        out.append(Metric(f"scale_p{parts}_MB_per_s", f"scale {parts} partitions: produce", "MB/s", "scale", True))
    for conns in SCALE_CONNECTIONS:
        out.append(Metric(f"scale_c{conns}_connect_s", f"scale {conns} connections: connect", "s", "scale", False))
        out.append(Metric(f"scale_c{conns}_rss_MB", f"scale {conns} connections: RSS", "MB", "scale", False))
        out.append(Metric(f"scale_c{conns}_MB_per_s", f"scale {conns} connections: produce", "MB/s", "scale", True))
    return tuple(out)


METRICS = _build_metrics()


@dataclass
class Target:
    """A broker to benchmark.

    ``start`` returns a context manager that launches the broker, yields its bootstrap address
    (``host:port``) once it accepts connections, and tears it down on exit, so targets can be
    run strictly one after another.
    """

    name: str
    start: Callable[[], AbstractContextManager[str]]
    notes: str = ""


class _Unavailable(Exception):
    """Raised while starting a target whose binary/jars/module is missing: skip, don't fail."""


def _parse_names(spec: str | Sequence[str], allowed: Sequence[str], what: str) -> list[str]:
    """Comma string or list -> validated, de-duplicated names in `allowed` order of first mention."""
    names = spec.split(",") if isinstance(spec, str) else list(spec)
    out: list[str] = []
    for raw in names:
        name = raw.strip().lower()
        if not name:
            continue
        if name not in allowed:
            raise ValueError(f"unknown {what} {raw!r}; choose from {', '.join(allowed)}")
        if name not in out:
            out.append(name)
    if not out:
        raise ValueError(f"no {what} selected")
    return out


def parse_targets(spec: str | Sequence[str]) -> list[str]:
    """Turn ``"logbroker,tansu"`` (or a list) into validated, de-duplicated target names."""
    return _parse_names(spec, ALL_TARGETS, "target")


def parse_workloads(spec: str | Sequence[str] | None) -> list[str]:
    """Turn ``"throughput,groups"`` (or a list) into validated workload names; None means the
    default set (``native`` and ``scale`` need a JVM or Go and run when named)."""
    if spec is None:
        return list(DEFAULT_WORKLOADS)
    out = _parse_names(spec, WORKLOADS, "workload")
    return [w for w in WORKLOADS if w in out]
