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

WORKLOADS = ("throughput", "latency", "groups", "transactions")
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
        return self.label.removeprefix("acks=all latency ").removeprefix("group ").replace(" ", "\n")

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
    """Turn ``"throughput,groups"`` (or a list; None means all) into validated workload names."""
    if spec is None:
        return list(WORKLOADS)
    out = _parse_names(spec, WORKLOADS, "workload")
    return [w for w in WORKLOADS if w in out]
