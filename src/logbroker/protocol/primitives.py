"""Wire primitives shared by the header parser and the hand-written decoders."""

from __future__ import annotations

from .errors import ProtocolError

MAX_STRING_BYTES = 0x7FFF  # Kafka's limit for every string field, classic (int16 length) or compact


class Truncated(ProtocolError):
    """A length or tagged-field section runs past the end of the frame."""


def read_uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    """(value, next position) of the unsigned varint at `pos`; IndexError past the end of `buf`.

    At most 5 bytes, as Kafka's `readUnsignedVarint` (a longer one is refused: decoding an unbounded one
    costs quadratic time). The value is left unsigned: callers treat anything over the frame as an overrun.
    """
    b = buf[pos]
    if b < 0x80:  # the common case: lengths and counts under 128
        return b, pos + 1
    value = b & 0x7F
    for shift in (7, 14, 21, 28):
        pos += 1
        b = buf[pos]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos + 1
    raise ProtocolError("unsigned varint is longer than 5 bytes")


def skip_tagged_fields(buf: memoryview, pos: int) -> int:
    """The position after a tagged-field section (whose fields are skipped: none is known to us)."""
    if buf[pos] == 0:
        return pos + 1
    count, pos = read_uvarint(buf, pos)
    if count > len(buf) - pos:  # as Kafka: more fields than bytes left cannot be
        raise Truncated(f"{count} tagged fields, but only {len(buf) - pos} bytes remain")
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
    if pos > len(buf):
        raise Truncated("tagged fields overrun the frame")
    return pos
