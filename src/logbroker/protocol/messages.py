"""Per-API message codecs: request-header parsing, body decoding, response framing.

The codecs are kafka-python 3.x's schema-driven classes (generated once per version from Kafka's JSON
specs; see docs/design.md for the measurement behind that choice), reached through `apis`. Request bodies
are decoded by `readers` (generated from the same schemas, with Kafka's reader rules: the codec's own
decoders trust their input); responses are encoded by the codec. Which versions are served is not decided
here: the broker's handlers declare it (`ApiSpec`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from kafka.protocol.schemas.fields.codecs.encode_buffer import EncodeBuffer

from .apis import ApiSpec
from .buffers import POOLED_MIN, BufferPool
from .errors import ErrorCode, ProtocolError
from .primitives import MAX_STRING_BYTES, skip_tagged_fields
from .produce import decode_produce
from .readers import MalformedRequest, NullField, Overrun, compile_request_decoder

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
    """The request body at `pos`, decoded by Kafka's reader rules (`readers`); raises ProtocolError."""
    if spec.key == PRODUCE_KEY:
        return decode_produce(spec.request[None], version, frame, pos)  # records stay views into the frame
    key = (spec.key, version)
    fn = _decoders.get(key)
    if fn is None:
        fn = _decoders[key] = compile_request_decoder(spec.request[None], version, is_flexible(spec, version))
    try:
        obj, end = fn(frame, pos)
    except NullField as exc:  # Kafka's generated readers refuse a null where the schema allows none
        raise ProtocolError(f"{spec.name} v{version}: {exc}") from None
    except Overrun as exc:
        raise ProtocolError(f"{spec.name} v{version} overruns its frame ({len(frame)} bytes): {exc}") from None
    except MalformedRequest as exc:
        raise ProtocolError(f"{spec.name} v{version}: {exc}") from None
    if end > len(frame):  # every read is bounded; kept as a last line against a reader slip
        raise ProtocolError(f"{spec.name} v{version} overruns its frame ({end} > {len(frame)} bytes)")
    return obj


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


def clip_long_strings(message: Any) -> bool:
    """Cut every string field of `message` (recursively) to Kafka's 32767 UTF-8 bytes; True if any was.

    Only error messages can be that long (one quoting a huge name from the request): Kafka's serializer
    refuses them, a classic int16 length cannot carry them, and Kafka's clients refuse a longer compact
    string. A shortened message is better than no answer.
    """
    clipped = False
    for f in message._struct._fields:
        value = getattr(message, f.name, None)
        if isinstance(value, str):
            raw = value.encode("utf-8", "surrogatepass")
            if len(raw) > MAX_STRING_BYTES:
                setattr(message, f.name, raw[:MAX_STRING_BYTES].decode("utf-8", "ignore"))
                clipped = True
        elif isinstance(value, list):
            for item in value:
                if hasattr(item, "_struct"):
                    clipped |= clip_long_strings(item)
        elif hasattr(value, "_struct"):
            clipped |= clip_long_strings(value)
    return clipped


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
