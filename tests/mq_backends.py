"""Backends for the `logbroker.mq` suite: the in-process embedded broker, Apache Kafka (KRaft) and Tansu.

Each broker starts once per session (Kafka takes seconds) and tests isolate themselves with unique
topic and subscription names. `mq_backend` parametrises a test module over all three.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from logbroker.embedded import EmbeddedBroker
from logbroker.mq import Client, MQConfig
from logbroker_devtools.testing import peers
from support import shared_kafka

BACKENDS = ("embedded", "kafka", "tansu")
__all__ = ["make_client", "mq_backend", "mq_embedded_broker", "mq_kafka_peer", "mq_tansu_peer"]


def unique(prefix: str = "mq") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def mq_embedded_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(tmp_path_factory.mktemp("mq-embedded") / "data", num_partitions=1) as broker:
        yield broker


@pytest.fixture(scope="session")
def mq_kafka_peer() -> Iterator[peers.KafkaPeer]:
    yield shared_kafka()


@pytest.fixture(scope="session")
def mq_tansu_peer() -> Iterator[peers.TansuPeer]:
    try:
        peers.tansu_binary()
    except peers.PeerError as exc:
        pytest.skip(str(exc))
    with peers.TansuPeer() as peer:
        yield peer


@pytest.fixture(params=BACKENDS, scope="module")
def mq_backend(request: pytest.FixtureRequest) -> str:
    """Bootstrap of the backend under test; the param id names it."""
    name: str = request.param
    if name == "embedded":
        return str(request.getfixturevalue("mq_embedded_broker").bootstrap)
    return str(request.getfixturevalue(f"mq_{name}_peer").bootstrap)


def config_for(request: pytest.FixtureRequest, bootstrap: str, **overrides: Any) -> MQConfig:
    """The embedded backend attaches to the session's in-process broker; the others are Kafka clusters."""
    name = request.node.callspec.params["mq_backend"]
    base: dict[str, Any] = (
        {"type": "embedded", "embedded": {"bootstrap": bootstrap}}
        if name == "embedded"
        else {"type": "kafka", "kafka": {"bootstrap_servers": bootstrap}}
    )
    return MQConfig.model_validate({**base, **overrides})


@pytest.fixture
def make_client(request: pytest.FixtureRequest, mq_backend: str) -> Iterator[Callable[..., Client]]:
    """`make_client(ack_commit="off")`: a Client on the backend under test, closed after the test."""
    made: list[Client] = []

    def make(**overrides: Any) -> Client:
        c = Client(config_for(request, mq_backend, **overrides))
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()
