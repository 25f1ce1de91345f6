"""Fetch responses whose records stay where they are stored.

A fetch answer is mostly record bytes the broker already has on disk. Instead of reading them into a
buffer and copying them into the frame, the handler may give a partition's `records` as an *external*
range (any object with a length that is not a buffer, e.g. the storage layer's `FileRange`); this
encoder then returns the frame as parts in send order: frame bytes (size, header, partition fields)
as views of one small buffer, and the external ranges between them, which the connection sends with
`sendfile` (the kernel copies page cache to socket; no user-space copy at all).

Straight-line code for Fetch v4-18, the versions served (v13+ name topics by id); property tests hold
its output byte-equal to the generated codec's. A response the fast path does not cover (a tagged field
set on a partition) gets `None`, and the caller falls back to the codec with the ranges read into memory.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

FETCH_KEY = 1
MIN_VERSION = 4
MAX_VERSION = 18
FLEXIBLE_FROM = 12
TOPIC_IDS_FROM = 13

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PART_V4 = struct.Struct(">ihqq")  # partition, error, high watermark, last stable offset
_PART_V5 = struct.Struct(">ihqqq")  # ... log start offset
_ABORTED = struct.Struct(">qq")
_HEAD = struct.Struct(">ii")  # frame size, correlation id (response header v0)
_TOP_V1 = struct.Struct(">i")  # throttle
_TOP_V7 = struct.Struct(">ihi")  # throttle, error, session id


class External(Protocol):
    """Record bytes held elsewhere (a stored file range); the connection sends them, then closes them."""

    def __len__(self) -> int: ...

    def read_into(self, view: memoryview) -> None: ...

    def close(self) -> None: ...


def is_external(records: Any) -> bool:
    return records is not None and not isinstance(records, bytes | bytearray | memoryview)


@dataclass(slots=True)
class SplicedFrame:
    """A response frame in parts: `memoryview`s of `buffer` and external ranges, `size` bytes in all."""

    parts: list[Any]
    size: int
    buffer: bytearray
    externals: list[Any] = field(default_factory=list)

    def views(self) -> Iterator[memoryview]:
        return (p for p in self.parts if isinstance(p, memoryview))

    def materialize(self) -> bytearray:
        """The whole frame in memory (for a transport that cannot send from a file, e.g. TLS)."""
        out = bytearray(self.size)
        view = memoryview(out)
        pos = 0
        for p in self.parts:
            n = len(p)
            if isinstance(p, memoryview):
                view[pos : pos + n] = p
            else:
                p.read_into(view[pos : pos + n])
            pos += n
        view.release()
        return out

    def close(self) -> None:
        """Release the external ranges (idempotent): after sending, or when the answer is dropped."""
        for e in self.externals:
            e.close()
        self.externals.clear()


def materialize_externals(response: Any) -> None:
    """Read every external range of a Fetch response into memory (and release it), in place."""
    for t in response.responses:
        for p in t.partitions:
            if is_external(p.records):
                ext = p.records
                buf = bytearray(len(ext))
                try:
                    ext.read_into(memoryview(buf))
                finally:
                    ext.close()
                p.records = buf


def _uvarint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _length(out: bytearray, n: int | None, flex: bool) -> None:
    """An array's count or a bytes field's length (None: null): int32, or compact (uvarint n + 1, 0 for
    null) in flexible versions."""
    if flex:
        _uvarint(out, 0 if n is None else n + 1)
    else:
        out += _I32.pack(-1 if n is None else n)


def _has_tags(p: Any) -> bool:
    return bool(
        p.diverging_epoch is not None
        or p.current_leader is not None
        or p.snapshot_id is not None
        or getattr(p, "unknown_tags", None)
    )


def encode_fetch_frame(version: int, correlation_id: int, response: Any) -> SplicedFrame | None:
    """The frame of a Fetch response with external records as parts, or None when this encoder does not
    cover it (the version, or a tagged field on a partition or the response)."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        return None
    flex = version >= FLEXIBLE_FROM
    if flex and (response.node_endpoints or getattr(response, "unknown_tags", None)):
        return None
    out = bytearray(_HEAD.size + (1 if flex else 0))  # size and correlation id packed at the end
    parts: list[Any] = []
    externals: list[Any] = []
    cuts: list[tuple[int, Any]] = []  # (position in `out`, external range sent there)
    if version >= 7:
        out += _TOP_V7.pack(response.throttle_time_ms, response.error_code, response.session_id)
    else:
        out += _TOP_V1.pack(response.throttle_time_ms)
    topics = response.responses
    _length(out, len(topics), flex)
    part = _PART_V5 if version >= 5 else _PART_V4
    by_id = version >= TOPIC_IDS_FROM
    for t in topics:
        if by_id:
            out += t.topic_id.bytes
        else:
            name = t.topic.encode()
            if flex:
                _uvarint(out, len(name) + 1)
            else:
                out += _I16.pack(len(name))
            out += name
        ps = t.partitions
        _length(out, len(ps), flex)
        for p in ps:
            if flex and _has_tags(p):
                return None
            if version >= 5:
                out += part.pack(
                    p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset
                )
            else:
                out += part.pack(p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset)
            aborted = p.aborted_transactions
            _length(out, None if aborted is None else len(aborted), flex)
            if aborted is not None:
                for a in aborted:
                    out += _ABORTED.pack(a.producer_id, a.first_offset)
                    if flex:
                        out.append(0)
            if version >= 11:
                out += _I32.pack(p.preferred_read_replica)
            records = p.records
            _length(out, None if records is None else len(records), flex)
            if records is not None:
                n = len(records)
                if is_external(records):
                    externals.append(records)
                    if n:
                        cuts.append((len(out), records))
                else:
                    out += records
            if flex:
                out.append(0)  # the partition's tagged fields
        if flex:
            out.append(0)  # the topic's
    if flex:
        out.append(0)  # the response's
    size = len(out) + sum(len(e) for e in externals)
    _HEAD.pack_into(out, 0, size - 4, correlation_id)
    if flex:
        out[_HEAD.size] = 0  # response header v1: no tagged fields
    view = memoryview(out)
    start = 0
    for cut, ext in cuts:
        if cut > start:
            parts.append(view[start:cut])
        parts.append(ext)
        start = cut
    if start < len(out):
        parts.append(view[start:])
    return SplicedFrame(parts, size, out, externals)
