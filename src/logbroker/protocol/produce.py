"""Produce requests decoded without copying their records.

The generic codec copies every `records` field out of the frame; for Produce that is the whole payload,
so this decoder (Kafka's ProduceRequest schema, every version: v13+ names topics by id) leaves each
partition's records as a view into the request frame. The frame belongs to its request and is writable,
so the broker validates, stamps offsets and writes the batches where they arrived. The result is the
codec's own ProduceRequest object; tests hold the two decoders equal on every version. Written flat, as
straight-line code: a one-record request must not cost more than the generated decoder does.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

from .errors import ProtocolError
from .primitives import MAX_STRING_BYTES, Truncated, read_uvarint, skip_tagged_fields

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")
_ACKS_TIMEOUT_TOPICS = struct.Struct(">hii")
_INDEX_LENGTH = struct.Struct(">ii")

FIRST_TOPIC_ID_VERSION = 13
FIRST_FLEXIBLE_VERSION = 9


class _Overrun(Exception):
    pass


def _new(cls: Any, version: int) -> Any:
    """An empty message object, made the way the codec's generated decoders make theirs."""
    obj = object.__new__(cls)
    obj._version = version
    obj.tags = None
    obj.unknown_tags = None
    return obj


def partition_response(
    cls: Any,
    index: int,
    error: int,
    base: int,
    start: int,
    message: str | None,
    append_time: int,
    record_errors: list[Any],
) -> Any:
    """A PartitionProduceResponse with every field the handler sets, the way `_new` makes objects: the
    codec's keyword constructor walks each schema field and costs ~5 µs, one Produce in ten on one-record
    requests. Fields left unset (current_leader, v10+) read as their schema defaults, as with it."""
    obj = _new(cls, None)
    obj.index = index
    obj.error_code = error
    obj.base_offset = base
    obj.log_append_time_ms = append_time
    obj.log_start_offset = start
    obj.record_errors = record_errors
    obj.error_message = message
    return obj


def _text(mv: memoryview, pos: int, n: int, name: str, what: str) -> str:
    """A string as Kafka's readers take it: at most 32767 bytes, malformed UTF-8 replaced, not refused."""
    if n > MAX_STRING_BYTES:
        raise ProtocolError(f"{name}: string field {what} had invalid length {n}")
    if pos + n > len(mv):
        raise _Overrun
    return str(mv[pos : pos + n], "utf-8", "replace")


def decode_produce(request_cls: Any, version: int, frame: memoryview, pos: int) -> Any:
    """The Produce request of `version` starting at `pos` of `frame`, records as views."""
    name = f"{request_cls.name} v{version}"
    decode = _decode_flexible if version >= FIRST_FLEXIBLE_VERSION else _decode_classic
    try:
        return decode(request_cls, version, frame, pos, name)
    except (_Overrun, Truncated, struct.error, IndexError):
        raise ProtocolError(f"{name} overruns its frame ({len(frame)} bytes)") from None


def _null(name: str, what: str) -> ProtocolError:
    return ProtocolError(f"{name}: non-nullable field {what} is null")


def _decode_classic(cls: Any, version: int, mv: memoryview, pos: int, name: str) -> Any:
    end = len(mv)
    body = _new(cls, version)
    tid = None
    if version >= 3:
        n = _I16.unpack_from(mv, pos)[0]
        pos += 2
        if n >= 0:
            tid = _text(mv, pos, n, name, "transactional_id")
            pos += n
    body.transactional_id = tid
    body.acks, body.timeout_ms, count = _ACKS_TIMEOUT_TOPICS.unpack_from(mv, pos)
    pos += 10
    if count < 0:
        raise _null(name, "topic_data")
    if count > end - pos:
        raise _Overrun
    topic_cls = cls.TopicProduceData
    part_cls = topic_cls.PartitionProduceData
    topics = []
    for i in range(count):
        topic = _new(topic_cls, version)
        n = _I16.unpack_from(mv, pos)[0]
        pos += 2
        if n < 0:
            raise _null(name, f"topic_data[{i}].name")
        topic.name = _text(mv, pos, n, name, f"topic_data[{i}].name")
        topic.topic_id = None
        pos += n
        nparts = _I32.unpack_from(mv, pos)[0]
        pos += 4
        if nparts < 0:
            raise _null(name, f"topic_data[{i}].partition_data")
        if nparts > end - pos:
            raise _Overrun
        parts = []
        for _ in range(nparts):
            part = _new(part_cls, version)
            part.index, n = _INDEX_LENGTH.unpack_from(mv, pos)
            pos += 8
            if n < 0:
                part.records = None
            else:
                if pos + n > end:
                    raise _Overrun
                part.records = mv[pos : pos + n]
                pos += n
            parts.append(part)
        topic.partition_data = parts
        topics.append(topic)
    body.topic_data = topics
    return body


def _decode_flexible(cls: Any, version: int, mv: memoryview, pos: int, name: str) -> Any:
    end = len(mv)
    body = _new(cls, version)
    n, pos = read_uvarint(mv, pos)
    if n:
        body.transactional_id = _text(mv, pos, n - 1, name, "transactional_id")
        pos += n - 1
    else:
        body.transactional_id = None
    body.acks, body.timeout_ms = _ACKS_TIMEOUT.unpack_from(mv, pos)
    count, pos = read_uvarint(mv, pos + 6)
    if not count:
        raise _null(name, "topic_data")
    count -= 1
    if count > end - pos:
        raise _Overrun
    topic_cls = cls.TopicProduceData
    part_cls = topic_cls.PartitionProduceData
    by_id = version >= FIRST_TOPIC_ID_VERSION
    topics = []
    for i in range(count):
        topic = _new(topic_cls, version)
        if by_id:  # v13+: a topic id and no name (the codec's objects read "" for it)
            if pos + 16 > end:
                raise _Overrun
            topic.topic_id = uuid.UUID(bytes=bytes(mv[pos : pos + 16]))
            topic.name = ""
            pos += 16
        else:
            n, pos = read_uvarint(mv, pos)
            if not n:
                raise _null(name, f"topic_data[{i}].name")
            topic.name = _text(mv, pos, n - 1, name, f"topic_data[{i}].name")
            topic.topic_id = None
            pos += n - 1
        nparts, pos = read_uvarint(mv, pos)
        if not nparts:
            raise _null(name, f"topic_data[{i}].partition_data")
        nparts -= 1
        if nparts > end - pos:
            raise _Overrun
        parts = []
        for _ in range(nparts):
            part = _new(part_cls, version)
            part.index = _I32.unpack_from(mv, pos)[0]
            n, pos = read_uvarint(mv, pos + 4)
            if n:
                n -= 1
                if pos + n > end:
                    raise _Overrun
                part.records = mv[pos : pos + n]
                pos += n
            else:
                part.records = None
            pos = skip_tagged_fields(mv, pos)
            parts.append(part)
        topic.partition_data = parts
        pos = skip_tagged_fields(mv, pos)
        topics.append(topic)
    body.topic_data = topics
    skip_tagged_fields(mv, pos)
    return body
