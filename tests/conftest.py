"""Shared fixtures: a real `logbroker serve` process on loopback, unique topic names."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from logbroker.process import BrokerProcess

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the whole session; tests isolate themselves with unique topic names."""
    proc = BrokerProcess(tmp_path_factory.mktemp("shared-broker") / "data", extra_args=["--num-partitions", "1"])
    proc.start()
    yield proc
    rc = proc.stop()
    assert rc == 0, f"broker exited with {rc} on SIGTERM:\n{proc.log_tail()}"


@pytest.fixture
def fresh_broker(tmp_path) -> Iterator[BrokerProcess]:
    """A broker of this test's own, for restarts, crashes and config changes (not started)."""
    proc = BrokerProcess(tmp_path / "data")
    yield proc
    proc.kill()


@pytest.fixture
def topic() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


def make_topic(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"
