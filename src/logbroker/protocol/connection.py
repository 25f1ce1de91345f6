"""Sans-IO server side of one Kafka connection: bytes in, request events out, response bytes back.

Modeled on h11's split: `receive_data` buffers, `next_event` yields a `Request`, `NEED_DATA`, or raises
ProtocolError (the driver then closes the socket, as Kafka does for unparsable input).
"""

from __future__ import annotations

import mmap
import struct
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from .apis import ApiSpec
from .buffers import BufferPool
from .buffers import anonymous as _anonymous
from .errors import ErrorCode, FrameTooLarge, ProtocolError
from .fetch_response import FETCH_KEY, SplicedFrame, encode_fetch_frame, materialize_externals
from .messages import (
    API_VERSIONS_KEY,
    MAX_STRING_BYTES,
    RequestHeader,
    clip_long_strings,
    decode_body,
    encode_response_frame,
    is_flexible,
    parse_request_header,
    release_frame,
    skip_tagged_fields,
)

NEED_DATA: Final = None
_I32 = struct.Struct(">i")
_STAGE_BYTES = 256 * 1024  # what one receive call can take in (asyncio reads up to 256 KiB at a time)
_BIG_FRAME_BYTES = 64 * 1024  # frames at least this large are received straight into their own buffer


@dataclass(slots=True)
class Request:
    header: RequestHeader
    spec: ApiSpec | None
    body: Any
    # Set when the request is well framed but cannot be served in its version: the handler answers with
    # this error (ApiVersions' KIP-511 fallback; other unserved versions close the connection).
    version_error: ErrorCode | None = None
    size: int = 0
    client_host: str = ""  # "/address", as Kafka names a client's host in group descriptions
    # Who sent it, as the connection established (Kafka's RequestContext): the principal ("User:name"; a
    # PLAINTEXT listener's is User:ANONYMOUS), the client's address as text and the listener's name.
    principal: str = "User:ANONYMOUS"
    client_address: str = ""
    listener: str = ""
    connection_id: int = 0  # the broker connection it came on (share sessions end with it)
    response_size_hint: int = 0  # bytes the handler expects its response to take (a fetch's records)
    # The handler's answer holds external record ranges (stored bytes sent from their file, see
    # `fetch_response`): it is encoded as a `SplicedFrame`.
    spliced: bool = False
    # The pooled buffer the request's frame was received into, given back (`ServerConnection.release`)
    # once its handler has finished with the views into it.
    pooled: Any = None
    # Buffers the response refers to (a fetch's records), given back to their pool once it is encoded.
    lent: list[tuple[BufferPool, bytearray]] = field(default_factory=list)

    @property
    def api_key(self) -> int:
        return self.header.api_key

    @property
    def version(self) -> int:
        return self.header.api_version


@dataclass(frozen=True, slots=True)
class RawFrame:
    """A frame that is not a request: a SASL token of the v0 exchange (after SaslHandshake v0)."""

    data: bytes


