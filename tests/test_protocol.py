"""Property tests for every codec in logbroker.protocol, with no sockets involved.

Message strategies are built from kafka-python's schema objects (`cls._struct` and its field tree), so every
API in `protocol.messages.APIS` is covered in every advertised version, requests and responses alike,
without writing a strategy per API by hand.
"""

from __future__ import annotations

import functools
import struct
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.producer import ProduceRequest
from kafka.protocol.schemas.fields.array import ArrayField
from kafka.protocol.schemas.fields.codecs.types import (
    UUID,
    BitField,
    Boolean,
    Bytes,
    Float64,
    Int8,
    Int16,
    Int32,
    Int64,
    String,
    UnsignedInt16,
)
from kafka.protocol.schemas.fields.simple import SimpleField
from kafka.protocol.schemas.fields.struct import StructField
from kafka.protocol.schemas.fields.struct_array import StructArrayField

from logbroker.broker.features import Features
from logbroker.broker.handlers import api_versions, served_apis
from logbroker.config import BrokerSettings
from logbroker.protocol import ApiSpec
from logbroker.protocol.connection import NEED_DATA, Request, ServerConnection, parse_request
from logbroker.protocol.errors import ErrorCode, FrameTooLarge, ProtocolError
from logbroker.protocol.messages import (
    API_VERSIONS_KEY,
    RequestHeader,
    decode_response,
    encode_body,
    encode_request,
    encode_response_frame,
    is_flexible,
    parse_request_header,
)
from logbroker.protocol.primitives import read_uvarint
from logbroker.protocol.produce import partition_response
from logbroker.protocol.records import (
    BASE_OFFSET,
    CRC,
    LEADER_EPOCH,
    Compression,
    InvalidBatch,
    NewRecord,
    assign_offsets,
    build_batch,
    decode_batch,
    decode_records,
    iter_headers,
    parse_header,
    read_varint,
    validate_produce,
    write_varint,
)

# Codegen compiles a decoder/encoder per (API, version) on first use: no deadline, modest example counts.
FAST = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SOME = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MANY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_I32 = struct.Struct(">i")
_HDR = struct.Struct(">hhi")
APIS = served_apis()  # what the broker serves, from its handlers' declarations
# What ApiVersions' handler reads of its context: the served APIs, and (features' epoch, v3+) the topic changes.
SERVED = SimpleNamespace(
    apis=APIS,
    topics=SimpleNamespace(changes=0),
    settings=BrokerSettings(),
    features=Features(BrokerSettings(), Path("/nonexistent"), 1),
)
ZERO_UUID = uuid.UUID(int=0)
MAX_UNSIGNED_VARINT = (1 << 32) - 1

TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
INT32 = st.integers(-(1 << 31), (1 << 31) - 1)
INT64 = st.integers(-(1 << 63), (1 << 63) - 1)


# ---------------------------------------------------------------------------------------------------------------
# Strategies generated from the kafka-python schema


def _int_range(bits: int) -> st.SearchStrategy[int]:
    return st.integers(-(1 << (bits - 1)), (1 << (bits - 1)) - 1)


_FIXED: dict[Any, st.SearchStrategy[Any]] = {
    Int8: _int_range(8),
    Int16: _int_range(16),
    Int32: _int_range(32),
    Int64: _int_range(64),
    UnsignedInt16: st.integers(0, 0xFFFF),
    Boolean: st.booleans(),
    Float64: st.floats(allow_nan=False),
    # The zero UUID is how the wire spells "no id"; the decoder maps it to None.
    UUID: st.none() | st.uuids(),
    # A 32-bit set of operation bits; {31} alone is INT32_MIN, "not requested", decoded as None.
    BitField: st.none() | st.sets(st.integers(0, 31), max_size=6),
}


def _simple_strategy(field: SimpleField, version: int, nullable: bool) -> st.SearchStrategy[Any]:
    t = field._type
    if t in _FIXED:
        return _FIXED[t]
    if isinstance(t, String):
        s: st.SearchStrategy[Any] = TEXT
    elif t is Bytes:  # bytes and records
        s = st.binary(max_size=40)
    else:  # pragma: no cover - a field type this test does not know yet must fail loudly
        raise AssertionError(f"no strategy for field {field.name} of type {field.type_str}")
    return (st.none() | s) if nullable else s


def _field_strategy(field: Any, version: int) -> st.SearchStrategy[Any]:
    nullable = field.nullable_for_version_q(version)
    if isinstance(field, StructArrayField):
        s: st.SearchStrategy[Any] = st.lists(_struct_strategy(field.array_of, version, field.data_class), max_size=3)
    elif isinstance(field, ArrayField):
        # The element field inherits the array's nullableVersions; elements themselves are never null.
        s = st.lists(_simple_strategy(field.array_of, version, nullable=False), max_size=4)
    elif isinstance(field, StructField):
        s = _struct_strategy(field, version, field.data_class)
        # A tagged struct is simply omitted when None (its default).
        nullable = nullable or field.tagged_field_q(version)
    else:
        return _simple_strategy(field, version, nullable)
    return (st.none() | s) if nullable else s


