"""The measurements: produce/consume throughput, acks=all latency, consumer-group timings, transactions."""

from __future__ import annotations

import contextlib
import gc
import math
import os
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from logbroker_devtools.bench.clients import (
    _close_consumer,
    _close_producer,
    _with_logger,
    connection,
    consumer_config,
    group_consumer_config,
    latency_producer_config,
    producer_config,
    rebalance_consumer_config,
    txn_consumer_config,
    txn_producer_config,
)
from logbroker_devtools.bench.model import (
    CONSUME_BATCH,
    GROUP_TIMEOUT_S,
    LATENCY_WARMUP,
    MB,
    REBALANCE_MEMBERS,
    REBALANCE_PARTITIONS,
    STALL_TIMEOUT_S,
    BenchError,
)


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
    return _read_back(
        Consumer(_with_logger(consumer_config(bootstrap))),
        topic,
        count,
        size,
        on_progress,
        "consumer",
        lambda _msg: None,
    )


def _read_back(
    consumer: Consumer,
    topic: str,
    count: int,
    size: int,
    on_progress: ProgressFn,
    what: str,
    check: Callable[[Any], None],
) -> dict[str, Any]:
    """Time reading ``count`` records of partition 0 from offset 0; every message goes through ``check``
    (which raises BenchError), a stall (a missing record) is an error, and the first record's size is
    checked. The consumer is closed here."""
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
                    raise BenchError(f"{what} stalled at {got}/{count} records")
                continue
            last_data = time.monotonic()
            for msg in batch:
                err = msg.error()
                if err is not None:
                    raise BenchError(f"consume error: {err}")
                check(msg)
            if not checked_size:
                value = batch[0].value()
                if value is None or len(value) != size:
                    raise BenchError(f"read back a {len(value or b'')}-byte record, expected {size}")
                checked_size = True
            got += len(batch)
            on_progress(min(got, count))
        elapsed = time.perf_counter() - t0
    finally:
        _close_consumer(consumer)
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

    admin = AdminClient(_with_logger(connection(bootstrap)))
    try:
        brokers = admin.list_topics(timeout=10).brokers
        resource = ConfigResource(ResourceType.BROKER, str(min(brokers)))
        configs = admin.describe_configs([resource], request_timeout=10)[resource].result(timeout=15)
    except Exception:
        return None
    entry = configs.get("group.initial.rebalance.delay.ms")
    return None if entry is None else entry.value


ABORTED_KEY = b"aborted"  # the key of the records of the workload's aborted transaction


class TransactionsUnsupported(BenchError):
    """The broker refused to start transactions at all (no coordinator, API not supported)."""


# librdkafka's codes for a broker that has no transactions, as opposed to one that failed mid-run.
_NO_TXN_CODES = {
    KafkaError._UNSUPPORTED_FEATURE,
    KafkaError.UNSUPPORTED_VERSION,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
}


def _txn_call(what: str, fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except KafkaException as exc:
        err = exc.args[0]
        raise BenchError(f"{what}: {err.name()}: {err.str()}") from None


def produce_transactions(
    bootstrap: str, topic: str, count: int, per_txn: int, size: int, max_seconds: float, on_progress: ProgressFn
) -> dict[str, Any]:
    """``count`` committed transactions of ``per_txn`` records each (begin, produce x per_txn, commit,
    one after another), or as many as fit in ``max_seconds``; each timed from begin to commit's return.

    One untimed transaction first (coordinator lookup, AddPartitionsToTxn of a new producer), and two
    untimed ones after: an aborted one whose records carry ``ABORTED_KEY`` and a committed one, so the
    read-back proves that a read_committed consumer gets past an aborted transaction and never sees
    it. Returns the numbers and ``committed_records``, what the read-back must return.
    """
    payload = os.urandom(size)
    errors: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        # An abort purges what it had not sent yet: those reports are errors by design.
        if err is not None and msg.key() != ABORTED_KEY:
            errors.append(str(err))

    producer = Producer(_with_logger({**txn_producer_config(bootstrap, f"bench-txn-{uuid.uuid4().hex[:8]}"),
                                      "on_delivery": on_delivery}))  # fmt: skip
    times_ms: list[float] = []
    try:
        producer.list_topics(topic, timeout=30)
        try:
            producer.init_transactions(30)
        except KafkaException as exc:
            err = exc.args[0]
            detail = f"init_transactions: {err.name()}: {err.str()}"
            if err.code() in _NO_TXN_CODES:
                raise TransactionsUnsupported(detail) from None
            raise BenchError(detail) from None

        def transaction(value: bytes, key: bytes | None = None, commit: bool = True) -> None:
            producer.begin_transaction()
            for _ in range(per_txn):
                producer.produce(topic, value, key)
            if commit:
                _txn_call("commit_transaction", producer.commit_transaction, 30)
            else:
                _txn_call("abort_transaction", producer.abort_transaction, 30)

        transaction(payload)  # warm-up
        deadline = time.monotonic() + max_seconds
        t0 = time.perf_counter()
        while len(times_ms) < count and time.monotonic() < deadline:
            t = time.perf_counter_ns()
            transaction(payload)
            times_ms.append((time.perf_counter_ns() - t) / 1e6)
            if len(times_ms) % 10 == 0:
                on_progress(len(times_ms))
        elapsed = time.perf_counter() - t0
        on_progress(len(times_ms))
        transaction(payload, ABORTED_KEY, commit=False)
        transaction(payload)
    finally:
        with contextlib.suppress(KafkaException):  # flush raises the fatal error of a failed producer again
            _close_producer(producer)
    if errors:
        raise BenchError(f"{len(errors)} records of committed transactions failed; first: {errors[0]}")
    done = len(times_ms)
    ordered = sorted(times_ms)
    return {
        "transactions": done,
        "records_per_transaction": per_txn,
        "record_bytes": size,
        "elapsed_s": elapsed,
        "stopped_by": "count" if done >= count else f"max_seconds ({max_seconds:g})",
        "transactions_per_s": done / elapsed,
        "records_per_s": done * per_txn / elapsed,
        "commit_p50_ms": percentile(ordered, 50),
        "commit_p99_ms": percentile(ordered, 99),
        "committed_records": (done + 2) * per_txn,  # + warm-up + the one after the aborted transaction
        "aborted_records": per_txn,
    }


def consume_read_committed(
    bootstrap: str, topic: str, count: int, size: int, on_progress: ProgressFn
) -> dict[str, Any]:
    """Read back ``count`` committed records with a read_committed consumer from offset 0; a record of
    the aborted transaction (key ``ABORTED_KEY``) is an error, as is a stall (a missing record)."""

    def committed_only(msg: Any) -> None:
        if msg.key() == ABORTED_KEY:
            raise BenchError(f"read_committed consumer got a record of an aborted transaction: {msg.offset()}")

    return _read_back(
        Consumer(_with_logger(txn_consumer_config(bootstrap))),
        topic,
        count,
        size,
        on_progress,
        "read_committed consumer",
        committed_only,
    )
