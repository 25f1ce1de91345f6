"""Tokens, the stream-to-partition hash ring and serializers: the pure parts, shared by every process."""

from __future__ import annotations

import bisect
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Protocol

from logbroker.streams.errors import SerializationError


@dataclass(frozen=True, order=True, slots=True)
class SequenceToken:
    """Position of one event: (partition, offset, index in batch). Orders the events of one stream."""

    partition: int
    offset: int
    index: int = 0

    def __str__(self) -> str:
        return f"{self.partition}:{self.offset}:{self.index}"

    @classmethod
    def parse(cls, text: str) -> SequenceToken:
        p, o, i = (int(x) for x in text.split(":"))
        return cls(p, o, i)


class HashRing:
    """Consistent hash ring with virtual points: stable across processes and Python runs (no ``hash()``)."""

    POINTS = 64

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        ring = sorted((_h(f"queue-{p}-{v}"), p) for p in range(partitions) for v in range(self.POINTS))
        self._keys = [k for k, _ in ring]
        self._parts = [p for _, p in ring]

    def partition(self, namespace: str, key: str) -> int:
        i = bisect.bisect(self._keys, _h(f"{namespace}\x00{key}"))
        return self._parts[i % len(self._parts)]


def _h(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


class Serializer(Protocol):
    def dumps(self, events: list[Any]) -> bytes: ...
    def loads(self, data: bytes) -> list[Any]: ...


class JsonSerializer:
    """Default: readable on the wire by any tool; refuses what JSON cannot hold instead of stringifying it."""

    def dumps(self, events: list[Any]) -> bytes:
        try:
            return json.dumps(events, separators=(",", ":"), allow_nan=False).encode()
        except (TypeError, ValueError) as exc:
            raise SerializationError(f"event is not JSON-serialisable: {exc}") from exc

    def loads(self, data: bytes) -> list[Any]:
        return list(json.loads(data))


class MsgpackSerializer:
    """Compact binary events (``pip install logbroker[msgpack]``)."""

    def __init__(self) -> None:
        import msgpack

        self._m = msgpack

    def dumps(self, events: list[Any]) -> bytes:
        try:
            return bytes(self._m.packb(events, use_bin_type=True))
        except (TypeError, ValueError) as exc:
            raise SerializationError(f"event is not msgpack-serialisable: {exc}") from exc

    def loads(self, data: bytes) -> list[Any]:
        return list(self._m.unpackb(data, raw=False))


class PydanticSerializer:
    """Events are instances of one pydantic model; they come back as that model."""

    def __init__(self, model: type[Any]) -> None:
        from pydantic import TypeAdapter

        self._model = model
        self._adapter = TypeAdapter(list[model])  # type: ignore[valid-type]

    def dumps(self, events: list[Any]) -> bytes:
        wrong = [type(e).__name__ for e in events if not isinstance(e, self._model)]
        if wrong:  # pydantic would only warn and write something the reader cannot validate
            raise SerializationError(f"events must be {self._model.__name__} instances, got {wrong[0]}")
        try:
            return bytes(self._adapter.dump_json(events))
        except Exception as exc:
            raise SerializationError(f"event does not fit the model: {exc}") from exc

    def loads(self, data: bytes) -> list[Any]:
        return list(self._adapter.validate_json(data))