def _struct_strategy(struct_field: Any, version: int, data_class: Any) -> st.SearchStrategy[Any]:
    fields = {f.name: _field_strategy(f, version) for f in struct_field._fields if f.for_version_q(version)}
    return st.fixed_dictionaries(fields).map(lambda kw: data_class(**kw))


@functools.cache
def message_strategy(message_cls: Any, version: int) -> st.SearchStrategy[Any]:
    cls = message_cls[None]
    return _struct_strategy(cls._struct, version, cls)


def _norm(field: SimpleField, value: Any) -> Any:
    t = field._type
    if t is UUID and value == ZERO_UUID:
        return None
    if t is BitField and value == {31}:
        return None
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    return value


def assert_same(struct_field: Any, version: int, want: Any, got: Any, path: str) -> None:
    """Field-by-field equality over the fields valid in `version`, naming the first differing path."""
    for f in struct_field._fields:
        if not f.for_version_q(version):
            continue
        a, b = getattr(want, f.name), getattr(got, f.name)
        p = f"{path}.{f.name}"
        if isinstance(f, StructArrayField):
            assert (a is None) == (b is None), f"{p}: {a!r} != {b!r}"
            if a is not None:
                assert len(a) == len(b), f"{p}: {len(a)} items != {len(b)}"
                for i, (x, y) in enumerate(zip(a, b, strict=True)):
                    assert_same(f.array_of, version, x, y, f"{p}[{i}]")
        elif isinstance(f, StructField):
            assert (a is None) == (b is None), f"{p}: {a!r} != {b!r}"
            if a is not None:
                assert_same(f, version, a, b, p)
        elif isinstance(f, ArrayField):
            na = None if a is None else [_norm(f.array_of, x) for x in a]
            nb = None if b is None else [_norm(f.array_of, x) for x in b]
            assert na == nb, f"{p}: {na!r} != {nb!r}"
        else:
            assert _norm(f, a) == _norm(f, b), f"{p}: {a!r} != {b!r}"


# Every version the broker serves (by default the whole protocol history).
CASES = [(spec.key, v) for spec in sorted(APIS.values(), key=lambda s: s.key)
         for v in range(spec.min_version, spec.max_version + 1)]  # fmt: skip
CASE_IDS = [f"{APIS[k].name.removesuffix('Request')}-v{v}" for k, v in CASES]
KAFKA4 = served_apis("kafka4")  # protocol_versions=kafka4
PROBE_ONLY = [(spec.key, v) for spec in KAFKA4.values() for v in range(spec.min_version, spec.rejected_below)]


def test_kafka4_mode_serves_what_kafka_4_serves() -> None:
    """protocol_versions=kafka4 keeps KIP-896's removals: the pre-0.11 versions of Produce, Fetch, OffsetCommit
    and OffsetFetch only for old clients' feature probes, and the others not advertised at all."""
    assert {k for k, s in APIS.items() if s.rejected_below} == set()
    probes = sorted((k, s.rejected_below) for k, s in KAFKA4.items() if s.rejected_below)
    assert probes == [(0, 3), (1, 4), (8, 2), (9, 1)]
    assert all(KAFKA4[k].max_version == s.max_version and KAFKA4[k].min_version >= s.min_version
               for k, s in APIS.items())  # fmt: skip


@pytest.mark.parametrize(("key", "version"), PROBE_ONLY)
def test_versions_advertised_for_probes_only_close_the_connection(key: int, version: int) -> None:
    """With protocol_versions=kafka4: Kafka 4 advertises Produce v0-2 (and we Fetch v0-3, OffsetCommit v0-1,
    OffsetFetch v0) for old clients' feature probes, but a request in one closes the connection, unread."""
    frame = _HDR.pack(key, version, 7) + struct.pack(">h", 1) + b"c" + bytes(64)
    with pytest.raises(ProtocolError, match="advertised but not served"):
        parse_request(memoryview(frame), KAFKA4)


def _frame_body(wire: bytes) -> memoryview:
    (size,) = _I32.unpack_from(wire, 0)
    assert size == len(wire) - 4, "size prefix does not match the frame"
    return memoryview(wire)[4:]


@st.composite
def any_request(draw: st.DrawFn) -> tuple[ApiSpec, int, Any, int, str, bytes]:
    key, v = draw(st.sampled_from(CASES))
    spec = APIS[key]
    body = draw(message_strategy(spec.request, v))
    cid = draw(INT32)
    client_id = draw(TEXT)
    return spec, v, body, cid, client_id, encode_request(spec, v, cid, client_id, body)


# ---------------------------------------------------------------------------------------------------------------
# Every API, every advertised version, both directions


@pytest.mark.parametrize(("key", "version"), CASES, ids=CASE_IDS)
@FAST
@given(data=st.data())
def test_request_round_trip(key: int, version: int, data: st.DataObject) -> None:
    spec = APIS[key]
    body = data.draw(message_strategy(spec.request, version), label="request")
    cid = data.draw(INT32, label="correlation id")
    client_id = data.draw(TEXT, label="client id")
    wire = encode_request(spec, version, cid, client_id, body)

    conn = ServerConnection(APIS)
    conn.receive_data(wire)
    req = conn.next_event()
    assert req is not None
    assert conn.next_event() is NEED_DATA and conn.buffered == 0
    assert req.header == RequestHeader(key, version, cid, client_id)
    assert req.spec is spec and req.size == len(wire) - 4
    assert req.body.version == version
    assert_same(spec.request[None]._struct, version, body, req.body, spec.name)
    want_error = ErrorCode.UNSUPPORTED_VERSION if version < spec.rejected_below else None
    assert req.version_error == want_error


