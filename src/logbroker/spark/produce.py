"""Produce a DataFrame's rows with confluent-kafka from inside the Spark tasks.

Spark's Kafka sink has no timestamp column (every record gets the producer's clock), so the two
places that must keep record timestamps, ``replay`` and a topic sink with ``keep_timestamp``, produce
through this one path instead: ``mapInArrow`` hands each task Arrow batches, one idempotent
``acks=all`` producer per task sends them in the order given, and every delivery error fails the task
(and so the job) with the broker's reason.

The frame must have the columns of ``COLUMNS``: ``_target`` (topic, used when no fixed topic is
given), ``_partition`` (null: the key's murmur2 hash decides, as Java clients and Spark's own sink
do), ``_source`` (a label for error messages), ``key``/``value`` (binary), ``headers``
(array<struct<key string, value binary>>), ``_ts`` (epoch ms; null: the producer's clock).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from logbroker._kafka.settings import KafkaSettings

__all__ = ["COLUMNS", "PRODUCER_DEFAULTS", "SOURCE_COLUMNS", "ProduceError", "produce_frame"]

COLUMNS = ("_target", "_partition", "_source", "key", "value", "headers", "_ts")

PRODUCER_DEFAULTS: dict[str, Any] = {
    "enable.idempotence": True,
    "acks": "all",
    # librdkafka's default hashes keys with CRC32; murmur2 is what Java producers and Spark's sink use.
    "partitioner": "murmur2_random",
    "linger.ms": 5,
    "batch.size": 1 << 20,
    "queue.buffering.max.kbytes": 256 << 10,
    "message.timeout.ms": 120_000,
}

_MARK = "logbroker produce failed: "


class ProduceError(RuntimeError):
    """A task could not deliver its records; the message carries the broker's reason."""


def _record(partition: int | None, key: Any, value: Any, headers: Any, ts: int | None) -> dict[str, Any]:
    """One row as Producer.produce's keyword arguments. Timestamp 0 makes librdkafka stamp "now": only for
    rows without one."""
    record: dict[str, Any] = {"key": key, "value": value, "timestamp": ts or 0}
    if headers:
        record["headers"] = [(h["key"], h["value"]) for h in headers]
    if partition is not None:
        record["partition"] = partition
    return record


def _producer(settings: KafkaSettings, conf: dict[str, Any]) -> Any:
    """A task's producer; settings librdkafka refuses fail the task with the reason."""
    from logbroker import _kafka

    return _kafka.producer(settings, refused=lambda message: RuntimeError(f"{_MARK}settings refused: {message}"),
                           **conf)  # fmt: skip


def _task(settings: KafkaSettings, topic: str | None, overrides: dict[str, Any]) -> Any:
    """The mapInArrow function: a closure over the connection's settings and the producer tuning. Its
    clients come from the shared Kafka layer, so an executor's Python needs logbroker (local and
    standalone workers run the driver's)."""
    conf = {**PRODUCER_DEFAULTS, **overrides}

    def produce_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        from confluent_kafka import KafkaException

        from logbroker import _kafka

        failures: list[str] = []
        acked = sent = 0

        def on_delivery(err: Any, msg: Any) -> None:
            nonlocal acked
            if err is None:
                acked += 1
            elif len(failures) < 5:
                failures.append(f"{msg.topic()} partition {msg.partition()}: {err.str()}")

        def on_error(err: Any) -> None:
            if err.fatal() and len(failures) < 5:
                failures.append(f"fatal producer error: {err.str()}")

        def fail(reason: str) -> None:
            # Nothing queued may reach the broker after the task is reported failed: a retry would
            # duplicate it, and the count in the message would be wrong.
            producer.purge()
            producer.flush(0)
            where = topic or "the target topics"
            raise RuntimeError(f"{_MARK}into {where} failed after {acked} of {sent} records: {reason}")

        producer = _producer(settings, {**conf, "on_delivery": on_delivery, "error_cb": on_error})
        for batch in batches:
            cols = batch.to_pydict()
            for target, partition, source, key, value, headers, ts in zip(*(cols[c] for c in COLUMNS), strict=True):
                dest = topic or target
                if not dest:
                    fail(f"record {source or '?'}: no topic (no topic option and a null topic column)")
                kwargs = _record(partition, key, value, headers, ts)
                try:
                    _kafka.produce(producer, dest, **kwargs)
                except KafkaException as exc:
                    fail(f"record {source or '?'}: {exc}")
                sent += 1
                if sent % 1000 == 0:
                    producer.poll(0)
                if failures:
                    fail("; ".join(failures))
        remaining = producer.flush(conf["message.timeout.ms"] / 1000 + 30)
        if failures or remaining:
            fail("; ".join(failures) or f"{remaining} records still unacknowledged")
        yield pa.RecordBatch.from_pydict({"n": [acked]}, schema=pa.schema([("n", pa.int64())]))

    return produce_partition


