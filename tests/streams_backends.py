"""Backends for the `logbroker.streams` suite: the in-process embedded broker and Apache Kafka (KRaft)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from logbroker.embedded import EmbeddedBroker
from logbroker_devtools.testing import peers
from support import shared_kafka


def unique(prefix: str = "st") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def streams_embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(tmp_path_factory.mktemp("streams-embedded") / "data") as broker:
        yield broker


@pytest.fixture(scope="session")
def streams_kafka() -> Iterator[peers.KafkaPeer]:
    yield shared_kafka()


@pytest.fixture(params=("embedded", "kafka"), scope="module")
def streams_backend(request: pytest.FixtureRequest) -> str:
    """Bootstrap of the backend under test; the param id names it."""
    name = "streams_embedded" if request.param == "embedded" else "streams_kafka"
    return str(request.getfixturevalue(name).bootstrap)


def is_kafka(request: pytest.FixtureRequest) -> bool:
    """Whether a test parametrized by ``streams_backend`` runs on Apache Kafka."""
    return bool(request.node.callspec.params.get("streams_backend") == "kafka")


def config(bootstrap: str, **overrides: Any) -> dict[str, Any]:
    """A fresh topic and group per test; no metrics endpoint unless asked (0 = ephemeral port, never 20490)."""
    base: dict[str, Any] = {"bootstrap": bootstrap, "topic": unique("st"), "consumer_group": unique("g"),
                            "num_queues": 4, "init_with_last_offset": False, "metrics_port": None}  # fmt: skip
    return {**base, **overrides}
