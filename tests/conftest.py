"""Shared fixtures: a real `logbroker serve` process on loopback, unique topic names."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from logbroker.spark.session import SPARK_JAVA_OPTIONS_ENV
from logbroker_devtools.testing.net import PORT_BLOCK_ENV
from logbroker_devtools.testing.peers import PEER_JVM_OPTS_ENV
from logbroker_devtools.testing.process import BrokerProcess
from support import TEST_TARGET, TEST_TARGETS, shared_kafka, stop_shared_kafka

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# The JVMs tests start live seconds to minutes: C1 alone compiles what they run for a fraction of the CPU C2 takes
# (measured: a Spark test module 68 -> 40 CPU-s, a Kafka start 5.5 -> 3.5), and two cores are all CI has.
# C1 alone also shrinks the JVM's ergonomic code cache to 48 MB (unsegmented), which a worker's long-lived Spark
# session filled (run 43: "Out of space in CodeCache for method handle intrinsic", the stream thread died and the
# pipeline timed out): the usual 240 MB is reserved instead, committed only as it is used.
_JIT = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
os.environ.setdefault(SPARK_JAVA_OPTIONS_ENV, _JIT)
os.environ.setdefault(PEER_JVM_OPTS_ENV, _JIT)
# Each pytest-xdist worker ("gw0", "gw1", ...) hands out loopback ports from a block of its own, below the kernel's
# ephemeral range (32768+): workers never pick each other's ports, nor a client connection's source port.
# A worker sets its block even when one is inherited: xdist starts workers with the controller's environment,
# where this module already set gw0's block (run 14: three workers shared it, and a test restarting its broker
# found another worker's broker on its port).
_worker = os.environ.get("PYTEST_XDIST_WORKER")
_index = int(_worker[2:]) if _worker and _worker.startswith("gw") and _worker[2:].isdigit() else 0
_block = f"{20000 + 1500 * (_index % 8)}-{20000 + 1500 * (_index % 8) + 1499}"
if _worker is not None:
    os.environ[PORT_BLOCK_ENV] = _block
else:
    os.environ.setdefault(PORT_BLOCK_ENV, _block)


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
    yield shared_kafka().bootstrap


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    stop_shared_kafka()


# --------------------------------------------------------------------------------------- order under xdist
# `.ci/run` spreads whole files over workers (--dist loadfile --no-loadscope-reorder: in collection order, not
# xdist's most-tests-first), each worker taking the next file when it finishes one. Files run longest first (the
# measured seconds in durations.json), so the run does not end waiting on one long file that started last.
# `--store-durations` rewrites that file from a run.
DURATIONS_FILE = Path(__file__).with_name("durations.json")
_DEFAULT_FILE_SECONDS = 20.0  # a file not measured yet: placed among the middling ones


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--store-durations", action="store_true",
                     help="write each test file's total seconds of this run to tests/durations.json")  # fmt: skip


@pytest.hookimpl(tryfirst=True)  # before `-m "not slow"` deselects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The Kafka run of a long both-broker framework test (Spark's kill -9 loops...) goes to the slow tier: it
    # checks Spark on Kafka, once per full run; the default tier keeps the logbroker run that it is the
    # reference for. The budget of the default tier is 30 minutes on two cores.
    for item in items:
        callspec = getattr(item, "callspec", None)
        if item.get_closest_marker("kafka_side_in_full_tier") and callspec and "kafka" in callspec.params.values():
            item.add_marker(pytest.mark.slow)
    try:
        seconds: dict[str, float] = json.loads(DURATIONS_FILE.read_text())
    except (OSError, ValueError):
        return
    first_seen: dict[str, int] = {}
    for i, item in enumerate(items):
        first_seen.setdefault(item.nodeid.split("::", 1)[0], i)

    def key(pair: tuple[int, pytest.Item]) -> tuple[float, int, int]:
        i, item = pair
        file = item.nodeid.split("::", 1)[0]
        return (-seconds.get(Path(file).name, _DEFAULT_FILE_SECONDS), first_seen[file], i)

    items[:] = [item for _, item in sorted(enumerate(items), key=key)]


_file_seconds: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # Setup, call and teardown alike: a module's brokers start in its first test's setup.
    name = Path(report.nodeid.split("::", 1)[0]).name
    _file_seconds[name] = _file_seconds.get(name, 0.0) + report.duration


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if not config.getoption("--store-durations") or not _file_seconds:
        return
    ordered = dict(sorted(((k, round(v, 1)) for k, v in _file_seconds.items()), key=lambda kv: -kv[1]))
    DURATIONS_FILE.write_text(json.dumps(ordered, indent=1) + "\n")
    terminalreporter.write_line(f"durations of {len(ordered)} files written to {DURATIONS_FILE}")
