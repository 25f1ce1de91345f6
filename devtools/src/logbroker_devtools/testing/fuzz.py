"""Fuzzing Kafka brokers over the wire: request frames built from the API schemas, mutated frames, garbage,
and a prober that tells an answer from a close, a silent drop or a hang.

One generator serves both the hypothesis property tests (tests/test_fuzz_requests.py, where each choice is a
hypothesis draw, so failures shrink) and the long fuzz run (benchmarks/fuzz_frames.py, where choices come from
`random.Random` at a million frames): both ask an `Entropy` for every decision.

Requests are built from the same schemas (Kafka's JSON message specs, through `logbroker.protocol.api`) the
broker decodes with, and encoded by the codec's encoder, so a "well-formed" frame is well formed by Kafka's own
definition. Values lean on the edges: empty, huge and control-character strings, negative and extreme ints,
null arrays where nullable, unknown topics and groups. Fields that make a broker wait (timeouts, max waits)
are kept short, so a late answer is a hang and not a request that asked to wait.
"""

from __future__ import annotations

import random
import socket
import struct
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from logbroker.protocol import ApiKey, ApiSpec, UnknownApi, api
from logbroker.protocol.records import NewRecord, build_batch

T = TypeVar("T")

_I32 = struct.Struct(">i")
_HDR = struct.Struct(">hhi")
API_VERSIONS_KEY = 18
PRODUCE_KEY = 0

INT_RANGES = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "uint16": (0, (1 << 16) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
}

# Groups that only these APIs touch get a name of their own per request: a member joined by one example
# would otherwise make the next example's join wait a rebalance out (seconds, legitimately, on any broker).
MEMBERSHIP_KEYS = frozenset({11, 12, 13, 14, 68})


class Entropy(Protocol):
    """Where every choice comes from: hypothesis draws in tests, `random.Random` in the long run."""

    def integer(self, lo: int, hi: int) -> int: ...

    def choice(self, options: Sequence[T]) -> T: ...

    def chance(self, p: float) -> bool: ...

    def blob(self, lo: int, hi: int) -> bytes: ...


class RandomEntropy:
    """Entropy from a seeded `random.Random` (fast: the long run makes a million frames)."""

    def __init__(self, seed: int | None = None) -> None:
        self.rng = random.Random(seed)

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def choice(self, options: Sequence[T]) -> T:
        return options[self.rng.randrange(len(options))]

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def blob(self, lo: int, hi: int) -> bytes:
        return self.rng.randbytes(self.rng.randint(lo, hi))


@dataclass
class Names:
    """What the generated requests name: state the target broker has (so deeper paths run), and names it
    has never seen. `tag` makes fresh names unique to one run."""

    topic: str = "fuzz-known"
    topic_id: uuid.UUID | None = None
    partitions: int = 3
    group: str = "fuzz-group"
    node_id: int = 1
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    _n: int = 0

    def fresh(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}-{self.tag}-{self._n:08d}"  # fixed width: a replayed example keeps its frame length


HUGE = 0x7FFF  # the longest string a classic (int16) length can carry


def odd_strings(huge: int = HUGE) -> list[str]:
    """Strings every string field gets some of: empty, control bytes, non-ASCII, Kafka's name limits, huge."""
    return ["", " ", ".", "..", "\x00", "a\nb\x7f\x1b[31m", "tópico-ü-🙂", "x" * 249, "x" * 250, "x" * huge]


# ---------------------------------------------------------------------------------------------------------------
# Well-formed requests, from the schema


