"""Configuration validation and the pure parts (hash ring, tokens, serializers) of `logbroker.streams`."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import urllib.request

import pytest
from pydantic import BaseModel

from logbroker.streams import (
    HashRing,
    MsgpackSerializer,
    PydanticSerializer,
    SequenceToken,
    SerializationError,
    StreamProvider,
    StreamsConfig,
    StreamsConfigError,
)
from logbroker.streams.metrics import StreamMetrics

BASE = {"bootstrap": "127.0.0.1:9092", "topic": "t", "consumer_group": "g"}


def test_defaults_follow_the_orleans_provider() -> None:
    c = StreamsConfig.load(BASE)
    assert (c.num_queues, c.cache_size, c.cache_timespan) == (1, 16_384, 60.0)
    assert (c.produce_batch_size, c.produce_wait_ms, c.acks) == (1000, 10, 1)
    assert (c.max_bytes_per_fetch, c.receive_wait_ms, c.init_with_last_offset) == (32_768, 100, True)
    assert (c.metrics_port, c.metrics_host) == (20490, "127.0.0.1")
    assert StreamsConfig.load({"streams": BASE}) == c
    # only topic and consumer_group are required: sharing a default group would split partitions between apps
    bare = StreamsConfig.load({"topic": "t", "consumer_group": "g"})
    assert (bare.bootstrap, bare.security_protocol) == ("127.0.0.1:9092", "PLAINTEXT")


# every value the issue lists (and the extras), each with a value it must refuse
INVALID = [
    ("bootstrap", "no-port"),
    ("bootstrap", "h:1,h:99999"),
    ("security_protocol", "TLS"),
    ("topic", "bad topic!"),
    ("topic", ""),
    ("consumer_group", ""),
    ("num_queues", 0),
    ("cache_size", 0),
    ("cache_timespan", -1),
    ("produce_batch_size", 0),
    ("produce_wait_ms", -1),
    ("acks", 2),
    ("max_bytes_per_fetch", 10),
    ("receive_wait_ms", 0),
    ("init_with_last_offset", "perhaps"),
    ("session_timeout_ms", 10),
    ("metrics_port", 70_000),
    ("metrics_port", -1),
    ("metrics_host", ""),
    ("implicit_idle_timeout", -1),
    ("implicit_idle_timeout", "soon"),
    ("implicit_idle_timeout", float("nan")),
    ("implicit_idle_timeout", float("inf")),
    ("implicit_idle_timeout", 8 * 86_400),
    ("unknown_key", 1),
]


@pytest.mark.parametrize(("key", "value"), INVALID)
def test_invalid_value_is_one_error_naming_the_key(key: str, value: object) -> None:
    with pytest.raises(StreamsConfigError) as info:
        StreamsConfig.load({**BASE, key: value})
    assert str(info.value).startswith(f"streams.{key}:")
    assert "\n" not in str(info.value)  # one error, not pydantic's multi-line report


def test_every_listed_value_has_a_default() -> None:
    listed = ["bootstrap", "security_protocol", "num_queues", "cache_size", "cache_timespan", "produce_batch_size",
              "produce_wait_ms", "acks", "max_bytes_per_fetch", "receive_wait_ms", "init_with_last_offset",
              "metrics_port", "implicit_idle_timeout"]  # fmt: skip
    fields = StreamsConfig.model_fields
    assert all(not fields[k].is_required() for k in listed)
    assert {k for k, f in fields.items() if f.is_required()} == {"topic", "consumer_group"}
    assert {k for k, _ in INVALID} >= set(listed) | {"topic", "consumer_group"}


def test_metrics_port_default_and_choice() -> None:
    """Left at the default, 20490 is only preferred; chosen (even re-chosen through load), it is required."""
    assert "metrics_port" not in StreamsConfig.load(BASE).model_fields_set
    assert "metrics_port" not in StreamsConfig.load(StreamsConfig.load(BASE), cache_size=5).model_fields_set
    assert "metrics_port" in StreamsConfig.load({**BASE, "metrics_port": 0}).model_fields_set
    assert StreamsConfig.load({**BASE, "metrics_port": None}).metrics_port is None


def test_metrics_endpoint_on_a_busy_port(caplog: pytest.LogCaptureFixture) -> None:
    """A taken port: an error naming the key when chosen, a warning and no endpoint when only defaulted."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(StreamsConfigError, match=rf"^streams\.metrics_port: cannot serve metrics on .*:{port}"):
            StreamMetrics(port, required=True)
        with caplog.at_level(logging.WARNING, logger="logbroker.streams.metrics"):
            m = StreamMetrics(port, required=False)
        assert m.port is None
        assert "continuing without a metrics endpoint" in caplog.text
        m.produced.inc(3)
        assert "logbroker_streams_produced_events_total 3.0" in m.text()  # the series still exist
        m.close()


def test_metrics_endpoint_on_an_ephemeral_port_and_off() -> None:
    m = StreamMetrics(0)
    try:
        assert m.port
        body = urllib.request.urlopen(f"http://127.0.0.1:{m.port}/metrics", timeout=5).read().decode()
        assert "logbroker_streams_active_receivers" in body
    finally:
        m.close()
    off = StreamMetrics(None)
    assert off.port is None
    off.close()


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


def test_implicit_idle_timeout_default_and_never() -> None:
    """15 minutes by default; None and 0 both mean implicit subscriptions are never retired."""
    assert StreamsConfig.load(BASE).implicit_idle_timeout == 900.0
    assert StreamProvider(BASE)._idle_timeout == 900.0
    assert StreamsConfig.load(BASE, implicit_idle_timeout="2.5").implicit_idle_timeout == 2.5
    for never in (None, 0):
        assert StreamProvider({**BASE, "implicit_idle_timeout": never})._idle_timeout is None
