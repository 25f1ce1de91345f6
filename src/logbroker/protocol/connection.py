"""Sans-IO server side of one Kafka connection: bytes in, request events out, response bytes back.

Modeled on h11's split: `receive_data` buffers, `next_event` yields a `Request`, `NEED_DATA`, or raises
ProtocolError (the driver then closes the socket, as Kafka does for unparsable input).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Final

from .errors import ErrorCode, FrameTooLarge, ProtocolError
from .messages import (
    API_VERSIONS_KEY,
    APIS,
    ApiSpec,
    RequestHeader,
    decode_body,
    encode_body,
    frame_response,
    is_flexible,
    parse_request_header,
    skip_tagged_fields,
)

NEED_DATA: Final = None
_I32 = struct.Struct(">i")


@dataclass(slots=True)
class Request:
    header: RequestHeader
    spec: ApiSpec | None
    body: Any
    # Set when the request is well framed but cannot be served in its version: the handler answers with
    # this error (ApiVersions' KIP-511 fallback, Produce/Fetch versions advertised only for old probes).
    version_error: ErrorCode | None = None
    size: int = 0
    client_host: str = ""

    @property
    def api_key(self) -> int:
        return self.header.api_key

    @property
    def version(self) -> int:
        return self.header.api_version


class ServerConnection:
    """Frame decoder and codec for one client connection."""

    def __init__(self, max_request_bytes: int = 100 * 1024 * 1024) -> None:
        self.max_request_bytes = max_request_bytes
        self._buf = bytearray()
        self._pos = 0

    def receive_data(self, data: bytes) -> None:
        if self._pos and self._pos == len(self._buf):
            self._buf.clear()
            self._pos = 0
        self._buf += data

    @property
    def buffered(self) -> int:
        return len(self._buf) - self._pos

    def next_event(self) -> Request | None:
        avail = len(self._buf) - self._pos
        if avail < 4:
            return NEED_DATA
        size = _I32.unpack_from(self._buf, self._pos)[0]
        if size < 0 or size > self.max_request_bytes:
            raise FrameTooLarge(size, self.max_request_bytes)
        if avail < 4 + size:
            return NEED_DATA
        start = self._pos + 4
        frame = bytes(self._buf[start : start + size])
        self._pos = start + size
        if self._pos > 1 << 20 and self._pos * 2 > len(self._buf):
            del self._buf[: self._pos]
            self._pos = 0
        req = parse_request(memoryview(frame))
        req.size = size
        return req

    def encode_response(self, req: Request, response: Any, version: int | None = None) -> list[bytes]:
        assert req.spec is not None
        v = req.version if version is None else version
        body = encode_body(req.spec, v, response)
        return frame_response(req.spec, v, req.header.correlation_id, body)


def parse_request(frame: memoryview) -> Request:
    header, pos = parse_request_header(frame)
    spec = APIS.get(header.api_key)
    if spec is None:
        raise ProtocolError(f"unknown API key {header.api_key} (client {header.client_id!r})")
    v = header.api_version
    if v < spec.min_version or v > spec.max_version:
        if spec.key == API_VERSIONS_KEY:
            # KIP-511: answer a too-new ApiVersions in v0 so the client can retry with a version we know.
            return Request(header, spec, None, ErrorCode.UNSUPPORTED_VERSION)
        raise ProtocolError(f"{spec.name} v{v} is not supported (supported {spec.min_version}-{spec.max_version})")
    try:
        if is_flexible(spec, v):
            pos = skip_tagged_fields(frame, pos)
        body = decode_body(spec, v, frame, pos)
    except ProtocolError:
        raise
    except Exception as exc:  # the generated decoders raise struct/index/unicode errors on garbage
        raise ProtocolError(f"malformed {spec.name} v{v}: {type(exc).__name__}: {exc}") from exc
    if v < spec.rejected_below:
        return Request(header, spec, body, ErrorCode.UNSUPPORTED_VERSION)
    return Request(header, spec, body)