# A transactional frame also names each row's source (topic, partition, offset), sorted by it within a task.
SOURCE_COLUMNS = ("_t", "_p", "_o")
# A transaction ends at whichever comes first: well inside transaction.timeout.ms even on a slow broker.
CHUNK = 20_000  # records
CHUNK_BYTES = 64 << 20  # key and value bytes


def _transactional_task(settings: KafkaSettings, topic: str, overrides: dict[str, Any], name: str) -> Any:
    """The mapInArrow function of an exactly-once produce: records of one source partition go through one
    transactional producer (``transactional.id`` = NAME.target.topic.partition, whichever task or attempt
    runs it), in transactions of at most `CHUNK` records or `CHUNK_BYTES`, each committing with its records
    the next source offset as the offset of the group of the same name on the target's partition 0
    (Kafka's consume-transform-produce bookkeeping, with the archive as the input). A retried task, or the
    whole job run again with the same NAME, first fences the earlier producer (aborting its open
    transaction), then skips what the marker says was committed: nothing is produced twice and nothing is
    lost, for readers at read_committed. The markers live as long as the broker keeps an empty group's
    offsets (offsets.retention.minutes, 7 days by default); a re-run after that produces everything again.
    The consumer that reads the progress gets the connection's settings without the producer tuning."""
    conf = {**PRODUCER_DEFAULTS, **overrides}
    # librdkafka wants message.timeout.ms <= transaction.timeout.ms; an open transaction of a crashed attempt
    # holds read_committed readers back until the next attempt fences it, or at most this long.
    conf.setdefault("transaction.timeout.ms", conf["message.timeout.ms"])

    def produce_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        from confluent_kafka import KafkaError, KafkaException, TopicPartition

        from logbroker import _kafka

        marker_tp = TopicPartition(topic, 0)
        acked = 0
        current: tuple[str, int] | None = None
        producer: Any = None
        consumer: Any = None
        start = 0  # first source offset still to deliver for the current source
        pending = 0  # records in the open transaction
        pending_bytes = 0
        last = -1  # source offset of the last record produced
        failures: list[str] = []

        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None and len(failures) < 5:
                failures.append(f"{msg.topic()} partition {msg.partition()}: {err.str()}")

        def fail(reason: str) -> None:
            raise RuntimeError(f"{_MARK}into {topic} failed after {acked} records: {reason}")

        def commit() -> None:
            nonlocal acked, pending, pending_bytes
            if not pending:
                return
            producer.flush(conf["message.timeout.ms"] / 1000 + 30)
            if failures:
                producer.abort_transaction(60)
                fail("; ".join(failures))
            marker = TopicPartition(topic, 0, last + 1)
            producer.send_offsets_to_transaction([marker], consumer.consumer_group_metadata(), 60)
            producer.commit_transaction(120)
            acked += pending
            pending = pending_bytes = 0

        def release() -> None:
            """Let go of the current source's clients; an open transaction is left to the next attempt,
            whose producer fences this one and aborts it."""
            nonlocal producer, consumer
            producer = None
            if consumer is not None:
                consumer.close()
                consumer = None

        def close() -> None:
            if producer is not None:
                commit()
            release()

        def open_source(src: tuple[str, int]) -> None:
            nonlocal producer, consumer, start
            group = f"{name}.{topic}.{src[0]}.{src[1]}"
            producer = _producer(settings, {**conf, "transactional.id": group, "on_delivery": on_delivery})
            producer.init_transactions(120)  # fences an earlier attempt and ends its open transaction
            consumer = _kafka.consumer(settings, **{"group.id": group, "enable.auto.commit": False,
                                                    "isolation.level": "read_committed"})  # fmt: skip
            [got] = consumer.committed([marker_tp], timeout=60)
            if got.error is not None:
                fail(f"reading the progress of {group}: {got.error}")
            start = got.offset if got.offset >= 0 else 0

        try:
            for batch in batches:
                cols = batch.to_pydict()
                rows = zip(*(cols[c] for c in (*COLUMNS, *SOURCE_COLUMNS)), strict=True)
                for _target, partition, source, key, value, headers, ts, t, p, o in rows:
                    if (t, p) != current:
                        close()
                        current = (t, p)
                        open_source(current)
                    if o < start:
                        continue  # committed by an earlier attempt or run
                    if not pending:
                        producer.begin_transaction()
                    kwargs = _record(partition, key, value, headers, ts)
                    try:
                        _kafka.produce(producer, topic, **kwargs)
                    except KafkaException as exc:
                        fail(f"record {source or '?'}: {exc}")
                    pending += 1
                    pending_bytes += len(value or b"") + len(key or b"")
                    last = o
                    if pending % 1000 == 0:
                        producer.poll(0)
                    if pending >= CHUNK or pending_bytes >= CHUNK_BYTES:
                        commit()
            close()
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            fenced = isinstance(err, KafkaError) and err.code() == KafkaError._FENCED
            fail("a newer attempt took over this source (fenced)" if fenced else str(exc))
        finally:
            release()
        yield pa.RecordBatch.from_pydict({"n": [acked]}, schema=pa.schema([("n", pa.int64())]))

    return produce_partition


