"""Real Kafka clients against a real broker process: confluent-kafka (librdkafka 2.x), kafka-python 3.x,
aiokafka, Debian's kcat (librdkafka 2.0.2) and the official Java client (tests/java/ClientTool.java).

Every client produces a common data set (keys, values, duplicate and null headers, explicit timestamps,
null key, tombstone, empty value, a 1 MB value) and reads it back with assign() and explicit offsets (no
consumer group); then each codec a client supports; then every producer against every other consumer;
then idempotent producers.

The broker under test is logbroker by default. ``LOGBROKER_TEST_TARGET=kafka`` runs the very same tests
against Apache Kafka (``KafkaPeer``, jars from ``.ci/fetch-jars``), to check that the assertions describe
Kafka's behaviour rather than ours.

A missing tool (no kcat, no java/javac, no jars) skips its tests; under CI (``CI=true`` or
``LOGBROKER_REQUIRE_PEERS``) it fails them, because .ci/run installs every tool. A codec a client cannot
use here (kafka-python without lz4/zstandard/python-snappy) is skipped with the reason, CI or not.
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import subprocess
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from logbroker.protocol.records import BatchHeader, Compression, iter_headers
from logbroker_devtools.client.connection import KafkaClient, fetch_request
from logbroker_devtools.testing import peers
from logbroker_devtools.testing.peers import JavaClientTool
from support import TEST_TARGET, missing_tool

TARGET = TEST_TARGET
CODECS = ("gzip", "snappy", "lz4", "zstd")
# The broker's message.max.bytes (logbroker's default equals Kafka's); producers are allowed up to it.
MESSAGE_MAX_BYTES = 1048588
BIG_VALUE_SIZE = 1_000_000  # a 1 MB value that still fits message.max.bytes with its batch overhead
CONSUME_TIMEOUT = 60.0
# Base of the explicit CreateTime timestamps: an hour ago. Not in the future (Kafka 4 refuses more than
# 1 h ahead) and not old: Kafka's time retention (7 days) deletes even the active segment of older data,
# first 30 s after it starts, which would move the log start offset under a running test.
T0 = int(time.time()) * 1000 - 3_600_000

Headers = tuple[tuple[str, bytes | None], ...]


# ----------------------------------------------------------------------------------------- data model


@dataclass(frozen=True)
class Rec:
    """A record to produce. ``timestamp=None``: the producer stamps it (CreateTime at send)."""

    key: bytes | None
    value: bytes | None
    headers: Headers = ()
    timestamp: int | None = None


@dataclass(frozen=True)
class Got:
    """A consumed record as a client reports it."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp: int
    timestamp_type: str | None  # "CreateTime" / "LogAppendTime"; None when the client does not say


@dataclass
class Produced:
    """What a producer run wrote: the records as consumers must see them, and when they were sent."""

    client: str
    topic: str
    expected: list[Rec]
    offsets: list[int] | None  # acknowledged offsets, for clients that report them
    sent_from_ms: int
    sent_until_ms: int


