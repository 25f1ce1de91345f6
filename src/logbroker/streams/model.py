"""Tokens, the stream-to-partition hash ring and serializers: the pure parts, shared by every process."""

from __future__ import annotations

import bisect
import hashlib
import json
from typing import Any, NamedTuple, Protocol

from logbroker.streams.errors import SerializationError


class SequenceToken(NamedTuple):
    """Position of one event: (partition, offset, index in batch). Orders the events of one stream.

    A named tuple, not a dataclass: one is made and compared per delivered event, and tuple creation and
    comparison run in C (several times cheaper than a frozen dataclass).
    """

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
        self._memo: dict[tuple[str, str], int] = {}

    def partition(self, namespace: str, key: str) -> int:
        """Memoised (bounded): a stream handle per publish would otherwise hash each time."""
        memo = self._memo
        got = memo.get((namespace, key))
        if got is None:
            i = bisect.bisect(self._keys, _h(f"{namespace}\x00{key}"))
            got = self._parts[i % len(self._parts)]
            if len(memo) >= 65_536:
                memo.clear()
            memo[namespace, key] = got
        return got


def _h(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


class Serializer(Protocol):
    def dumps(self, events: list[Any]) -> bytes: ...
    def loads(self, data: bytes) -> list[Any]: ...


class JsonSerializer:
    """Default: readable on the wire by any tool; refuses what JSON cannot hold instead of stringifying it."""

    def __init__(self) -> None:
        # built once: json.dumps/loads with options construct a new encoder per call
        self._encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
        self._decode = json.JSONDecoder().decode

    def dumps(self, events: list[Any]) -> bytes:
        try:
            return self._encode(events).encode()
        except (TypeError, ValueError) as exc:
            raise SerializationError(f"event is not JSON-serialisable: {exc}") from exc

    def loads(self, data: bytes) -> list[Any]:
        out = self._decode(data.decode())
        return out if isinstance(out, list) else list(out)


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
