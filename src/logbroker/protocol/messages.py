"""Per-API message codecs: request-header parsing, body decoding, response framing.

The codecs are kafka-python 3.x's schema-driven classes (generated once per version from Kafka's JSON
specs; see docs/design.md for the measurement behind that choice), reached through `apis`. Which versions
are served is not decided here: the broker's handlers declare it (`ApiSpec`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from kafka.protocol.schemas.fields.codecs.encode_buffer import EncodeBuffer

from .apis import ApiSpec
from .buffers import POOLED_MIN, BufferPool
from .errors import ErrorCode, ProtocolError
from .primitives import skip_tagged_fields
from .produce import FIRST_TOPIC_ID_VERSION, decode_produce

PRODUCE_KEY = 0
API_VERSIONS_KEY = 18
_HDR = struct.Struct(">hhi")
_I32 = struct.Struct(">i")


def is_flexible(spec: ApiSpec, version: int) -> bool:
    return bool(spec.request.flexible_version_q(version))


@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def parse_request_header(frame: memoryview) -> tuple[RequestHeader, int]:
    """Parse header v1/v2 (client id is a classic nullable string in both); returns the body position.

    The client id field is mandatory in both (-1 for null): a frame that ends before it is truncated.
    """
    if len(frame) < 10:
        raise ProtocolError(f"request of {len(frame)} bytes is shorter than its header")
    api_key, api_version, correlation_id = _HDR.unpack_from(frame, 0)
    pos = 10
    client_id = None
    n = struct.unpack_from(">h", frame, 8)[0]
    if n >= 0:
        if pos + n > len(frame):
            raise ProtocolError("client id overruns the request")
        client_id = bytes(frame[pos : pos + n]).decode("utf-8", "replace")
        pos += n
    return RequestHeader(api_key, api_version, correlation_id, client_id), pos


_decoders: dict[tuple[int, int], Any] = {}


def decode_body(spec: ApiSpec, version: int, frame: memoryview, pos: int) -> Any:
    if spec.key == PRODUCE_KEY and version < FIRST_TOPIC_ID_VERSION:
        return decode_produce(spec.request[None], version, frame, pos)  # records stay views into the frame
    key = (spec.key, version)
    fn = _decoders.get(key)
    if fn is None:
        flex = is_flexible(spec, version)
        cls = spec.request[None]
        fn = cls._struct.compiled_decode_from(version, compact=flex, tagged=flex, data_class=cls)
        _decoders[key] = fn
    obj, end = fn(frame, pos)
    if end > len(frame):
        # The generated decoders slice strings/bytes without bounds checks: a length that overruns the
        # frame yields a silently shortened value instead of an error. Kafka refuses such a request.
        raise ProtocolError(f"{spec.name} v{version} overruns its frame ({end} > {len(frame)} bytes)")
    plan = _null_plans.get(key)
    if plan is None:
        plan = _null_plans[key] = _null_plan(spec.request[None]._struct, version)
    bad = _null_field(obj, plan)
    if bad is not None:
        # Kafka's generated readers refuse a null (negative length) where the schema does not allow one.
        raise ProtocolError(f"{spec.name} v{version}: non-nullable field {bad} is null")
    obj._version = version
    return obj


# Per field that needs looking at: (name, nullable, plan for its struct or array elements, is an array).
_NullPlan = tuple[tuple[str, bool, Any, bool], ...]
_null_plans: dict[tuple[int, int], _NullPlan] = {}


def _null_plan(struct_field: Any, version: int) -> _NullPlan:
    """What to check for nulls in `version`: non-nullable strings/bytes/arrays, and the structs around them."""
    plan = []
    for f in struct_field._fields:
        if not f.for_version_q(version) or f.tagged_field_q(version):
            continue
        nullable = bool(f.nullable_for_version_q(version))
        if f.is_struct_array():
            sub = _null_plan(f.array_of, version)
            if sub or not nullable:
                plan.append((f.name, nullable, sub, True))
        elif f.is_struct():
            sub = _null_plan(f, version)
            if sub:
                plan.append((f.name, True, sub, False))
        elif (f.is_array() or f.type_str in ("string", "bytes", "records")) and not nullable:
            plan.append((f.name, False, (), False))
    return tuple(plan)


def _null_field(obj: Any, plan: _NullPlan) -> str | None:
    """The path of the first null in a non-nullable field, or None."""
    for name, nullable, sub, is_array in plan:
        value = getattr(obj, name)
        if value is None:
            if not nullable:
                return name
        elif sub:
            if is_array:
                for i, item in enumerate(value):
                    bad = _null_field(item, sub)
                    if bad is not None:
                        return f"{name}[{i}].{bad}"
            else:
                bad = _null_field(value, sub)
                if bad is not None:
                    return f"{name}.{bad}"
    return None


def encode_body(spec: ApiSpec, version: int, response: Any) -> bytes:
    # The compiled per-version encoder: ~25x faster than the generic walk for large record sets.
    return response.encode(version=version)


_FRAME_HEAD = struct.Struct(">ii")  # size, correlation id (response header v0)
_FRAME_HEAD_FLEX = struct.Struct(">iib")  # ... and an empty tagged-field section (header v1)
_encoders: dict[tuple[int, int], Any] = {}  # compiled response encoders by (API key, version)


def encode_response_frame(
    spec: ApiSpec,
    version: int,
    correlation_id: int,
    response: Any,
    size_hint: int = 0,
    pool: BufferPool | None = None,
) -> memoryview:
    """The whole response frame (size, header, body) in one buffer, written once.

    Encoding in place behind a reserved header saves joining a header to a body; a size hint (a fetch
    response's record bytes) saves regrowing the buffer, which copies everything encoded so far, and
    takes a warm buffer from `pool` (give it back with `release_frame` once it is sent).
    """
    head = _FRAME_HEAD_FLEX if spec.key != API_VERSIONS_KEY and is_flexible(spec, version) else _FRAME_HEAD
    key = (spec.key, version)
    enc = _encoders.get(key)
    if enc is None:
        flex = is_flexible(spec, version)
        struct_ = spec.response[None]._struct
        enc = _encoders[key] = struct_.compiled_encode_into(version, compact=flex, tagged=flex)
    out = EncodeBuffer.__new__(EncodeBuffer)
    want = size_hint + 4096
    out.buf = pool.take(want) if pool is not None and want >= POOLED_MIN else bytearray(want)
    out.pos = head.size
    enc(response, out)
    buf, end = out.buf, out.pos
    if head is _FRAME_HEAD_FLEX:
        head.pack_into(buf, 0, end - 4, correlation_id, 0)
    else:
        head.pack_into(buf, 0, end - 4, correlation_id)
    return memoryview(buf)[:end]


def release_frame(frame: memoryview, pool: BufferPool) -> None:
    """Hand a sent frame's buffer back for reuse (the caller keeps no other view of it)."""
    buf = frame.obj
    frame.release()
    if isinstance(buf, bytearray):
        pool.give(buf)


def encode_request(spec: ApiSpec, version: int, correlation_id: int, client_id: str, request: Any) -> bytes:
    """Client side: a framed request (header v1, or v2 for flexible versions)."""
    flex = is_flexible(spec, version)
    cid = client_id.encode()
    header = _HDR.pack(spec.key, version, correlation_id) + struct.pack(">h", len(cid)) + cid
    if flex:
        header += b"\x00"
    body = request.encode(version=version)
    return _I32.pack(len(header) + len(body)) + header + body


def decode_response(spec: ApiSpec, version: int, frame: bytes | memoryview) -> tuple[int, Any]:
    """Client side: (correlation id, response object) from one frame without its size prefix."""
    mv = memoryview(frame)
    correlation_id = _I32.unpack_from(mv, 0)[0]
    pos = 4
    flex = is_flexible(spec, version)
    if flex and spec.key != API_VERSIONS_KEY:
        pos = skip_tagged_fields(mv, pos)
    cls = spec.response[None]
    if spec.key == API_VERSIONS_KEY and struct.unpack_from(">h", mv, pos)[0] == ErrorCode.UNSUPPORTED_VERSION:
        version, flex = 0, False  # KIP-511: an UNSUPPORTED_VERSION reply is always v0; other errors are not
    fn = cls._struct.compiled_decode_from(version, compact=flex, tagged=flex, data_class=cls)
    obj, _ = fn(mv, pos)
    obj._version = version
    return correlation_id, obj