PRODUCE_VERSIONS = range(APIS[0].min_version, APIS[0].max_version + 1)


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
@SOME
@given(data=st.data())
def test_produce_records_stay_views_into_the_frame(version: int, data: st.DataObject) -> None:
    """Produce's own decoder: equal to the codec's, records are writable views into the request frame
    (nothing copied), and every truncated frame is refused."""
    spec = APIS[0]
    body = data.draw(message_strategy(spec.request, version), label="request")
    wire = bytearray(encode_request(spec, version, 7, "c", body))
    frame = memoryview(wire)[4:]
    req = parse_request(frame, APIS)
    assert_same(spec.request[None]._struct, version, body, req.body, spec.name)
    for t in req.body.topic_data:
        for p in t.partition_data:
            if p.records is not None:
                assert isinstance(p.records, memoryview) and p.records.obj is wire and not p.records.readonly
    _, body_start = parse_request_header(frame)
    cut = data.draw(st.integers(body_start, len(frame) - 1), label="cut")
    with pytest.raises(ProtocolError, match=f"ProduceRequest v{version}"):
        parse_request(frame[:cut], APIS)


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
@SOME
@given(data=st.data())
def test_produce_partition_answers_encode_as_the_codecs(version: int, data: st.DataObject) -> None:
    """The handler's quick PartitionProduceResponse encodes to the same bytes as the codec's own object."""
    spec = APIS[0]
    PR = spec.response.TopicProduceResponse.PartitionProduceResponse
    RE = PR.BatchIndexAndErrorMessage
    index, error, base, start, append = (data.draw(INT32), data.draw(st.integers(-1, 120)), data.draw(INT64),
                                         data.draw(INT64), data.draw(INT64))  # fmt: skip
    message = data.draw(st.none() | st.text(max_size=40))
    errors = [RE(batch_index=i, batch_index_error_message=m)
              for i, m in enumerate(data.draw(st.lists(st.none() | st.text(max_size=10), max_size=3)))]  # fmt: skip
    codec = PR(index=index, error_code=error, base_offset=base, log_append_time_ms=append, log_start_offset=start,
               record_errors=errors, error_message=message)  # fmt: skip
    quick = partition_response(PR, index, error, base, start, message, append, errors)
    frames = [
        bytes(encode_response_frame(spec, version, 7, spec.response(
            throttle_time_ms=0, responses=[spec.response.TopicProduceResponse(name="t", partition_responses=[p])])))
        for p in (codec, quick)
    ]  # fmt: skip
    assert frames[0] == frames[1]


@pytest.mark.parametrize(("key", "version"), CASES, ids=CASE_IDS)
@FAST
@given(data=st.data())
def test_response_round_trip(key: int, version: int, data: st.DataObject) -> None:
    spec = APIS[key]
    body = data.draw(message_strategy(spec.response, version), label="response")
    if key == API_VERSIONS_KEY and version > 0:
        # KIP-511: UNSUPPORTED_VERSION is the one ApiVersions error always answered (and so parsed) as v0.
        assume(body.error_code != ErrorCode.UNSUPPORTED_VERSION)
    cid = data.draw(INT32, label="correlation id")
    req = Request(RequestHeader(key, version, cid, "c"), spec, None)
    wire = bytes(ServerConnection(APIS).encode_response(req, body))
    frame = _frame_body(wire)

    assert _I32.unpack_from(frame, 0)[0] == cid
    if is_flexible(spec, version) and key != API_VERSIONS_KEY:
        assert frame[4] == 0, "response header v1 must carry an (empty) tagged-field section"
    got_cid, got = decode_response(spec, version, frame)
    assert got_cid == cid
    assert got.version == version
    assert_same(spec.response[None]._struct, version, body, got, spec.name)


# ---------------------------------------------------------------------------------------------------------------
# Request header v1/v2, response header v0/v1


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


TAGS = st.dictionaries(st.integers(0, 1 << 20), st.binary(max_size=20), max_size=3)


def _tagged_section(tags: dict[int, bytes]) -> bytes:
    return _uvarint(len(tags)) + b"".join(_uvarint(t) + _uvarint(len(v)) + v for t, v in sorted(tags.items()))


@SOME
@given(data=st.data(), case=st.sampled_from(CASES), cid=INT32, client_id=st.none() | TEXT, tags=TAGS)
def test_request_header_v1_v2(
    data: st.DataObject, case: tuple[int, int], cid: int, client_id: str | None, tags: dict[int, bytes]
) -> None:
    """Null client ids and header tagged fields (which clients may send and the broker must skip)."""
    key, v = case
    spec = APIS[key]
    flex = is_flexible(spec, v)
    if client_id is None:
        header = _HDR.pack(key, v, cid) + struct.pack(">h", -1)
    else:
        raw = client_id.encode()
        header = _HDR.pack(key, v, cid) + struct.pack(">h", len(raw)) + raw
    if flex:  # header v2
        header += _tagged_section(tags)
    body = data.draw(message_strategy(spec.request, v))
    frame = header + body.encode(version=v)

    h, pos = parse_request_header(memoryview(frame))
    assert h == RequestHeader(key, v, cid, client_id)
    req = parse_request(memoryview(frame), APIS)
    assert req.header == h
    assert_same(spec.request[None]._struct, v, body, req.body, spec.name)
    if not flex:
        assert pos == len(header)