class RequestBuilder:
    """Builds request objects of any served API and version from its schema, with edge-leaning values."""

    def __init__(self, names: Names, huge: int = HUGE) -> None:
        self.names = names
        self._odd = odd_strings(huge)
        self._key = -1  # the API being built (group names depend on it)

    def build(self, e: Entropy, spec: ApiSpec, version: int) -> Any:
        cls = spec.request[None]
        self._key = spec.key
        return self._struct(e, cls._struct, cls, version)

    def _struct(self, e: Entropy, st: Any, data_class: Any, version: int) -> Any:
        values: dict[str, Any] = {}
        for f in st._fields:
            if not f.for_version_q(version):
                continue
            if f.tagged_field_q(version) and not e.chance(0.3):
                continue  # tagged fields are optional: mostly left out, as clients do
            values[f.name] = self._value(e, f, version)
        return data_class(**values)

    def _value(self, e: Entropy, f: Any, version: int) -> Any:
        nullable = f.nullable_for_version_q(version)
        if nullable and e.chance(0.15):
            return None
        if f.is_struct_array():
            n = self._count(e)
            return [self._struct(e, f.array_of, f.array_of.data_class, version) for _ in range(n)]
        if f.is_struct():
            return self._struct(e, f, f.data_class, version)
        if f.is_array():
            n = self._count(e)
            return [self._simple(e, f.array_of, version, f) for _ in range(n)]
        return self._simple(e, f, version, f)

    def _count(self, e: Entropy) -> int:
        return e.choice((0, 1, 1, 1, 2, 3)) if not e.chance(0.03) else e.integer(4, 40)

    def _simple(self, e: Entropy, f: Any, version: int, outer: Any) -> Any:
        t = f.type_str
        if t in INT_RANGES:
            return self._int(e, t, f.name)
        if t == "bool":
            return e.chance(0.5)
        if t == "float64":
            return e.choice((0.0, -1.0, 1.5, float("inf"), float("nan"), 1e308))
        if t == "uuid":
            known = self.names.topic_id
            return e.choice((None, uuid.UUID(int=e.integer(1, (1 << 128) - 1)), known or uuid.uuid4()))
        if t == "string":
            return self._string(e, outer)
        if t == "records":
            return self._records(e)
        if t == "bytes":
            return e.choice((b"", b"\x00\x01", b"\xff" * 8)) if e.chance(0.5) else e.blob(0, 64)
        if t == "bitfield":
            return None
        raise TypeError(f"no generator for field type {t} ({f.name})")

    def _int(self, e: Entropy, t: str, name: str) -> int:
        lo, hi = INT_RANGES[t]
        bounded = _bounded_int(name)
        if bounded is not None:
            return e.choice(bounded)
        r = e.integer(0, 9)
        if r < 4:  # the edges (an unsigned type has no negative ones)
            return e.choice(tuple(v for v in (lo, lo + 1, -2, -1, 0, 1, 2, hi - 1, hi) if lo <= v <= hi))
        if r < 8:
            return e.integer(max(lo, -3), min(hi, 5))
        return e.integer(lo, hi)

    def _string(self, e: Entropy, f: Any) -> str:
        n = self.names
        kind = f._entity_type or ""
        name = f.name
        if kind == "topicName" or "topic" in name:
            pool = [n.topic, n.topic, n.fresh("fz-topic"), "__consumer_offsets"]
        elif kind == "groupId" or name in ("group_id", "groups", "key") or "group" in name:
            if self._key in MEMBERSHIP_KEYS:
                pool = [n.fresh("fz-group"), n.fresh("fz-group")]
            else:
                pool = [n.group, n.group, n.fresh("fz-group")]
        elif kind == "transactionalId":
            pool = [n.fresh("fz-txn")]
        elif name in ("protocol_type",):
            pool = ["consumer", "connect"]
        elif name in ("resource_name",):
            pool = [n.topic, str(n.node_id), ""]
        else:
            pool = ["fuzz", n.fresh("fz")]
        if e.chance(0.6):
            return e.choice(pool)
        return e.choice(self._odd)

    def _records(self, e: Entropy) -> bytes:
        r = e.integer(0, 5)
        if r == 0:
            return b""
        if r == 1:
            return e.blob(0, 80)
        records = [NewRecord(b"k", e.blob(0, 40)) for _ in range(e.integer(1, 3))]
        if r == 2:
            return build_batch(records, producer_id=e.integer(0, 5), producer_epoch=0, base_sequence=e.integer(0, 3))
        return build_batch(records)


