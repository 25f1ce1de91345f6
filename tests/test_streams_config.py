"""Configuration validation and the pure parts (hash ring, tokens, serializers) of `logbroker.streams`."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import BaseModel

from logbroker.streams import (
    HashRing,
    MsgpackSerializer,
    PydanticSerializer,
    SequenceToken,
    SerializationError,
    StreamsConfig,
    StreamsConfigError,
)

BASE = {"bootstrap": "127.0.0.1:9092", "topic": "t", "consumer_group": "g"}


def test_defaults_follow_the_orleans_provider() -> None:
    c = StreamsConfig.load(BASE)
    assert (c.num_queues, c.cache_size, c.cache_timespan) == (1, 16_384, 60.0)
    assert (c.produce_batch_size, c.produce_wait_ms, c.acks) == (1000, 10, 1)
    assert (c.max_bytes_per_fetch, c.receive_wait_ms, c.init_with_last_offset) == (32_768, 100, True)
    assert StreamsConfig.load({"streams": BASE}) == c


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("cache_size", 0),
        ("cache_timespan", -1),
        ("num_queues", 0),
        ("acks", 2),
        ("max_bytes_per_fetch", 10),
        ("receive_wait_ms", 0),
        ("metrics_port", 70_000),
        ("topic", "bad topic!"),
        ("init_with_last_offset", "perhaps"),
        ("unknown_key", 1),
    ],
)
def test_invalid_value_is_one_error_naming_the_key(key: str, value: object) -> None:
    with pytest.raises(StreamsConfigError) as info:
        StreamsConfig.load({**BASE, key: value})
    assert f"streams.{key}" in str(info.value)


def test_missing_required_key_is_named() -> None:
    with pytest.raises(StreamsConfigError, match=r"streams\.consumer_group"):
        StreamsConfig.load({"bootstrap": "b:1", "topic": "t"})


def test_hash_ring_is_stable_across_processes_and_spreads() -> None:
    ring = HashRing(4)
    here = [ring.partition("ns", f"k{i}") for i in range(200)]
    code = (
        "from logbroker.streams import HashRing; r = HashRing(4); "
        "print([r.partition('ns', f'k{i}') for i in range(200)])"
    )
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert str(here) == other.strip()
    counts = [here.count(p) for p in range(4)]
    assert min(counts) > 20, counts
    # adding a queue moves only part of the streams (consistent hashing)
    moved = sum(1 for i, p in enumerate(here) if HashRing(5).partition("ns", f"k{i}") != p)
    assert moved < 100


def test_tokens_order_and_round_trip() -> None:
    a, b, c = SequenceToken(0, 5, 0), SequenceToken(0, 5, 1), SequenceToken(0, 6, 0)
    assert a < b < c
    assert SequenceToken.parse(str(b)) == b


class Order(BaseModel):
    id: int
    item: str


def test_pluggable_serializers() -> None:
    m = MsgpackSerializer()
    assert m.loads(m.dumps([{"a": b"\x00"}, 1])) == [{"a": b"\x00"}, 1]
    p = PydanticSerializer(Order)
    assert p.loads(p.dumps([Order(id=1, item="x")])) == [Order(id=1, item="x")]
    with pytest.raises(SerializationError):
        p.dumps([{"id": "nope"}])
