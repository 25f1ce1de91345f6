"""Shared fixtures: a real `logbroker serve` process on loopback, unique topic names."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from logbroker.testing.process import BrokerProcess
from support import TEST_TARGET, TEST_TARGETS, missing_tool

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


@pytest.fixture(scope="module")
def bootstrap(request: pytest.FixtureRequest) -> Iterator[str]:
    """The broker under test: the shared logbroker `broker`, or Apache Kafka when LOGBROKER_TEST_TARGET=kafka
    (the same assertions against both prove the tests describe Kafka's behaviour, not ours)."""
    if TEST_TARGET not in TEST_TARGETS:
        raise pytest.UsageError(f"LOGBROKER_TEST_TARGET must be one of {TEST_TARGETS}, not {TEST_TARGET!r}")
    if TEST_TARGET == "logbroker":
        yield request.getfixturevalue("broker").bootstrap
        return
    from logbroker.testing import peers

    if not peers.java_available():
        missing_tool("java not found (needed for LOGBROKER_TEST_TARGET=kafka)")
    if not peers.jars_available("kafka"):
        missing_tool(f"no Kafka jars in {peers.default_jar_dir('kafka')} (run .ci/fetch-jars)")
    with peers.KafkaPeer() as peer:
        yield peer.bootstrap