def _bounded_int(name: str) -> tuple[int, ...] | None:
    """Values for fields that make a broker wait, or that would make it build a lot: short, but still
    including the negative and the zero edge. Everything else gets the full range."""
    if name in ("max_wait_ms",):
        return (-(1 << 31), -1, 0, 1, 100, 500)
    if name in ("session_timeout_ms",):
        return (-(1 << 31), -1, 0, 100, 1000, 6000, (1 << 31) - 1)
    if name in ("rebalance_timeout_ms",):
        return (-(1 << 31), -1, 0, 100, 1000)
    if name in ("timeout_ms",):
        return (-(1 << 31), -1, 0, 1, 1000, 5000)
    if name in ("num_partitions", "count"):
        return (-(1 << 31), -2, -1, 0, 1, 2, 3, 10_001, (1 << 31) - 1)
    if name in ("replication_factor",):
        return (-(1 << 15), -2, -1, 0, 1, 2, (1 << 15) - 1)
    if name in ("partition_index", "partition", "partitions", "index"):
        return (-(1 << 31), -1, 0, 0, 1, 2, 3, 4, (1 << 31) - 1)
    if name in ("timestamp",):
        return (-(1 << 63), -5, -4, -3, -2, -1, 0, 1, int(time.time() * 1000), (1 << 63) - 1)
    if name in ("broker_ids", "replica_id", "broker_id", "leader_id", "node_id"):
        return (-(1 << 31), -2, -1, 0, 1, 2, (1 << 31) - 1)
    return None


# ---------------------------------------------------------------------------------------------------------------
# Frames


def client_id(e: Entropy) -> str | None:
    return e.choice(("fuzz", "fuzz", "", None, "\x00\x01\n", "ü🙂", "c" * 1000))


def frame(spec: ApiSpec, version: int, cid: int, body: Any, cid_str: str | None = "fuzz") -> bytes:
    """A whole request frame: size, header v1/v2 (a null client id allowed), the encoded body."""
    flex = bool(spec.request.flexible_version_q(version))
    head = _HDR.pack(spec.key, version, cid)
    if cid_str is None:
        head += b"\xff\xff"
    else:
        raw = cid_str.encode()
        head += struct.pack(">h", len(raw)) + raw
    if flex:
        head += b"\x00"
    payload = head + body.encode(version=version)
    return _I32.pack(len(payload)) + payload


def well_formed(e: Entropy, builder: RequestBuilder, spec: ApiSpec, cid: int | None = None) -> tuple[bytes, int]:
    """(frame, version) of a request well formed by Kafka's schema, in a version `spec` serves."""
    version = e.integer(spec.min_version, spec.max_version)
    body = builder.build(e, spec, version)
    c = cid if cid is not None else e.choice((0, 1, -1, 7, (1 << 31) - 1, -(1 << 31), e.integer(2, 1 << 20)))
    return frame(spec, version, c, body, client_id(e)), version


LENGTHS = (
    b"\xff\xff",
    b"\x7f\xff",
    b"\x80\x00",
    b"\x00\x00",
    b"\xff\xff\xff\xff",
    b"\x7f\xff\xff\xff",
    b"\x80\x00\x00\x00",
    b"\x00\x00\x00\x00",
    b"\xff\xff\xff\xfe",
    b"\x00\x00\x10\x00",
)


def mutate(e: Entropy, whole: bytes, apis: Mapping[int, ApiSpec]) -> bytes:
    """1-3 mutations of a request frame, the size prefix kept true to the result (framing itself is what
    `garbage` tests). Bit flips, truncations, length fields set to -1/huge, insertions, deletions,
    duplicated runs, varint runs, another API's key or an out-of-range version in the header."""
    body = bytearray(whole[4:])
    for _ in range(e.integer(1, 3)):
        kind = e.integer(0, 10)
        n = len(body)
        pos = e.integer(0, max(n - 1, 0))
        if kind <= 1 and n:  # bit flip
            body[pos] ^= 1 << e.integer(0, 7)
        elif kind == 2:  # truncation
            del body[pos:]
        elif kind in (3, 4) and n:  # a length/count field set to an extreme
            v = e.choice(LENGTHS)
            body[pos : pos + len(v)] = v
        elif kind == 5:  # inserted bytes
            body[pos:pos] = e.blob(1, 8)
        elif kind == 6 and n:  # deleted bytes
            del body[pos : pos + e.integer(1, 8)]
        elif kind == 7 and n:  # a run repeated
            run = body[pos : pos + e.integer(1, 16)]
            body[pos:pos] = run * e.integer(1, 4)
        elif kind == 8:  # a long run of continuation bytes: varints must stay bounded
            body[pos:pos] = b"\xff" * e.choice((5, 6, 64, 4096))
        elif kind == 9 and n >= 4:  # the same body under another served API's key
            body[0:2] = struct.pack(">h", e.choice(sorted(apis)))
        elif kind == 10 and n >= 4:  # an out-of-range version
            body[2:4] = struct.pack(">h", e.choice((-1, 0, 1, 13, 99, 0x7FFF)))
    return _I32.pack(len(body)) + bytes(body)