def common_records() -> list[Rec]:
    """The full data set of the per-client round trip.

    Header values are plain text without ',' or '=' and nothing contains kcat's delimiters, so every
    client (kcat included, through its command line and its ``%h`` output) can carry all of it.
    """
    big = (b"0123456789abcdef" * (BIG_VALUE_SIZE // 16 + 1))[:BIG_VALUE_SIZE]
    return [
        Rec(b"k0", b"first value", (("h", b"v"),), T0),
        Rec(b"k1", b"duplicate header names", (("dup", b"1"), ("dup", b"2"), ("x", b"y"), ("dup", b"3")), T0 + 1),
        Rec(b"k2", b"null and empty header values", (("nullh", None), ("empty", b""), ("nullh", b"set")), T0 + 2),
        Rec(None, b"null key", (("h", b"nk"),), T0 + 3),
        Rec(b"k4", None, (("tomb", b"stone"),), T0 + 4),  # tombstone
        Rec(b"k5", b"", (), T0 + 5),  # empty, non-null value
        Rec(b"", b"empty key", (), T0 + 6),
        Rec(b"k7", bytes(range(256)), (("bin", b"all byte values"),), T0 + 7),
        Rec("ключ-8".encode(), "värde ✓ 値".encode(), (("ünï", "✓".encode()),), T0 + 8),
        Rec(b"k9", b"older timestamp than the record before", (), T0 - 86_400_000),
        Rec(b"big", big, (("size", str(BIG_VALUE_SIZE).encode()),), T0 + 10),
        Rec(b"k11", b"after the big one", (("h", b"last"),), T0 + 11),
    ]


def matrix_records(n: int = 20) -> list[Rec]:
    """The smaller cross-client data set: headers, duplicates, nulls, binary, unicode."""
    out = []
    for i in range(n):
        headers: Headers = (("i", str(i).encode()),)
        key: bytes | None = f"m-key-{i}".encode()
        value: bytes | None = f"m-value-{i}-".encode() + bytes([i]) * i
        if i % 5 == 1:
            headers = (("dup", b"a"), ("dup", b"b"), ("nul", None))
        if i % 7 == 2:
            key = None
        if i == 4 or i == 15:
            value = None
        if i == 10:
            value = b""
        if i == 11:
            headers = ()
        if i == 13:
            value = bytes(range(256))
        if i == 17:
            key, value = "ключ".encode(), "värde ✓".encode()
        out.append(Rec(key, value, headers, T0 + i * 1000 if i != 6 else T0 - 5000))
    return out


def codec_records(n: int = 200) -> list[Rec]:
    """Compressible records for the codec tests, so every batch really shrinks (librdkafka sends a batch
    uncompressed when the codec would not shrink it). One header set for all, so kcat sends them in one run."""
    headers: Headers = (("codec", b"test"), ("dup", b"a"), ("dup", b"b"), ("nul", None))
    return [
        Rec(None if i % 10 == 3 else f"c-key-{i}".encode(), f"compressible value {i} ".encode() * 20, headers, T0 + i)
        for i in range(n)
    ]


# ----------------------------------------------------------------------------------------- helpers


def now_ms() -> int:
    return int(time.time() * 1000)


def create_topic(bootstrap: str, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(name, 1, 1)], operation_timeout=30).values():
        fut.result(30)
    return name


def _fetch_raw(client: KafkaClient, topic: str, offset: int) -> tuple[bytes, int]:
    req = fetch_request(topic, 0, offset, max_wait_ms=0, max_bytes=8 << 20, min_bytes=0)
    p = client.leader(topic, 0).do(req).responses[0].partitions[0]
    assert p.error_code == 0, f"fetch {topic}@{offset}: error {p.error_code}"
    return bytes(p.records or b""), p.high_watermark


def stored_batches(bootstrap: str, topic: str) -> list[BatchHeader]:
    """Batch headers as the broker serves them: a protocol-level view that no client library filters."""
    out: list[BatchHeader] = []
    with KafkaClient(bootstrap, client_id="test-clients-inspect") as kc:
        offset, hwm = 0, 1
        while offset < hwm:
            raw, hwm = _fetch_raw(kc, topic, offset)
            if offset >= hwm:
                break
            headers = [h for h in iter_headers(raw) if h.next_offset > offset]
            assert headers, f"{topic}: no whole batch served at offset {offset} (high watermark {hwm})"
            out.extend(headers)
            offset = headers[-1].next_offset
    return out


def _show(data: bytes | None) -> object:
    """Large values as length + digest so a failing comparison prints a readable diff."""
    if data is None or len(data) <= 64:
        return data
    return f"<{len(data)} bytes sha256:{hashlib.sha256(data).hexdigest()[:16]}>"


STAMPED = "stamped by the producer while sending"


def assert_consumed(got: Sequence[Got], produced: Produced, consumer: str, start: int = 0) -> None:
    """Keys, values, headers (order and duplicates included), timestamps, offsets and order of the records
    read from offset `start` (the producer wrote its records from offset 0 of a fresh topic)."""
    exp = produced.expected[start:]
    lo, hi = produced.sent_from_ms - 1, produced.sent_until_ms + 1
    want = [
        (start + i, _show(r.key), _show(r.value), [(k, _show(v)) for k, v in r.headers],
         STAMPED if r.timestamp is None else r.timestamp)
        for i, r in enumerate(exp)
    ]  # fmt: skip
    have = [
        (g.offset, _show(g.key), _show(g.value), [(k, _show(v)) for k, v in g.headers],
         STAMPED if i < len(exp) and exp[i].timestamp is None and lo <= g.timestamp <= hi else g.timestamp)
        for i, g in enumerate(got)
    ]  # fmt: skip
    assert have == want, f"{produced.client} -> {consumer}: records from offset {start} differ"
    types = {g.timestamp_type for g in got} - {None}
    assert types <= {"CreateTime"}, f"{produced.client} -> {consumer}: timestamp types {types}"
    if produced.offsets is not None:
        assert produced.offsets == list(range(len(produced.expected))), f"{produced.client}: acknowledged offsets"


# ----------------------------------------------------------------------------------------- clients


class Client:
    """One client library; subclasses drive the real thing."""

    name = "?"
    explicit_timestamps = True  # can the producer set CreateTime per record?
    null_header_values = True  # can the producer send a header whose value is null?

    def missing(self) -> str | None:
        """Why this client cannot run here (tool not installed), or None."""
        return None

    def codec_missing(self, codec: str) -> str | None:
        return None

    def require(self) -> None:
        reason = self.missing()
        if reason:
            missing_tool(reason)

    def produce(
        self,
        bootstrap: str,
        topic: str,
        records: Sequence[Rec],
        *,
        compression: str = "none",
        idempotent: bool | None = None,
    ) -> list[int] | None:
        raise NotImplementedError

    def consume(self, bootstrap: str, topic: str, count: int, start: int = 0) -> list[Got]:
        """Read `count` records of partition 0 from offset `start` with assign() (no consumer group)."""
        raise NotImplementedError

    def send(
        self,
        bootstrap: str,
        topic: str,
        records: Sequence[Rec],
        *,
        compression: str = "none",
        idempotent: bool | None = None,
    ) -> Produced:
        if not self.explicit_timestamps:
            records = [replace(r, timestamp=None) for r in records]
        if not self.null_header_values:
            records = [replace(r, headers=tuple((k, b"" if v is None else v) for k, v in r.headers)) for r in records]
        start = now_ms()
        offsets = self.produce(bootstrap, topic, records, compression=compression, idempotent=idempotent)
        return Produced(self.name, topic, list(records), offsets, start, now_ms())


class ConfluentClient(Client):
    name = "confluent"

    def produce(
        self,
        bootstrap: str,
        topic: str,
        records: Sequence[Rec],
        *,
        compression: str = "none",
        idempotent: bool | None = None,
    ) -> list[int] | None:
        offsets: dict[int, int] = {}
        errors: list[str] = []

        def report(i: int) -> Any:
            def cb(err: KafkaError | None, msg: Any) -> None:
                if err is not None:
                    errors.append(f"record {i}: {err}")
                else:
                    offsets[i] = msg.offset()

            return cb

        conf: dict[str, Any] = {} if idempotent is None else {"enable.idempotence": idempotent}
        if idempotent:
            conf["batch.num.messages"] = 100  # several batches in flight, so sequencing is exercised
        p = Producer(
            {
                **conf,
                "bootstrap.servers": bootstrap,
                "linger.ms": 5,
                "acks": "all",
                "compression.type": compression,
                # librdkafka's own default (1000000) is below a 1 MB value plus its key.
                "message.max.bytes": MESSAGE_MAX_BYTES,
            }
        )
        for i, r in enumerate(records):
            p.produce(
                topic,
                key=r.key,
                value=r.value,
                headers=list(r.headers),
                partition=0,
                timestamp=r.timestamp or 0,
                on_delivery=report(i),
            )
            p.poll(0)
        assert p.flush(60) == 0, "confluent producer: records still queued after 60 s"
        assert not errors, errors
        return [offsets[i] for i in range(len(records))]

    def consume(self, bootstrap: str, topic: str, count: int, start: int = 0) -> list[Got]:
        # librdkafka wants a group.id even for assign(); nothing is joined or committed.
        c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "logbroker-tests-unused",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": False,
            }
        )
        got: list[Got] = []
        try:
            c.assign([TopicPartition(topic, 0, start)])
            deadline = time.monotonic() + CONSUME_TIMEOUT
            while len(got) < count and time.monotonic() < deadline:
                msg = c.poll(0.5)
                if msg is None:
                    continue
                err = msg.error()
                if err is not None:
                    raise AssertionError(f"confluent consumer error: {err}")
                ts_type, ts = msg.timestamp()
                got.append(
                    Got(
                        msg.offset(),
                        msg.key(),
                        msg.value(),
                        tuple(msg.headers() or ()),
                        ts,
                        {1: "CreateTime", 2: "LogAppendTime"}.get(ts_type),
                    )
                )
        finally:
            c.close()
        return got