def produce_frame(df: DataFrame, settings: KafkaSettings, topic: str | None = None,
                  overrides: dict[str, Any] | None = None, transactional: str | None = None) -> int:  # fmt: skip
    """Produce every row of ``df`` (columns ``COLUMNS``, in each task's order); returns the acknowledged
    count, collected from the tasks (an accumulator would double-count retried tasks). With
    ``transactional`` (a name, and a fixed ``topic``) the frame also needs `SOURCE_COLUMNS`, sorted within
    each task, and delivery is exactly-once across task retries and re-runs under the same name (see
    `_transactional_task`); the count is then of records the successful task attempts produced (chunks a
    failed attempt committed are delivered, not counted). ``settings``: where and how to connect;
    ``overrides``: librdkafka producer properties over `PRODUCER_DEFAULTS`."""
    wanted = (*COLUMNS, *SOURCE_COLUMNS) if transactional else COLUMNS
    missing = [c for c in wanted if c not in df.columns]
    if missing:
        raise ValueError(f"produce_frame needs column(s) {', '.join(missing)}")
    if transactional:
        if topic is None:
            raise ValueError("a transactional produce needs a fixed topic")
        task = _transactional_task(settings, topic, dict(overrides or {}), transactional)
    else:
        task = _task(settings, topic, dict(overrides or {}))
    try:
        counts = df.select(*wanted).mapInArrow(task, "n long").collect()
    except Exception as exc:
        # The task's RuntimeError arrives inside a Py4J/PythonException text with a JVM trace.
        text = str(exc)
        line = next((ln for ln in text.splitlines() if _MARK in ln), None)
        raise ProduceError(line.split(_MARK, 1)[1] if line else text[:2000]) from exc
    return sum(int(r["n"]) for r in counts)