def garbage(e: Entropy, apis: Mapping[int, ApiSpec]) -> bytes:
    """Bytes that are no request of anybody's: a served key and version with a random body, random headers,
    a huge or negative size, an empty frame."""
    r = e.integer(0, 5)
    if r <= 2:
        spec = apis[e.choice(sorted(apis))]
        v = e.integer(spec.min_version, spec.max_version)
        flex = spec.request.flexible_version_q(v)
        head = (
            _HDR.pack(spec.key, v, e.integer(-(1 << 31), (1 << 31) - 1)) + b"\x00\x04fuzz" + (b"\x00" if flex else b"")
        )
        payload = head + e.blob(0, 200)
    elif r == 3:
        payload = e.blob(0, 200)
    elif r == 4:
        return e.choice((_I32.pack(-1), _I32.pack(-(1 << 31)), _I32.pack((1 << 31) - 1), _I32.pack(0)))
    else:
        payload = e.choice((b"", b"\x00", b"\x00\x12\x00\x00", b"\x00\x12\x00\x00\x00\x00\x00\x01"))
    return _I32.pack(len(payload)) + payload


# ---------------------------------------------------------------------------------------------------------------
# Talking to a broker


@dataclass
class Outcome:
    """What one frame got: its answer (if any), whether the connection was closed, whether it hung."""

    answer: bytes | None = None  # the response frame without its size prefix
    extra: list[bytes] = field(default_factory=list)  # any further frame before the sentinel's answer
    sentinel: bool = False  # the follow-up ApiVersions was answered: the connection still serves
    closed: bool = False
    hung: bool = False
    late_close: bool = False  # unanswered, then the sentinel answered, then closed: out of order
    seconds: float = 0.0

    @property
    def kind(self) -> str:
        if self.hung:
            return "hang"
        if self.late_close:
            return "close after a later answer"
        if self.closed:
            return "answer+close" if self.answer is not None else "close"
        return "answer" if self.answer is not None else "silent"


SENTINEL_CID = 0x5E47_1A11


def sentinel_frame(cid: int) -> bytes:
    payload = _HDR.pack(API_VERSIONS_KEY, 0, cid) + b"\x00\x08sentinel"
    return _I32.pack(len(payload)) + payload


def header_of(whole: bytes) -> tuple[int, int, int] | None:
    """(api key, version, correlation id) of a frame, or None when it is too short to carry them."""
    if len(whole) < 12:
        return None
    return _HDR.unpack_from(whole, 4)