@SOME
@given(data=st.data(), case=st.sampled_from(CASES), cid=INT32, tags=TAGS)
def test_response_header_v1_tagged_fields_are_skipped(
    data: st.DataObject, case: tuple[int, int], cid: int, tags: dict[int, bytes]
) -> None:
    key, v = case
    spec = APIS[key]
    assume(is_flexible(spec, v) and key != API_VERSIONS_KEY)
    body = data.draw(message_strategy(spec.response, v))
    frame = _I32.pack(cid) + _tagged_section(tags) + encode_body(spec, v, body)
    got_cid, got = decode_response(spec, v, frame)
    assert got_cid == cid
    assert_same(spec.response[None]._struct, v, body, got, spec.name)


@pytest.mark.parametrize("version", range(APIS[API_VERSIONS_KEY].min_version, APIS[API_VERSIONS_KEY].max_version + 1))
def test_api_versions_response_always_uses_header_v0(version: int) -> None:
    spec = APIS[API_VERSIONS_KEY]
    req = Request(RequestHeader(API_VERSIONS_KEY, version, 77, "c"), spec, None)
    resp = api_versions.handle(SERVED, req)  # type: ignore[arg-type]
    frame = _frame_body(bytes(ServerConnection(APIS).encode_response(req, resp)))
    # Header v0: correlation id, then the body at once (error_code 0), even for the flexible v3+ bodies.
    assert struct.unpack_from(">ih", frame, 0) == (77, 0)
    cid, got = decode_response(spec, version, frame)
    assert cid == 77 and got.error_code == 0
    assert {(k.api_key, k.min_version, k.max_version) for k in got.api_keys} == {
        (s.key, s.min_version, s.max_version) for s in APIS.values()
    }


@SOME
@given(
    version=st.integers(APIS[API_VERSIONS_KEY].max_version + 1, 0x7FFF) | st.integers(-0x8000, -1),
    cid=INT32,
    junk=st.binary(max_size=30),
    flexible_header=st.booleans(),
)
def test_api_versions_too_new_gets_kip511_v0_error(version: int, cid: int, junk: bytes, flexible_header: bool) -> None:
    """An ApiVersions in a version we do not know is not parsed; the answer is v0 UNSUPPORTED_VERSION
    with our key list, in header v0, so the client can pick a version it shares with us. Its header is
    read as Kafka reads it (with tagged fields from v3 on): one cut short closes the connection."""
    header = _HDR.pack(API_VERSIONS_KEY, version, cid) + struct.pack(">h", 3) + b"cli"
    if flexible_header:
        header += b"\x00"
    conn = ServerConnection(APIS)
    conn.receive_data(_I32.pack(len(header) + len(junk)) + header + junk)
    if version >= 3 and not flexible_header and not junk:
        with pytest.raises(ProtocolError, match="header cut short"):
            conn.next_event()
        return
    assume(flexible_header or version < 3)  # otherwise the junk is read as the header's tagged fields
    req = conn.next_event()
    assert req is not None
    assert req.version_error == ErrorCode.UNSUPPORTED_VERSION and req.body is None

    resp = api_versions.handle(SERVED, req)  # type: ignore[arg-type]
    frame = _frame_body(bytes(conn.encode_response(req, resp)))
    keys = sorted(APIS.values(), key=lambda s: s.key)
    want = struct.pack(">ihi", cid, ErrorCode.UNSUPPORTED_VERSION, len(keys)) + b"".join(
        struct.pack(">hhh", s.key, s.min_version, s.max_version) for s in keys
    )
    assert bytes(frame) == want
    got_cid, got = decode_response(APIS[API_VERSIONS_KEY], version, frame)
    assert got_cid == cid and got.error_code == ErrorCode.UNSUPPORTED_VERSION and got.version == 0
    assert [(k.api_key, k.min_version, k.max_version) for k in got.api_keys] == [
        (s.key, s.min_version, s.max_version) for s in keys
    ]


def test_api_versions_other_errors_are_parsed_in_the_request_version() -> None:
    """Only UNSUPPORTED_VERSION forces v0; e.g. Kafka answers INVALID_REQUEST in the request's own version."""
    spec = APIS[API_VERSIONS_KEY]
    resp = spec.response[None](error_code=int(ErrorCode.INVALID_REQUEST), api_keys=[], throttle_time_ms=9)
    frame = _frame_body(bytes(encode_response_frame(spec, 3, 5, resp)))
    cid, got = decode_response(spec, 3, frame)
    assert (cid, got.version, got.error_code, got.throttle_time_ms) == (5, 3, ErrorCode.INVALID_REQUEST, 9)