class KafkaPythonClient(Client):
    name = "kafka-python"
    null_header_values = False  # KafkaProducer.send() insists on (str, bytes) header tuples

    # kafka-python 3.0.x compresses with these packages, not with cramjam (gzip is the standard library's).
    CODEC_PACKAGES = {"snappy": "python-snappy", "lz4": "lz4", "zstd": "zstandard"}

    def codec_missing(self, codec: str) -> str | None:
        from kafka import codec as kc

        if not getattr(kc, f"has_{codec}")():
            return f"kafka-python's {codec} codec needs the {self.CODEC_PACKAGES[codec]} package (not installed)"
        return None

    def produce(
        self,
        bootstrap: str,
        topic: str,
        records: Sequence[Rec],
        *,
        compression: str = "none",
        idempotent: bool | None = None,
    ) -> list[int] | None:
        from kafka import KafkaProducer

        # kafka-python 3.x is idempotent by default.
        conf: dict[str, Any] = {} if idempotent is None else {"enable_idempotence": idempotent}
        p = KafkaProducer(
            **conf,
            bootstrap_servers=bootstrap,
            acks="all",
            linger_ms=5,
            compression_type=None if compression == "none" else compression,
            max_request_size=MESSAGE_MAX_BYTES,
        )
        try:
            futures = [
                p.send(topic, value=r.value, key=r.key, headers=list(r.headers), partition=0, timestamp_ms=r.timestamp)
                for r in records
            ]
            p.flush(60)
            return [f.get(60).offset for f in futures]
        finally:
            p.close(10)

    def consume(self, bootstrap: str, topic: str, count: int, start: int = 0) -> list[Got]:
        from kafka import KafkaConsumer
        from kafka.structs import TopicPartition as KTP

        c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
        got: list[Got] = []
        try:
            tp = KTP(topic, 0)
            c.assign([tp])
            c.seek(tp, start)
            deadline = time.monotonic() + CONSUME_TIMEOUT
            while len(got) < count and time.monotonic() < deadline:
                for recs in c.poll(timeout_ms=500).values():
                    for m in recs:
                        got.append(
                            Got(
                                m.offset,
                                m.key,
                                m.value,
                                tuple(m.headers or ()),
                                m.timestamp,
                                {0: "CreateTime", 1: "LogAppendTime"}.get(m.timestamp_type),
                            )
                        )
        finally:
            c.close()
        return got