class Prober:
    """One connection to the broker under test, reopened after each close. `send` writes a frame and an
    ApiVersions v0 right behind it, then reads until that sentinel is answered, the connection closes, or
    `deadline` seconds pass (a hang). The sentinel separates "answered nothing and closed" from "answered
    nothing and kept going" (a silent drop), and proves the connection still serves."""

    def __init__(self, host: str, port: int, deadline: float = 5.0) -> None:
        self.host, self.port, self.deadline = host, port, deadline
        self.sock: socket.socket | None = None
        self.local_port = 0
        self.sent = 0  # frames sent (by whoever counts them)

    def connect(self) -> socket.socket:
        if self.sock is None:
            s = socket.create_connection((self.host, self.port), timeout=self.deadline)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.sock = s
            self.local_port = s.getsockname()[1]
        return self.sock

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def _watch_close(self, out: Outcome, linger: float = 0.2) -> None:
        """The frame went unanswered and the sentinel was answered: a close that follows now means the
        broker decided to close for the frame but answered a request sent after it first."""
        s = self.sock
        if s is None:
            return
        s.settimeout(linger)
        try:
            chunk = s.recv(1 << 16)
        except TimeoutError:
            return
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            out.late_close = out.closed = True
            self.close()
        else:
            raise AssertionError(f"the broker sent {len(chunk)} bytes nobody asked for")

    def send(self, whole: bytes) -> Outcome:
        hdr = header_of(whole)
        sentinel = SENTINEL_CID if hdr is None or hdr[2] != SENTINEL_CID else SENTINEL_CID + 1
        s = self.connect()
        out = Outcome()
        start = time.monotonic()
        end = start + self.deadline
        buf = bytearray()
        try:
            s.sendall(whole + sentinel_frame(sentinel))
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed while we wrote: read what came before the close
        try:
            while True:
                while len(buf) >= 4:
                    size = _I32.unpack_from(buf, 0)[0]
                    if size < 4:
                        raise AssertionError(f"the broker sent a frame of {size} bytes")
                    if len(buf) < 4 + size:
                        break
                    resp = bytes(buf[4 : 4 + size])
                    del buf[: 4 + size]
                    if _I32.unpack_from(resp, 0)[0] == sentinel:
                        out.sentinel = True
                        out.seconds = time.monotonic() - start
                        if out.answer is None:
                            self._watch_close(out)
                        return out
                    if out.answer is None:
                        out.answer = resp
                    else:
                        out.extra.append(resp)
                left = end - time.monotonic()
                if left <= 0:
                    out.hung = True
                    self.close()
                    break
                s.settimeout(left)
                try:
                    chunk = s.recv(1 << 20)
                except TimeoutError:
                    continue
                if not chunk:
                    out.closed = True
                    self.close()
                    break
                buf += chunk
        except ConnectionResetError:
            out.closed = True
            self.close()
        if buf and not out.hung:
            raise AssertionError(f"the broker closed mid-frame ({len(buf)} bytes of a response)")
        out.seconds = time.monotonic() - start
        return out


def produce_acks(whole: bytes) -> int | None:
    """The acks of a Produce frame, or None when it is no Produce or cannot be read that far: acks=0 is
    the one request Kafka does not answer."""
    try:
        key, version, _ = _HDR.unpack_from(whole, 4)
        if key != PRODUCE_KEY:
            return None
        pos = 14 + max(struct.unpack_from(">h", whole, 12)[0], 0)  # past the client id
        if version >= 9:
            if whole[pos] != 0:
                return None  # header tagged fields: not worth reading here
            tid, pos = _uvarint(whole, pos + 1)
            pos += max(tid - 1, 0)
        elif version >= 3:
            pos += 2 + max(struct.unpack_from(">h", whole, pos)[0], 0)
        return int(struct.unpack_from(">h", whole, pos)[0])
    except (struct.error, IndexError):
        return None


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80 or shift >= 28:
            return value, pos
        shift += 7


def served_versions(apis: Mapping[int, ApiSpec]) -> dict[int, tuple[int, int]]:
    return {k: (s.min_version, s.max_version) for k, s in apis.items()}


def check_answer(served: Mapping[int, tuple[int, int]], whole: bytes, resp: bytes) -> str | None:
    """None if `resp` is a well-formed answer to the request frame `whole` from a broker serving the
    `served` versions (API key -> lowest, highest); else what is wrong with it."""
    hdr = header_of(whole)
    if hdr is None:
        return "an answer to a frame too short to be a request"
    key, version, cid = hdr
    got = _I32.unpack_from(resp, 0)[0]
    if got != cid:
        return f"answer carries correlation id {got}, the request {cid}"
    if key not in served:
        return f"answered a request of API key {key}, which is not served"
    lo, hi = served[key]
    if not lo <= version <= hi:
        if key != API_VERSIONS_KEY:
            return f"answered API key {key} v{version}, outside the served {lo}-{hi}"
        version = 0  # KIP-511: a too-new ApiVersions is answered in v0
    try:
        found = api(key)
    except UnknownApi:
        return None  # served, but no schema here to read the answer with
    if version > found.codec_max_version:
        return None
    return decode_problem(ApiSpec(found, 0, found.codec_max_version), version, resp)