# ---------------------------------------------------------------------------------------------------------------
# Frame decoder


@SOME
@given(requests=st.lists(any_request(), min_size=1, max_size=6), data=st.data())
def test_frame_decoder_any_chunking(requests: list[Any], data: st.DataObject) -> None:
    stream = b"".join(r[-1] for r in requests)
    cuts = sorted(data.draw(st.sets(st.integers(1, max(len(stream) - 1, 1)), max_size=12), label="cuts"))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    conn = ServerConnection(APIS)
    got: list[Request] = []
    for chunk in chunks:
        conn.receive_data(chunk)
        while (req := conn.next_event()) is not NEED_DATA:
            got.append(req)
    assert conn.buffered == 0
    assert len(got) == len(requests)
    for (spec, v, body, cid, client_id, wire), req in zip(requests, got, strict=True):
        assert req.header == RequestHeader(spec.key, v, cid, client_id)
        assert req.size == len(wire) - 4
        assert_same(spec.request[None]._struct, v, body, req.body, spec.name)


@settings(max_examples=10, deadline=None)
@given(chunk=st.integers(4096, 300_000), n=st.integers(2, 4))
def test_frame_decoder_large_frames_and_buffer_compaction(chunk: int, n: int) -> None:
    """Frames around 700 KB make the decoder compact its buffer; nothing may be lost or reordered."""
    P = ProduceRequest.TopicProduceData
    frames = []
    for i in range(n):
        payload = bytes([i]) * (700_000 + i)
        body = ProduceRequest(
            transactional_id=None,
            acks=-1,
            timeout_ms=i,
            topic_data=[P(name=f"t{i}", partition_data=[P.PartitionProduceData(index=i, records=payload)])],
        )
        frames.append(encode_request(APIS[0], 9, i, "big", body))
    stream = b"".join(frames)
    conn = ServerConnection(APIS)
    got = []
    for pos in range(0, len(stream), chunk):
        conn.receive_data(stream[pos : pos + chunk])
        while (req := conn.next_event()) is not NEED_DATA:
            got.append(req)
    assert [r.header.correlation_id for r in got] == list(range(n))
    for i, r in enumerate(got):
        assert r.body.timeout_ms == i
        assert bytes(r.body.topic_data[0].partition_data[0].records) == bytes([i]) * (700_000 + i)


@MANY
@given(limit=st.integers(1024, 1 << 30), data=st.data())
def test_frame_over_the_limit_raises_frame_too_large(limit: int, data: st.DataObject) -> None:
    size = data.draw(st.integers(limit + 1, (1 << 31) - 1), label="size")
    conn = ServerConnection(APIS, max_request_bytes=limit)
    conn.receive_data(_I32.pack(size)[:3])
    assert conn.next_event() is NEED_DATA  # not even the size is complete yet
    conn.receive_data(_I32.pack(size)[3:])
    with pytest.raises(FrameTooLarge) as info:
        conn.next_event()  # refused from the 4 size bytes alone: nothing is read or allocated
    assert info.value.size == size and info.value.limit == limit
    assert isinstance(info.value, ProtocolError)


@SOME
@given(limit=st.integers(1024, 1 << 20))
def test_frame_exactly_at_the_limit_is_awaited(limit: int) -> None:
    conn = ServerConnection(APIS, max_request_bytes=limit)
    conn.receive_data(_I32.pack(limit))
    assert conn.next_event() is NEED_DATA


def test_frames_before_an_oversized_one_are_still_delivered() -> None:
    ok = encode_request(APIS[18], 0, 1, "c", ApiVersionsRequest())
    conn = ServerConnection(APIS, max_request_bytes=4096)
    conn.receive_data(ok + ok + _I32.pack(4097))
    assert conn.next_event() is not None
    assert conn.next_event() is not None
    with pytest.raises(FrameTooLarge):
        conn.next_event()


@SOME
@given(size=st.integers(-(1 << 31), -1))
def test_negative_frame_size_is_a_protocol_error(size: int) -> None:
    conn = ServerConnection(APIS)
    conn.receive_data(_I32.pack(size))
    with pytest.raises(ProtocolError):
        conn.next_event()


def _parse_or_protocol_error(frame: bytes) -> Request | None:
    try:
        return parse_request(memoryview(frame), APIS)
    except ProtocolError:
        return None


@MANY
@given(st.binary(max_size=200))
def test_garbage_frame_raises_only_protocol_error(frame: bytes) -> None:
    _parse_or_protocol_error(frame)


@MANY
@given(st.binary(max_size=300))
def test_garbage_stream_raises_only_protocol_error(stream: bytes) -> None:
    conn = ServerConnection(APIS, max_request_bytes=1 << 16)
    conn.receive_data(stream)
    try:
        while conn.next_event() is not NEED_DATA:
            pass
    except ProtocolError:
        pass


@MANY
@given(case=st.sampled_from(CASES), cid=INT32, junk=st.binary(max_size=120))
def test_known_header_with_garbage_body_raises_only_protocol_error(
    case: tuple[int, int], cid: int, junk: bytes
) -> None:
    key, v = case
    header = _HDR.pack(key, v, cid) + struct.pack(">h", 1) + b"x"
    if is_flexible(APIS[key], v):
        header += b"\x00"
    _parse_or_protocol_error(header + junk)