class ServerConnection:
    """Frame decoder and codec for one client connection, serving the APIs and versions in `apis`.

    Bytes arrive through `get_buffer`/`buffer_updated` (asyncio's BufferedProtocol contract), so the
    kernel writes them straight into memory this object owns: small requests into a staging buffer (then
    one copy each, into their own frame), large ones (Produce batches) straight into their own frame, with
    no user-space copy of the payload at all. Each frame is owned by its `Request`, and writable: handlers
    may patch stored fields (base offsets) in place.
    """

    def __init__(
        self,
        apis: Mapping[int, ApiSpec],
        max_request_bytes: int = 100 * 1024 * 1024,
        frames: BufferPool | None = None,
        requests: BufferPool | None = None,
    ) -> None:
        self.apis = apis
        self.frames = frames  # where large response frames come from and go back to (None: fresh each)
        # Where large request frames are received (None: fresh anonymous memory each). Reused memory is
        # warm: a fresh megabyte is page-faulted and zeroed by the kernel as it arrives, which measured a
        # sixth of the broker's produce CPU.
        self.requests = requests
        self.max_request_bytes = max_request_bytes
        self._stage = _anonymous(_STAGE_BYTES)
        self._start = 0  # first unparsed byte in the staging buffer
        self._end = 0  # end of received bytes in the staging buffer
        self._big: mmap.mmap | None = None  # a large frame being received in place
        self._big_size = 0  # its size (a pooled buffer may be larger)
        self._big_filled = 0
        self._done: deque[tuple[mmap.mmap, int]] = deque()  # large frames complete, ahead of the staging buffer
        self._owner: mmap.mmap | None = None  # the pooled buffer of the frame `_next_frame` returned last
        self.raw_frames = 0  # frames to hand over unparsed (SASL tokens after a v0 SaslHandshake)

    # ------------------------------------------------------------------ bytes in

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """Where the next received bytes go (never empty)."""
        if self._big is not None:
            return memoryview(self._big)[self._big_filled : self._big_size]
        if self._end == len(self._stage):
            self._compact()
            if self._end == len(self._stage):  # only when fed without parsing in between (receive_data)
                grown = _anonymous(len(self._stage) + _STAGE_BYTES)
                grown[: self._end] = self._stage[: self._end]
                self._stage = grown
        return memoryview(self._stage)[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        """`nbytes` were written into the buffer `get_buffer` returned last."""
        if self._big is not None:
            self._big_filled += nbytes
            if self._big_filled == self._big_size:
                self._done.append((self._big, self._big_size))
                self._big = None
        else:
            self._end += nbytes

    def receive_data(self, data: bytes) -> None:
        """Feed bytes received elsewhere (tests, tools): the same path as `get_buffer`."""
        mv = memoryview(data)
        while mv:
            with self.get_buffer(len(mv)) as buf:
                n = min(len(buf), len(mv))
                buf[:n] = mv[:n]
            self.buffer_updated(n)
            mv = mv[n:]

    def _compact(self) -> None:
        if self._start:
            n = self._end - self._start
            self._stage[:n] = self._stage[self._start : self._end]
            self._start, self._end = 0, n

    @property
    def buffered(self) -> int:
        """Bytes of requests received but not complete yet."""
        big = self._big_filled + 4 if self._big is not None else 0
        return self._end - self._start + big

    # ------------------------------------------------------------------ requests out

    def next_event(self) -> Request | RawFrame | None:
        """The next request; after `expect_raw()`, the next frame's bytes as they are (a SASL v0 token)."""
        frame = self._next_frame()
        if frame is None:
            return NEED_DATA
        owner, self._owner = self._owner, None
        if self.raw_frames:
            self.raw_frames -= 1
            raw = RawFrame(bytes(frame))
            if owner is not None and self.requests is not None:
                self.requests.give(owner)
            return raw
        try:
            req = parse_request(memoryview(frame), self.apis)
        except BaseException:
            if owner is not None and self.requests is not None:
                self.requests.give(owner)
            raise
        req.size = len(frame)
        req.pooled = owner
        return req

    def release(self, req: Request) -> None:
        """`req`'s handler is done with its frame: a pooled buffer goes back for the next large request."""
        buf, req.pooled = req.pooled, None
        if buf is not None and self.requests is not None:
            self.requests.give(buf)

    def expect_raw(self, frames: int = 1) -> None:
        """The next `frames` frames are not Kafka requests but raw tokens (KIP-43's v0 SASL exchange)."""
        self.raw_frames = frames

    @staticmethod
    def encode_raw(token: bytes) -> memoryview:
        """A raw SASL token answer: its length, then its bytes (no correlation id)."""
        return memoryview(_I32.pack(len(token)) + token)

    def _next_frame(self) -> bytearray | memoryview | None:
        if self._done:
            buf, size = self._done.popleft()
            if self.requests is not None:
                self._owner = buf
            return memoryview(buf)[:size]
        if self._big is not None:
            return None
        avail = self._end - self._start
        if avail < 4:
            if self._start == self._end:
                self._start = self._end = 0
            return None
        size = _I32.unpack_from(self._stage, self._start)[0]
        if size < 0 or size > self.max_request_bytes:
            raise FrameTooLarge(size, self.max_request_bytes)
        begin = self._start + 4
        if avail >= 4 + size:
            self._start = begin + size
            if self._start == self._end:
                self._start = self._end = 0
            return bytearray(memoryview(self._stage)[begin : begin + size])  # its own, writable
        if size >= _BIG_FRAME_BYTES:
            # Its own buffer, filled by the kernel from here on. Anonymous memory is committed only as
            # bytes arrive, so a declared size costs nothing until it is really sent (Kafka allocates
            # a declared request whole, too).
            self._big = self.requests.take(size) if self.requests is not None else _anonymous(size)
            self._big_size = size
            have = avail - 4
            self._big[:have] = self._stage[begin : self._end]
            self._big_filled = have
            self._start = self._end = 0
        elif begin + size > len(self._stage):
            self._compact()
        return None

    def encode_response(self, req: Request, response: Any, version: int | None = None) -> memoryview | SplicedFrame:
        assert req.spec is not None
        v = req.version if version is None else version
        if req.spliced:
            spliced = encode_fetch_frame(v, req.header.correlation_id, response) if req.spec.key == FETCH_KEY else None
            if spliced is not None:
                self._give_back(req)
                return spliced
            materialize_externals(response)  # a shape the spliced encoder does not cover: the codec's way
        if req.size > MAX_STRING_BYTES:
            # Only a request this large can carry a name that an error message quotes past Kafka's string
            # limit (and walking an answer costs microseconds next to receiving 32 KB).
            clip_long_strings(response)
        try:
            frame = encode_response_frame(
                req.spec, v, req.header.correlation_id, response, req.response_size_hint, self.frames
            )
        except struct.error:  # a string over its int16 length, from a smaller request: clip and answer
            if not clip_long_strings(response):
                raise
            frame = encode_response_frame(
                req.spec, v, req.header.correlation_id, response, req.response_size_hint, self.frames
            )
        self._give_back(req)
        return frame

    @staticmethod
    def _give_back(req: Request) -> None:
        for pool, buf in req.lent:
            pool.give(buf)
        req.lent.clear()

    def sent(self, frame: memoryview) -> None:
        """`frame` (from `encode_response`) has been handed to the transport: its buffer may be reused."""
        if self.frames is not None:
            release_frame(frame, self.frames)


def parse_request(frame: memoryview, apis: Mapping[int, ApiSpec]) -> Request:
    header, pos = parse_request_header(frame)
    spec = apis.get(header.api_key)
    if spec is None:
        raise ProtocolError(f"unknown API key {header.api_key} (client {header.client_id!r})")
    v = header.api_version
    if v < spec.min_version or v > spec.max_version:
        if spec.key == API_VERSIONS_KEY:
            # KIP-511: answer a too-new ApiVersions in v0 so the client can retry with a version we know.
            # Its body is not read, but its header is, as Kafka reads it: with tagged fields from v3 on.
            if v >= 3:
                try:
                    skip_tagged_fields(frame, pos)
                except (ProtocolError, IndexError) as exc:
                    raise ProtocolError(f"{spec.name} v{v}: request header cut short ({exc})") from None
            return Request(header, spec, None, ErrorCode.UNSUPPORTED_VERSION)
        raise ProtocolError(f"{spec.name} v{v} is not supported (supported {spec.min_version}-{spec.max_version})")
    if v < spec.rejected_below:
        # Advertised for old clients' feature probes only; Kafka 4 closes the connection on such a request.
        raise ProtocolError(f"{spec.name} v{v} is advertised but not served (Kafka 4 removed it)")
    try:
        if is_flexible(spec, v):
            pos = skip_tagged_fields(frame, pos)
        body = decode_body(spec, v, frame, pos)
    except ProtocolError:
        raise
    except Exception as exc:  # the generated decoders raise struct/index/unicode errors on garbage
        raise ProtocolError(f"malformed {spec.name} v{v}: {type(exc).__name__}: {exc}") from exc
    return Request(header, spec, body)