class AIOKafkaClient(Client):
    name = "aiokafka"

    def codec_missing(self, codec: str) -> str | None:
        from aiokafka import codec as ac

        if not getattr(ac, f"has_{codec}")():
            return f"aiokafka {codec} needs cramjam, which is not importable"
        return None

    def produce(
        self,
        bootstrap: str,
        topic: str,
        records: Sequence[Rec],
        *,
        compression: str = "none",
        idempotent: bool | None = None,
    ) -> list[int] | None:
        from aiokafka import AIOKafkaProducer

        conf: dict[str, Any] = {} if idempotent is None else {"enable_idempotence": idempotent}

        async def run() -> list[int]:
            p = AIOKafkaProducer(
                **conf,
                bootstrap_servers=bootstrap,
                acks="all",
                linger_ms=5,
                compression_type=None if compression == "none" else compression,
                max_request_size=MESSAGE_MAX_BYTES,
            )
            await p.start()
            try:
                futures = [
                    await p.send(topic, value=r.value, key=r.key, partition=0, timestamp_ms=r.timestamp,
                                 headers=list(r.headers))
                    for r in records
                ]  # fmt: skip
                return [(await f).offset for f in futures]
            finally:
                await p.stop()

        return asyncio.run(asyncio.wait_for(run(), 120))

    def consume(self, bootstrap: str, topic: str, count: int, start: int = 0) -> list[Got]:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.structs import TopicPartition as ATP

        async def run() -> list[Got]:
            c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
            await c.start()
            got: list[Got] = []
            try:
                tp = ATP(topic, 0)
                c.assign([tp])
                c.seek(tp, start)
                deadline = time.monotonic() + CONSUME_TIMEOUT
                while len(got) < count and time.monotonic() < deadline:
                    for recs in (await c.getmany(tp, timeout_ms=500)).values():
                        for m in recs:
                            got.append(
                                Got(
                                    m.offset,
                                    m.key,
                                    m.value,
                                    tuple(m.headers or ()),
                                    m.timestamp,
                                    {0: "CreateTime", 1: "LogAppendTime"}.get(m.timestamp_type),
                                )
                            )
            finally:
                await c.stop()
            return got

        return asyncio.run(run())