@MANY
@given(req=any_request(), data=st.data())
def test_mutated_request_raises_only_protocol_error(req: Any, data: st.DataObject) -> None:
    frame = bytearray(req[-1][4:])
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        op = data.draw(st.sampled_from(["flip", "insert", "delete"]), label="op")
        pos = data.draw(st.integers(0, len(frame) - 1), label="pos")
        if op == "flip":
            frame[pos] ^= data.draw(st.integers(1, 255), label="xor")
        elif op == "insert":
            frame[pos:pos] = data.draw(st.binary(min_size=1, max_size=8), label="insert")
        elif len(frame) > 1:
            del frame[pos]
    _parse_or_protocol_error(bytes(frame))


@SOME
@given(req=any_request())
def test_truncated_request_is_refused(req: Any) -> None:
    """Every strict prefix of a request frame is refused: a decoder that consumes a whole valid frame cannot
    be satisfied by less (strings and bytes overrunning the frame used to be silently shortened)."""
    frame = req[-1][4:]
    for cut in range(len(frame)):
        with pytest.raises(ProtocolError):
            parse_request(memoryview(frame[:cut]), APIS)


def _non_nullable_paths(struct_field: Any, version: int, obj: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Where in `obj` a null would break the schema: strings, bytes and arrays not nullable in `version`."""
    out: list[tuple[Any, ...]] = []
    for f in struct_field._fields:
        if not f.for_version_q(version) or f.tagged_field_q(version):
            continue
        value = getattr(obj, f.name)
        nullable = f.nullable_for_version_q(version)
        if isinstance(f, StructArrayField):
            if not nullable:
                out.append((*path, f.name))
            for i, item in enumerate(value or []):
                out += _non_nullable_paths(f.array_of, version, item, (*path, f.name, i))
        elif isinstance(f, StructField):
            if value is not None:
                out += _non_nullable_paths(f, version, value, (*path, f.name))
        elif (isinstance(f, ArrayField) or isinstance(f._type, String) or f._type is Bytes) and not nullable:
            out.append((*path, f.name))
    return out


@SOME
@given(req=any_request(), data=st.data())
def test_null_in_a_non_nullable_field_is_refused(req: Any, data: st.DataObject) -> None:
    """Kafka's readers refuse a null (negative length) where the schema allows none; so must we, instead of
    handing None to a handler that iterates or stores it."""
    spec, v, body, cid, client_id, _wire = req
    paths = _non_nullable_paths(spec.request[None]._struct, v, body)
    assume(paths)
    path = data.draw(st.sampled_from(paths), label="null at")
    target = body
    for step in path[:-1]:
        target = target[step] if isinstance(step, int) else getattr(target, step)
    setattr(target, path[-1], None)
    wire = encode_request(spec, v, cid, client_id, body)
    # Some encoders write a None as its empty form (Metadata v0's topics): then no null reaches the wire.
    flex = is_flexible(spec, v)
    lenient = spec.request[None]._struct.compiled_decode_from(
        v, compact=flex, tagged=flex, data_class=spec.request[None]
    )
    _h, pos = parse_request_header(memoryview(wire)[4:])
    raw_obj, _ = lenient(memoryview(wire)[4:], pos + (1 if flex else 0))
    target = raw_obj
    for step in path[:-1]:
        target = target[step] if isinstance(step, int) else getattr(target, step)
    assume(getattr(target, path[-1]) is None)
    with pytest.raises(ProtocolError, match="non-nullable field"):
        parse_request(memoryview(wire)[4:], APIS)


def test_truncated_topic_name_is_not_shortened() -> None:
    """The concrete case behind the property above: a Metadata v1 for 'hello-topic' cut after 'hel'
    must not become a request for (and, with auto-create, the creation of) a topic named 'hel'."""
    req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="hello-topic")])
    frame = encode_request(APIS[3], 1, 7, "cli", req)[4:]
    with pytest.raises(ProtocolError, match="overruns"):
        parse_request(memoryview(frame[: len(frame) - 8]), APIS)


@pytest.mark.parametrize(
    "frame", [b"", b"\x00\x03", b"\x00\x03\x00\x01\x00\x00\x00\x07", b"\x00\x12\x00\x00\x00\x00\x00\x01\xff"]
)
def test_frame_shorter_than_request_header_is_refused(frame: bytes) -> None:
    with pytest.raises(ProtocolError, match="shorter than its header"):
        parse_request(memoryview(frame), APIS)


def test_unknown_api_key_and_unsupported_version_are_protocol_errors() -> None:
    with pytest.raises(ProtocolError, match="unknown API key 999"):
        parse_request(memoryview(_HDR.pack(999, 0, 1) + b"\xff\xff"), APIS)
    with pytest.raises(ProtocolError, match="MetadataRequest v99 is not supported"):
        parse_request(memoryview(_HDR.pack(3, 99, 1) + b"\xff\xff"), APIS)


@MANY
@given(n=st.integers(0, MAX_UNSIGNED_VARINT))
def test_unsigned_varint_round_trip(n: int) -> None:
    raw = _uvarint(n)
    assert read_uvarint(memoryview(raw + b"\x01"), 0) == (n, len(raw))


# ---------------------------------------------------------------------------------------------------------------
# Record batches

CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
NOW = 1_700_000_000_000

records_st = st.lists(
    st.builds(
        NewRecord,
        key=st.none() | st.binary(max_size=30),
        value=st.none() | st.binary(max_size=200),
        headers=st.lists(st.tuples(TEXT, st.none() | st.binary(max_size=20)), max_size=3),
        timestamp=st.none() | st.integers(0, 1 << 42),
    ),
    min_size=1,
    max_size=12,
)
batch_args = st.fixed_dictionaries(
    {
        "base_offset": st.integers(0, 1 << 40),
        "producer_id": st.integers(-1, 1 << 40),
        "producer_epoch": st.integers(-1, 0x7FFF),
        "base_sequence": st.integers(-1, 1 << 30),
    }
)


@pytest.mark.parametrize("codec", CODECS, ids=[n for n, _ in sorted(Compression.NAMES.items(), key=lambda x: x[1])])
@SOME
@given(records=records_st, args=batch_args)
def test_batch_round_trip(codec: int, records: list[NewRecord], args: dict[str, int]) -> None:
    batch = build_batch(records, compression=codec, now_ms=NOW, **args)
    h, got = decode_batch(batch)
    assert h.magic == 2 and h.compression == codec and h.size == len(batch)
    assert h.base_offset == args["base_offset"]
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (
        args["producer_id"],
        args["producer_epoch"],
        args["base_sequence"],
    )
    assert h.records_count == len(records) and h.last_offset_delta == len(records) - 1
    stamps = [NOW if r.timestamp is None else r.timestamp for r in records]
    assert (h.base_timestamp, h.max_timestamp) == (min(stamps), max(stamps))
    assert len(got) == len(records)
    for i, (r, g) in enumerate(zip(records, got, strict=True)):
        assert g.offset == args["base_offset"] + i
        assert g.timestamp == stamps[i]
        assert (g.key, g.value) == (r.key, r.value)
        assert g.headers == list(r.headers)

    headers = validate_produce(batch, max_batch_bytes=len(batch))
    assert len(headers) == 1 and headers[0].crc == h.crc
    with pytest.raises(InvalidBatch) as info:
        validate_produce(batch, max_batch_bytes=len(batch) - 1)
    assert info.value.error is ErrorCode.MESSAGE_TOO_LARGE


@pytest.mark.parametrize("codec", CODECS, ids=[n for n, _ in sorted(Compression.NAMES.items(), key=lambda x: x[1])])
@SOME
@given(records=records_st, data=st.data())
def test_any_flipped_byte_under_the_crc_is_corrupt_message(codec: int, records: list[NewRecord], data: Any) -> None:
    batch = bytearray(build_batch(records, compression=codec, now_ms=NOW))
    # The CRC field itself and everything it covers (attributes to the end of the batch).
    pos = data.draw(st.integers(CRC, len(batch) - 1), label="position")
    batch[pos] ^= data.draw(st.integers(1, 255), label="xor")
    with pytest.raises(InvalidBatch) as info:
        validate_produce(batch, max_batch_bytes=1 << 20)
    assert info.value.error is ErrorCode.CORRUPT_MESSAGE
    with pytest.raises(InvalidBatch):
        decode_batch(batch)


@SOME
@given(
    batches=st.lists(st.tuples(records_st, st.sampled_from(CODECS)), min_size=1, max_size=4),
    base=st.integers(0, 1 << 50),
    epoch=INT32,
)
def test_assign_offsets_patches_only_offset_and_epoch(batches: list[Any], base: int, epoch: int) -> None:
    parts = []
    for recs, codec in batches:
        b = bytearray(build_batch(recs, compression=codec, now_ms=NOW))
        struct.pack_into(">i", b, LEADER_EPOCH, epoch)  # a client's epoch, outside the CRC
        parts.append(bytes(b))
    original = b"".join(parts)
    buf = bytearray(original)
    headers = validate_produce(buf, max_batch_bytes=1 << 24)
    nxt = assign_offsets(buf, headers, base)
    assert nxt == base + sum(len(recs) for recs, _ in batches)

    expect_base = base
    for h, (recs, _) in zip(headers, batches, strict=True):
        start = h.position
        # Only base offset (0-8) and partition leader epoch (12-16) may change; the rest is byte-identical.
        assert buf[start + 8 : start + LEADER_EPOCH] == original[start + 8 : start + LEADER_EPOCH]
        assert buf[start + LEADER_EPOCH + 4 : start + h.size] == original[start + LEADER_EPOCH + 4 : start + h.size]
        patched = parse_header(buf, start)
        assert patched.base_offset == expect_base and h.base_offset == expect_base
        assert patched.leader_epoch == 0
        assert struct.unpack_from(">q", buf, start + BASE_OFFSET)[0] == expect_base
        expect_base += len(recs)
    assert validate_produce(buf, max_batch_bytes=1 << 24)  # the CRC still holds
    assert [h.base_offset for h in iter_headers(buf, verify_crc=True)] == [h.base_offset for h in headers]
    got = decode_records(buf)
    assert [r.offset for r in got] == list(range(base, nxt))
    assert [r.value for r in got] == [r.value for recs, _ in batches for r in recs]


@SOME
@given(records=records_st, data=st.data())
def test_bytes_the_broker_rewrites_are_outside_the_crc(records: list[NewRecord], data: st.DataObject) -> None:
    batch = bytearray(build_batch(records, now_ms=NOW))
    pos = data.draw(st.sampled_from([*range(BASE_OFFSET, 8), *range(LEADER_EPOCH, LEADER_EPOCH + 4)]))
    batch[pos] ^= data.draw(st.integers(1, 255))
    assert len(validate_produce(batch, max_batch_bytes=1 << 20)) == 1


@MANY
@given(n=st.integers(-(1 << 63), (1 << 63) - 1))
def test_varint_round_trip(n: int) -> None:
    out = bytearray(b"\x07")
    write_varint(out, n)
    value, end = read_varint(bytes(out) + b"\x99", 1)
    assert (value, end) == (n, len(out))
    assert len(out) - 1 <= 10


@pytest.mark.parametrize(
    ("n", "raw"),
    [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (63, b"\x7e"), (-64, b"\x7f"), (64, b"\x80\x01"), (-65, b"\x81\x01"),
     (300, b"\xd8\x04"), ((1 << 63) - 1, b"\xfe" + b"\xff" * 8 + b"\x01"), (-(1 << 63), b"\xff" * 9 + b"\x01")],
)  # fmt: skip
def test_varint_known_encodings(n: int, raw: bytes) -> None:
    """Zigzag varints as Kafka's ByteUtils.writeVarlong spells them."""
    out = bytearray()
    write_varint(out, n)
    assert bytes(out) == raw
    assert read_varint(raw, 0) == (n, len(raw))


@SOME
@given(n=st.integers(-(1 << 63), (1 << 63) - 1), data=st.data())
def test_truncated_varint_raises_invalid_batch(n: int, data: st.DataObject) -> None:
    out = bytearray()
    write_varint(out, n)
    cut = data.draw(st.integers(0, len(out) - 1))
    with pytest.raises(InvalidBatch):
        read_varint(bytes(out[:cut]), 0)


def test_overlong_varint_raises_invalid_batch() -> None:
    with pytest.raises(InvalidBatch):
        read_varint(b"\xff" * 11, 0)


def test_buffer_pool_reuses_warm_buffers_within_its_bounds() -> None:
    from logbroker.protocol.buffers import POOLED_MIN, BufferPool

    pool = BufferPool(max_bytes=8 * POOLED_MIN, max_buffers=3)
    a = pool.take(POOLED_MIN + 1)
    assert len(a) == 2 * POOLED_MIN  # powers of two, so slightly different sizes reuse one buffer
    pool.give(a)
    assert pool.take(POOLED_MIN + 100) is a and pool.pooled_bytes == 0
    small = bytearray(100)
    pool.give(small)  # too small to keep
    assert pool.pooled_bytes == 0
    bufs = [pool.take(POOLED_MIN) for _ in range(5)]
    for b in bufs:
        pool.give(b)
    assert pool.pooled_bytes == 3 * POOLED_MIN  # at most three kept, the newest
    got = pool.take(POOLED_MIN)
    assert any(got is b for b in bufs[2:])
    huge = bytearray(16 * POOLED_MIN)
    pool.give(huge)  # over the byte bound on its own: dropped
    assert all(pool.take(POOLED_MIN) is not huge for _ in range(3))


def test_buffer_pool_holds_a_burst_by_bytes_and_trims_what_stayed_idle() -> None:
    """Thousands of frames received at once reuse warm buffers (the request pool is bounded by bytes, not
    by count); buffers a burst left unused go back to the system at the next trims, the oldest first."""
    from logbroker.protocol.buffers import POOLED_MIN, BufferPool

    pool = BufferPool(max_bytes=1000 * POOLED_MIN, max_buffers=1000)
    burst = [pool.take(POOLED_MIN) for _ in range(200)]
    big = pool.take(3 * POOLED_MIN)
    assert len(big) == 4 * POOLED_MIN
    for b in burst:
        pool.give(b)
    pool.give(big)
    pool.give(bytearray(3 * POOLED_MIN))  # not a size class: never handed out, so not kept
    assert pool.pooled == 201 and pool.pooled_bytes == 204 * POOLED_MIN
    assert pool.take(2 * POOLED_MIN) is big  # the smallest class that fits
    pool.give(big)
    assert pool.trim() == 0  # a first trim only starts counting
    again = [pool.take(POOLED_MIN) for _ in range(50)]  # the warmest first: the last given
    assert all(a is b for a, b in zip(again, reversed(burst[150:]), strict=True))
    for b in again:
        pool.give(b)
    assert pool.trim() == 151  # 150 small ones and the big one were never needed in that interval
    assert pool.pooled == 50 and pool.pooled_bytes == 50 * POOLED_MIN
    assert {id(pool.take(POOLED_MIN)) for _ in range(50)} == {id(b) for b in again}
    for b in again:
        pool.give(b)
    assert pool.trim() == 0 and pool.trim() == 50 and pool.pooled == 0  # idle for a whole interval: all go