def decode_problem(spec: ApiSpec, version: int, resp: bytes) -> str | None:
    """None if the response body decodes in `version` to exactly its length."""
    flex = bool(spec.response.flexible_version_q(version))
    pos = 4
    mv = memoryview(resp)
    try:
        if flex and spec.key != API_VERSIONS_KEY:
            if mv[pos] != 0:
                return "response header carries tagged fields"
            pos += 1
        if spec.key == API_VERSIONS_KEY and struct.unpack_from(">h", mv, pos)[0] == 35:
            version, flex = 0, False  # UNSUPPORTED_VERSION: always v0
        cls = spec.response[None]
        fn = cls._struct.compiled_decode_from(version, compact=flex, tagged=flex, data_class=cls)
        _, end = fn(mv, pos)
    except Exception as exc:  # the decoder's own errors on a malformed answer
        return f"{spec.name} v{version} response does not decode: {type(exc).__name__}: {exc}"
    if end != len(resp):
        return f"{spec.name} v{version} response decodes to {end} of its {len(resp)} bytes"
    return None


# ---------------------------------------------------------------------------------------------------------------
# State for the requests to find


def prepare(bootstrap: str, names: Names | None = None) -> Names:
    """Give the broker what the generated requests name: a topic with records in every partition and a
    group with committed offsets (so fetches, offset lookups and group reads reach their deeper paths)."""
    names = names or Names()
    names.topic = f"fuzz-known-{names.tag}"
    names.group = f"fuzz-group-{names.tag}"
    restore(bootstrap, names, records=True)
    return names


def restore(bootstrap: str, names: Names, records: bool = False, timeout: float = 60.0) -> None:
    """Make sure the known topic and group exist (fuzzed DeleteTopics and DeleteGroups remove them)."""
    from logbroker_devtools.client.connection import BrokerError, KafkaClient

    deadline = time.monotonic() + timeout
    with KafkaClient(bootstrap, client_id="fuzz-setup") as client:
        while True:  # Kafka deletes and creates asynchronously: wait until every partition has a leader
            try:
                t = client.describe_topic(names.topic)
                if t.partitions and all(p.leader_id >= 0 for p in t.partitions):
                    break
            except BrokerError:
                try:
                    client.create_topic(names.topic, partitions=names.partitions)
                except BrokerError:
                    pass  # exists already, or still being deleted: look again
            if time.monotonic() > deadline:
                raise RuntimeError(f"the known topic {names.topic} did not come back")
            time.sleep(0.1)
        names.topic_id = t.topic_id
        names.node_id = t.partitions[0].leader_id
        count = len(t.partitions)
        if records:
            for p in range(count):
                for _ in range(3):
                    client.leader(names.topic, p).do(_produce(names.topic, p))
        R = api(ApiKey.OffsetCommit).request
        req = R(
            group_id=names.group,
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            topics=[
                R.OffsetCommitRequestTopic(
                    name=names.topic,
                    partitions=[
                        R.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                            partition_index=p, committed_offset=1, committed_leader_epoch=-1, committed_metadata=""
                        )
                        for p in range(count)
                    ],
                )
            ],
        )
        while True:  # Kafka creates its offsets topic on first use: retry while the coordinator loads
            codes = {p.error_code for t in client.conn.do(req, 8).topics for p in t.partitions}
            if codes == {0} or codes == {25, 0} or codes == {25}:
                break  # 25 UNKNOWN_MEMBER_ID: the group has members now (a fuzzed join); its offsets stay
            if not codes <= {14, 15, 16} or time.monotonic() > deadline:
                raise RuntimeError(f"committing the known group's offsets failed: {codes}")
            client.conn.do(_find_coordinator(names.group), 1)
            time.sleep(0.2)


def _find_coordinator(group: str) -> Any:
    return api(ApiKey.FindCoordinator).request(key=group, key_type=0)


def _produce(topic: str, partition: int) -> Any:
    P = api(ApiKey.Produce).request
    T = P.TopicProduceData
    batch = build_batch([NewRecord(b"k", b"v" * 10), NewRecord(None, b"w")])
    return P(
        transactional_id=None,
        acks=-1,
        timeout_ms=10_000,
        topic_data=[T(name=topic, partition_data=[T.PartitionProduceData(index=partition, records=batch)])],
    )