KCAT_KEY_DELIM = b"|~K~|"
KCAT_MSG_DELIM = b"|~M~|"
KCAT_END = b"|~END~|\n"
# Offset, timestamp, key length and value length (-1: null), then the raw key and value, then the
# headers as kcat prints them (name=value CSV, "NULL" for a null value), then an end marker.
KCAT_FORMAT = "%o\\t%T\\t%K\\t%S\\t%k%s%h" + KCAT_END.decode().replace("\n", "\\n")


@cache
def _kcat_features() -> frozenset[str]:
    exe = shutil.which("kcat")
    if exe is None:
        return frozenset()
    out = subprocess.run([exe, "-V"], capture_output=True, text=True, timeout=30, check=False).stdout
    for word in out.replace(")", " ").split():
        if word.startswith("builtin.features="):
            return frozenset(word.split("=", 1)[1].split(","))
    return frozenset()


class KcatClient(Client):
    """Debian's kcat (librdkafka 2.0.2). kcat cannot set per-record timestamps, and its -H headers
    apply to a whole run, so records go out in runs of equal headers."""

    name = "kcat"
    explicit_timestamps = False

    def missing(self) -> str | None:
        return None if shutil.which("kcat") else "kcat not found on PATH (apt-get install kcat)"

    def codec_missing(self, codec: str) -> str | None:
        return None if codec in _kcat_features() else f"this kcat's librdkafka is built without {codec}"

    def _base(self, bootstrap: str, topic: str) -> list[bytes]:
        exe = shutil.which("kcat")
        assert exe is not None
        return [exe.encode(), b"-b", bootstrap.encode(), b"-t", topic.encode(), b"-p", b"0",
                b"-X", b"message.max.bytes=%d" % MESSAGE_MAX_BYTES]  # fmt: skip

    @staticmethod
    def _line(r: Rec, nulls: bool) -> bytes:
        for part in (r.key, r.value, *(v for _, v in r.headers)):
            assert part is None or (KCAT_MSG_DELIM not in part and KCAT_KEY_DELIM not in part), "kcat delimiter"
        if nulls:  # -Z: an empty key or value before/after the delimiter is sent as null
            assert r.value is None and r.key != b"", "kcat -Z cannot send this record"
            return (r.key or b"") + KCAT_KEY_DELIM
        if r.key is None:
            assert r.value, "kcat cannot send a null key with an empty or null value"
            return r.value
        return r.key + KCAT_KEY_DELIM + (r.value or b"")

    def produce(
        self,
        bootstrap: str,
        topic: str,
        records: Sequence[Rec],
        *,
        compression: str = "none",
        idempotent: bool | None = None,
    ) -> list[int] | None:
        runs: list[tuple[Headers, bool, list[Rec]]] = []
        for r in records:
            nulls = r.value is None
            if runs and runs[-1][0] == r.headers and runs[-1][1] == nulls:
                runs[-1][2].append(r)
            else:
                runs.append((r.headers, nulls, [r]))
        for headers, nulls, recs in runs:
            argv = [*self._base(bootstrap, topic), b"-P", b"-K", KCAT_KEY_DELIM, b"-D", KCAT_MSG_DELIM,
                    b"-z", compression.encode()]  # fmt: skip
            if idempotent:
                argv += [b"-X", b"enable.idempotence=true"]
            if nulls:
                argv.append(b"-Z")
            for k, v in headers:
                argv += [b"-H", k.encode() if v is None else k.encode() + b"=" + v]
            data = b"".join(self._line(r, nulls) + KCAT_MSG_DELIM for r in recs)
            proc = subprocess.run(argv, input=data, capture_output=True, timeout=120, check=False)
            assert proc.returncode == 0, f"kcat -P exited {proc.returncode}: {proc.stderr.decode(errors='replace')}"
        return None  # kcat does not report offsets

    def consume(self, bootstrap: str, topic: str, count: int, start: int = 0) -> list[Got]:
        offset = b"beginning" if start == 0 else str(start).encode()
        argv = [*self._base(bootstrap, topic), b"-C", b"-o", offset, b"-e", b"-c", str(count).encode(),
                b"-f", KCAT_FORMAT.encode()]  # fmt: skip
        proc = subprocess.run(argv, capture_output=True, timeout=CONSUME_TIMEOUT + 60, check=False)
        assert proc.returncode == 0, f"kcat -C exited {proc.returncode}: {proc.stderr.decode(errors='replace')}"
        return self.parse(proc.stdout)

    @staticmethod
    def parse(out: bytes) -> list[Got]:
        got: list[Got] = []
        pos = 0
        while pos < len(out):
            fields = []
            for _ in range(4):
                tab = out.index(b"\t", pos)
                fields.append(int(out[pos:tab]))
                pos = tab + 1
            offset, ts, klen, vlen = fields
            key = None if klen < 0 else out[pos : pos + klen]
            pos += max(klen, 0)
            value = None if vlen < 0 else out[pos : pos + vlen]
            pos += max(vlen, 0)
            end = out.index(KCAT_END, pos)
            text = out[pos:end].decode()
            pos = end + len(KCAT_END)
            headers = []
            for item in text.split(",") if text else []:
                name, _, v = item.partition("=")
                headers.append((name, None if v == "NULL" else v.encode()))
            got.append(Got(offset, key, value, tuple(headers), ts, None))
        return got


