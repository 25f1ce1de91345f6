"""Wire primitives shared by the header parser and the hand-written decoders."""

from __future__ import annotations

from .errors import ProtocolError


class Truncated(ProtocolError):
    """A length or tagged-field section runs past the end of the frame."""


def read_uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    """(value, next position) of the unsigned varint at `pos`; IndexError past the end of `buf`."""
    b = buf[pos]
    if b < 0x80:  # the common case: lengths and counts under 128
        return b, pos + 1
    value, shift = b & 0x7F, 7
    while True:
        pos += 1
        b = buf[pos]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos + 1
        shift += 7
        if shift > 35:
            raise ProtocolError("unsigned varint too long")


def skip_tagged_fields(buf: memoryview, pos: int) -> int:
    """The position after a tagged-field section (whose fields are skipped: none is known to us)."""
    if buf[pos] == 0:
        return pos + 1
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
    if pos > len(buf):
        raise Truncated("tagged fields overrun the frame")
    return pos
