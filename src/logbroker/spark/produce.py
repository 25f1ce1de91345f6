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

__all__ = ["COLUMNS", "PRODUCER_DEFAULTS", "ProduceError", "produce_frame"]

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


def _task(bootstrap: str, topic: str | None, overrides: dict[str, Any]) -> Any:
    """The mapInArrow function. A closure, so cloudpickle ships it by value: executors need
    confluent-kafka and pyarrow, not logbroker itself."""
    conf = {**PRODUCER_DEFAULTS, **overrides, "bootstrap.servers": bootstrap}

    def produce_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        from confluent_kafka import KafkaException, Producer

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

        producer = Producer({**conf, "on_delivery": on_delivery, "error_cb": on_error})
        for batch in batches:
            cols = batch.to_pydict()
            for target, partition, source, key, value, headers, ts in zip(*(cols[c] for c in COLUMNS), strict=True):
                dest = topic or target
                if not dest:
                    fail(f"record {source or '?'}: no topic (no topic option and a null topic column)")
                # Timestamp 0 makes librdkafka stamp "now": only for rows without one.
                kwargs: dict[str, Any] = {"key": key, "value": value, "timestamp": ts or 0}
                if headers:
                    kwargs["headers"] = [(h["key"], h["value"]) for h in headers]
                if partition is not None:
                    kwargs["partition"] = partition
                while True:
                    try:
                        producer.produce(dest, **kwargs)
                        break
                    except BufferError:  # local queue full: wait for acknowledgements
                        producer.poll(0.05)
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


def produce_frame(df: DataFrame, bootstrap: str, topic: str | None = None,
                  overrides: dict[str, Any] | None = None) -> int:  # fmt: skip
    """Produce every row of ``df`` (columns ``COLUMNS``, in each task's order); returns the acknowledged
    count, collected from the tasks (an accumulator would double-count retried tasks)."""
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"produce_frame needs column(s) {', '.join(missing)}")
    task = _task(bootstrap, topic, dict(overrides or {}))
    try:
        counts = df.select(*COLUMNS).mapInArrow(task, "n long").collect()
    except Exception as exc:
        # The task's RuntimeError arrives inside a Py4J/PythonException text with a JVM trace.
        text = str(exc)
        line = next((ln for ln in text.splitlines() if _MARK in ln), None)
        raise ProduceError(line.split(_MARK, 1)[1] if line else text[:2000]) from exc
    return sum(int(r["n"]) for r in counts)