class JavaClient(Client):
    """The official Java client through tests/java/ClientTool.java (one JVM per produce or consume)."""

    name = "java"

    def missing(self) -> str | None:
        if not peers.java_available():
            return "java not found"
        if not peers.javac_available():
            return "javac not found (a JDK is needed to build tests/java/ClientTool.java)"
        if not peers.jars_available("clients"):
            return f"no Kafka client jars in {peers.default_jar_dir('clients')} (run .ci/fetch-jars)"
        return None

    @property
    def tool(self) -> JavaClientTool:
        return _java_tool()

    def produce(
        self,
        bootstrap: str,
        topic: str,
        records: Sequence[Rec],
        *,
        compression: str = "none",
        idempotent: bool | None = None,
    ) -> list[int] | None:
        acks = self.tool.produce(
            bootstrap,
            topic,
            [{"key": r.key, "value": r.value, "headers": list(r.headers), "timestamp": r.timestamp, "partition": 0}
             for r in records],
            compression=compression,
            idempotence=idempotent is not False,  # the Java client's default is idempotent
            properties={"max.request.size": MESSAGE_MAX_BYTES},
        )  # fmt: skip
        assert len(acks) == len(records), acks
        return [a["offset"] for a in acks]

    def consume(self, bootstrap: str, topic: str, count: int, start: int = 0) -> list[Got]:
        rows = self.tool.consume(
            bootstrap, topic, from_offset=start, count=count, timeout_ms=int(CONSUME_TIMEOUT * 1000)
        )
        return [
            Got(r["offset"], r["key"], r["value"], tuple(r["headers"]), r["timestamp"], r["timestamp_type"])
            for r in rows
        ]


@cache
def _java_tool() -> JavaClientTool:
    tool = JavaClientTool()
    tool.compile()
    return tool


CLIENTS: dict[str, Client] = {
    c.name: c for c in (ConfluentClient(), KafkaPythonClient(), AIOKafkaClient(), KcatClient(), JavaClient())
}
_MARKS = {"kcat": [pytest.mark.kcat], "java": [pytest.mark.java]}


def client_params(names: Sequence[str] = tuple(CLIENTS)) -> list[Any]:
    return [pytest.param(n, marks=_MARKS.get(n, []), id=n) for n in names]


# ----------------------------------------------------------------------------------------- fixtures


def _client(name: str) -> Client:
    client = CLIENTS[name]
    client.require()
    return client


# ----------------------------------------------------------------------------------------- round trip


@pytest.mark.parametrize("name", client_params())
def test_round_trip(bootstrap: str, name: str) -> None:
    client = _client(name)
    topic = create_topic(bootstrap, f"rt-{name}")
    records = common_records()
    produced = client.send(bootstrap, topic, records)
    got = client.consume(bootstrap, topic, len(records))
    assert_consumed(got, produced, name)
    # An explicit offset inside the data set (and, for the batching clients, inside a batch).
    start = 5
    assert_consumed(client.consume(bootstrap, topic, len(records) - start, start), produced, name, start)
    # Served as written: magic v2, uncompressed.
    batches = stored_batches(bootstrap, topic)
    assert sum(h.records_count for h in batches) == len(records)
    assert {(h.magic, h.compression) for h in batches} == {(2, Compression.NONE)}


