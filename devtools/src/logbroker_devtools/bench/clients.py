"""confluent-kafka (librdkafka) client settings and the helpers every workload shares: waiting for a
broker, creating topics, closing clients.

Every client starts from `connection(bootstrap)`: the bootstrap plus, for a secured cluster (the ``cluster``
target of `logbroker bench --bootstrap ... --command-config ...`), the librdkafka security settings the shared
layer (`logbroker._kafka.settings`) makes of it, registered for that bootstrap while the target runs."""

from __future__ import annotations

import contextlib
import gc
import logging
import socket
import subprocess
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from logbroker_devtools.bench.model import READY_TIMEOUT_S, REBALANCE_HEARTBEAT_MS, BenchError
from logbroker_devtools.client.connection import parse_bootstrap

if TYPE_CHECKING:
    from logbroker._kafka.settings import KafkaSettings

_CLIENT_LOGGER = logging.getLogger("logbroker_devtools.bench.clients")
_SECURITY: dict[str, dict[str, Any]] = {}  # bootstrap -> librdkafka security settings


@contextlib.contextmanager
def secured(bootstrap: str, settings: KafkaSettings | None) -> Any:
    """While the block runs, every client of ``bootstrap`` connects with ``settings`` (TLS, SASL)."""
    from logbroker._kafka.settings import librdkafka_config

    if settings is not None:
        conf = librdkafka_config(settings)
        conf.pop("bootstrap.servers", None)
        _SECURITY[bootstrap] = conf
    try:
        yield
    finally:
        _SECURITY.pop(bootstrap, None)


def connection(bootstrap: str) -> dict[str, Any]:
    """Where to connect and how: the base of every client configuration here."""
    return {**_SECURITY.get(bootstrap, {}), "bootstrap.servers": bootstrap}


def producer_config(bootstrap: str) -> dict[str, Any]:
    """Throughput producer: big batches and queues so librdkafka, not Python, sets the pace."""
    return {
        **connection(bootstrap),
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
        **connection(bootstrap),
        "acks": "all",
        "linger.ms": 0,
        "compression.type": "none",
    }


def consumer_config(bootstrap: str) -> dict[str, Any]:
    """Read-back consumer: manual assign, no commits, minimal fetch back-off."""
    return {
        **connection(bootstrap),
        "group.id": f"bench-{uuid.uuid4().hex[:12]}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "fetch.queue.backoff.ms": 1,
    }


def txn_producer_config(bootstrap: str, transactional_id: str) -> dict[str, Any]:
    """Transactional producer: a transaction is 10 records and a commit, sent at once (commit flushes,
    so lingering would only add delay); acks=all and idempotence are what transactions imply."""
    return {
        **connection(bootstrap),
        "transactional.id": transactional_id,
        "acks": "all",
        "linger.ms": 0,
        "compression.type": "none",
        "delivery.report.only.error": True,
    }


def txn_consumer_config(bootstrap: str) -> dict[str, Any]:
    """Read-back consumer of the transactions workload: read_committed said explicitly (it is
    librdkafka's default, not the Java client's)."""
    return {**consumer_config(bootstrap), "isolation.level": "read_committed"}


def _with_logger(conf: dict[str, Any]) -> dict[str, Any]:
    # librdkafka logs (connection refused while a broker boots, etc.) go to a file instead of
    # scribbling over the progress bar.
    return {**conf, "logger": _CLIENT_LOGGER}


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
    host, port = parse_bootstrap(bootstrap)
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

    admin = AdminClient(_with_logger(connection(bootstrap)))
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


def create_topic(
    bootstrap: str, topic: str, timeout: float = 30.0, partitions: int = 1, config: dict[str, str] | None = None
) -> str:
    """Create a fresh topic (1 partition by default, topic `config`); returns how (``create_topics`` or
    ``auto-create``, which cannot set a config).

    Falls back to broker auto-creation (a producer's metadata request) for brokers that do not
    implement CreateTopics.
    """
    admin = AdminClient(_with_logger(connection(bootstrap)))
    method = "create_topics"
    try:
        futures = admin.create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=1, config=dict(config or {}))],
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
    producer = Producer(_with_logger(connection(bootstrap)))
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


def group_consumer_config(bootstrap: str, group: str) -> dict[str, Any]:
    """A group consumer with librdkafka's defaults: only where to connect and which group."""
    return {**connection(bootstrap), "group.id": group}


def rebalance_consumer_config(bootstrap: str, group: str) -> dict[str, Any]:
    """Members of the rebalance workload: defaults except a short heartbeat (see the module doc)."""
    return {**group_consumer_config(bootstrap, group), "heartbeat.interval.ms": REBALANCE_HEARTBEAT_MS}


def _close_consumer(consumer: Consumer) -> None:
    with contextlib.suppress(Exception):  # a consumer whose broker vanished must not mask the real error
        consumer.close()
