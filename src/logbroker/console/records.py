"""The message browser: a page of records from a position, search, a live tail, and producing a test record.

A page is read by a consumer assigned to the chosen partitions (no group, nothing committed) that stops at
the page's size, at the partitions' end, or, when searching, after `SCAN_LIMIT` records or `SCAN_SECONDS`,
whichever comes first, answering where to continue: a partition is never loaded whole. Values are shown
decoded: UTF-8 text, JSON pretty-printed, logbroker.notify's notifications (and oslo's 2.0 envelope around
them), and each record's logbroker.mq message id.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from logbroker.console.cluster import ConsoleError

if TYPE_CHECKING:
    from logbroker.console.cluster import Cluster

PAGE_MAX = 500
SCAN_LIMIT = 20_000  # records a search looks at per request
SCAN_SECONDS = 3.0
SHOWN_BYTES = 64 << 10  # of one value: the rest is summarised


@dataclass
class Shown:
    """A key, value or header decoded for display: ``kind`` says how it was read."""

    kind: str  # null, text, json, notification, oslo, binary
    text: str
    note: str = ""
    size: int = 0


def show(data: bytes | None) -> Shown:
    if data is None:
        return Shown("null", "", size=0)
    size = len(data)
    cut = data[:SHOWN_BYTES]
    more = f" (first {SHOWN_BYTES:,} of {size:,} bytes)" if size > SHOWN_BYTES else ""
    try:
        text = cut.decode("utf-8")
    except UnicodeDecodeError:
        shown = " (first 1,024 shown)" if size > 1024 else ""
        return Shown("binary", _hex(cut[:1024]), f"{size:,} bytes, not UTF-8{shown}", size)
    if not more and text[:1] in "{[":
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if isinstance(value, dict) and isinstance(value.get("oslo.message"), str):
            with contextlib.suppress(ValueError):
                inner = json.loads(value["oslo.message"])
                note = f"oslo.messaging {value.get('oslo.version', '?')} envelope" + _notification_note(inner)
                return Shown("oslo", json.dumps(inner, indent=2, ensure_ascii=False), note, size)
        if isinstance(value, dict) and "event_type" in value and "publisher_id" in value:
            return Shown("notification", json.dumps(value, indent=2, ensure_ascii=False),
                         "notification" + _notification_note(value), size)  # fmt: skip
        if value is not None:
            return Shown("json", json.dumps(value, indent=2, ensure_ascii=False), "JSON", size)
    return Shown("text", text, more.strip(), size)


def _notification_note(msg: Any) -> str:
    if not isinstance(msg, dict):
        return ""
    parts = [f"{k} {msg[k]}" for k in ("event_type", "publisher_id", "priority") if msg.get(k)]
    return ": " + ", ".join(parts) if parts else ""


def _hex(data: bytes) -> str:
    return "\n".join(f"{i:08x}  {data[i : i + 16].hex(' ')}" for i in range(0, len(data), 16))


@dataclass
class Row:
    partition: int
    offset: int
    timestamp: int
    key: Shown
    value: Shown
    headers: list[tuple[str, Shown]]
    mq_id: str


@dataclass
class Page:
    topic: str
    rows: list[Row]
    next: dict[int, int]  # where each partition would continue
    ends: dict[int, tuple[int, int]]  # low and high watermarks
    scanned: int = 0
    searched: bool = False
    complete: bool = True  # the search reached every partition's end
    notes: list[str] = field(default_factory=list)


@dataclass
class Query:
    partitions: list[int]
    mode: str = "end"  # end, beginning, offset, timestamp
    offset: int = 0
    timestamp_ms: int = 0
    limit: int = 50
    key: str | None = None
    contains: str | None = None
    read_committed: bool = False
    positions: dict[int, int] | None = None  # a continuation: exact positions

    @property
    def searching(self) -> bool:
        return bool(self.key) or bool(self.contains)


def _consumer(cluster: Cluster, query: Query) -> Any:
    from logbroker import _kafka
    from logbroker.cli.common import kafka_client

    return kafka_client(_kafka.consumer, cluster.bootstrap, cluster.security, **{
        "group.id": f"logbroker-console-{uuid.uuid4().hex[:8]}",  # never joined, nothing committed
        "enable.auto.commit": False, "enable.auto.offset.store": False, "enable.partition.eof": True,
        "isolation.level": "read_committed" if query.read_committed else "read_uncommitted",
        "fetch.wait.max.ms": 50, "fetch.max.bytes": 4 << 20, "max.partition.fetch.bytes": 1 << 20,
        "queued.max.messages.kbytes": 4096, "client.id": "logbroker-console",
        "error_cb": lambda _e: None,  # failures surface as the calls' own errors
    })  # fmt: skip


def read(cluster: Cluster, topic: str, query: Query) -> Page:
    from confluent_kafka import KafkaException, TopicPartition

    from logbroker.cli.common import error_text

    query.limit = max(1, min(query.limit, PAGE_MAX))
    consumer = _consumer(cluster, query)
    try:
        try:
            md = consumer.list_topics(topic, timeout=cluster.timeout).topics.get(topic)
            if md is None or md.error is not None or not md.partitions:
                why = error_text(md.error) if md and md.error else "UNKNOWN_TOPIC_OR_PARTITION"
                raise ConsoleError(f"topic {topic}: {why}", 403 if md and md.error and md.error.code() == 29 else 404)
            known = sorted(md.partitions)
            parts = [p for p in (query.partitions or known) if p in md.partitions]
            if not parts:
                raise ConsoleError(f"topic {topic} has partitions {known[0]}..{known[-1]}")
            ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=cluster.timeout) for p in parts}
            starts = _positions(consumer, topic, parts, ends, query, cluster.timeout)
        except KafkaException as exc:
            raise ConsoleError(error_text(exc), 403 if "AUTHORIZATION" in error_text(exc) else 400) from None
        page = Page(topic, [], dict(starts), ends, searched=query.searching)
        live = {p for p, o in starts.items() if o < ends[p][1]}
        if not live:
            return page
        consumer.assign([TopicPartition(topic, p, starts[p]) for p in sorted(live)])
        deadline = time.monotonic() + (SCAN_SECONDS if query.searching else cluster.timeout)
        want = query.limit
        key = query.key.encode() if query.key else None
        needle = query.contains.encode() if query.contains else None
        while live and len(page.rows) < want and time.monotonic() < deadline:
            if query.searching and page.scanned >= SCAN_LIMIT:
                break
            for m in consumer.consume(num_messages=min(500, max(want * 2, 100)), timeout=0.03):
                p = m.partition()
                err = m.error()
                if err is not None:
                    if err.code() == -191:  # _PARTITION_EOF
                        live.discard(p)
                        continue
                    raise ConsoleError(error_text(err), 403 if "AUTHORIZATION" in error_text(err) else 502)
                if p not in live:
                    continue
                page.next[p] = m.offset() + 1
                page.scanned += 1
                if key is not None and m.key() != key:
                    continue
                if needle is not None and not _contains(m, needle):
                    continue
                page.rows.append(_row(topic, m))
                if len(page.rows) >= want:
                    break
            for p in list(live):
                if page.next[p] >= ends[p][1]:
                    live.discard(p)
        page.complete = not live
        page.rows.sort(key=lambda r: (r.timestamp, r.partition, r.offset))
        return page
    finally:
        with contextlib.suppress(Exception):
            consumer.close()


def _positions(consumer: Any, topic: str, parts: list[int], ends: dict[int, tuple[int, int]], q: Query,
               timeout: float) -> dict[int, int]:  # fmt: skip
    from confluent_kafka import TopicPartition

    if q.positions:
        return {p: min(max(q.positions.get(p, ends[p][0]), ends[p][0]), ends[p][1]) for p in parts}
    if q.mode == "beginning":
        return {p: ends[p][0] for p in parts}
    if q.mode == "offset":
        return {p: min(max(q.offset, ends[p][0]), ends[p][1]) for p in parts}
    if q.mode == "timestamp":
        found = consumer.offsets_for_times([TopicPartition(topic, p, q.timestamp_ms) for p in parts], timeout=timeout)
        return {tp.partition: tp.offset if tp.offset >= 0 else ends[tp.partition][1] for tp in found}
    # the end: the last `limit` records, shared among the partitions
    back = max(1, q.limit // max(1, len(parts))) if not q.searching else 0
    return {p: max(ends[p][0], ends[p][1] - back) for p in parts}


def _contains(m: Any, needle: bytes) -> bool:
    if needle in (m.value() or b"") or needle in (m.key() or b""):
        return True
    return any(needle in (v or b"") or needle in k.encode() for k, v in (m.headers() or ()))


def _row(topic: str, m: Any) -> Row:
    from logbroker.mq.ids import MessageID

    _kind, ts = m.timestamp()
    headers = [(k, show(v)) for k, v in (m.headers() or ())]
    return Row(m.partition(), m.offset(), ts, show(m.key()), show(m.value()), headers,
               str(MessageID(topic, m.partition(), m.offset())))  # fmt: skip


def produce(cluster: Cluster, topic: str, key: str | None, value: str | None, headers: list[tuple[str, str]],
            partition: int | None) -> tuple[int, int]:  # fmt: skip
    """One record, acknowledged by every in-sync replica: (partition, offset), or Kafka's error."""
    from confluent_kafka import KafkaException

    from logbroker import _kafka
    from logbroker.cli.common import error_text, kafka_client

    outcome: list[Any] = []
    p = kafka_client(_kafka.producer, cluster.bootstrap, cluster.security, **{
        "acks": "all", "client.id": "logbroker-console", "message.timeout.ms": int(cluster.timeout * 1000),
        "error_cb": lambda _e: None})  # fmt: skip
    try:
        extra = {"partition": partition} if partition is not None else {}
        p.produce(topic, value=None if value is None else value.encode(), key=None if key is None else key.encode(),
                  headers=[(k, v.encode()) for k, v in headers] or None,
                  on_delivery=lambda err, msg: outcome.append(err or msg), **extra)  # fmt: skip
        p.flush(cluster.timeout + 1)
    except (KafkaException, BufferError, ValueError, TypeError) as exc:
        raise ConsoleError(f"produce to {topic}: {error_text(exc)}") from None
    if not outcome:
        raise ConsoleError(f"produce to {topic}: no acknowledgement within {cluster.timeout:g}s", 502)
    got = outcome[0]
    if not hasattr(got, "offset"):
        text = error_text(got)
        raise ConsoleError(f"produce to {topic}: {text}", 403 if "AUTHORIZATION" in text else 400)
    return got.partition(), got.offset()