# ----------------------------------------------------------------------------------------- codecs


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("name", client_params())
def test_compression(bootstrap: str, name: str, codec: str) -> None:
    client = _client(name)
    reason = client.codec_missing(codec)
    if reason:
        pytest.skip(reason)
    topic = create_topic(bootstrap, f"z-{name}-{codec}")
    records = codec_records()
    produced = client.send(bootstrap, topic, records, compression=codec)
    batches = stored_batches(bootstrap, topic)
    assert batches, "nothing stored"
    assert {h.compression for h in batches} == {Compression.NAMES[codec]}, f"{name} did not use {codec}"
    assert sum(h.records_count for h in batches) == len(records)
    assert_consumed(client.consume(bootstrap, topic, len(records)), produced, name)


# ----------------------------------------------------------------------------------------- cross-client


@pytest.fixture(scope="module")
def matrix_topics(bootstrap: str) -> dict[str, Produced | BaseException]:
    """Each producer's run of the matrix data set, produced once and read by every other consumer."""
    return {}


def _matrix_produced(cache_: dict[str, Produced | BaseException], bootstrap: str, name: str) -> Produced:
    if name not in cache_:
        try:
            topic = create_topic(bootstrap, f"x-{name}")
            cache_[name] = CLIENTS[name].send(bootstrap, topic, matrix_records())
        except Exception as exc:
            cache_[name] = exc
    result = cache_[name]
    if isinstance(result, BaseException):
        pytest.fail(f"producing the matrix data set with {name} failed: {result!r}")
    return result


PAIRS = [
    pytest.param(p, c, marks=_MARKS.get(p, []) + _MARKS.get(c, []), id=f"{p}->{c}")
    for p in CLIENTS
    for c in CLIENTS
    if p != c
]


@pytest.mark.parametrize(("producer", "consumer"), PAIRS)
def test_cross_client(bootstrap: str, matrix_topics: dict[str, Produced | BaseException], producer: str,
                      consumer: str) -> None:  # fmt: skip
    _client(producer)
    reader = _client(consumer)
    produced = _matrix_produced(matrix_topics, bootstrap, producer)
    got = reader.consume(bootstrap, produced.topic, len(produced.expected))
    assert_consumed(got, produced, consumer)


# ----------------------------------------------------------------------------------------- idempotence

IDEMPOTENT = ["confluent", "kafka-python", "aiokafka", "java"]


@pytest.mark.parametrize("name", client_params(IDEMPOTENT))
def test_idempotent_producer(bootstrap: str, name: str) -> None:
    """Records arrive exactly once and in order, in batches that really carry a producer id and
    consecutive sequence numbers (kafka-python uses its default, which is idempotent)."""
    client = _client(name)
    topic = create_topic(bootstrap, f"idem-{name}")
    n = 2000
    records = [Rec(f"k{i}".encode(), f"value-{i}".encode() * 8, (("i", str(i).encode()),), T0 + i) for i in range(n)]
    if name == "kafka-python":
        from kafka import KafkaProducer

        assert KafkaProducer.DEFAULT_CONFIG["enable_idempotence"] is True
    # kafka-python 3.x: its default configuration, which is idempotent.
    produced = client.send(bootstrap, topic, records, idempotent=None if name == "kafka-python" else True)
    reader = CLIENTS["confluent"]
    assert_consumed(reader.consume(bootstrap, topic, n), produced, f"{reader.name} (idempotent {name})")

    batches = stored_batches(bootstrap, topic)
    assert len(batches) > 1, "want several batches to check sequencing"
    pids = {(h.producer_id, h.producer_epoch) for h in batches}
    assert len(pids) == 1 and min(pids)[0] >= 0, f"batches not from one idempotent producer: {pids}"
    seq = 0
    for h in batches:
        assert h.base_sequence == seq, f"batch at offset {h.base_offset}: sequence {h.base_sequence}, want {seq}"
        seq += h.records_count
    assert seq == n, f"{seq} records stored, {n} produced"
