"""A real Spark standalone cluster on loopback, from pyspark's own ``spark-class``: one master and N
workers (one core each), for tests and benchmarks that show a pipeline runs unchanged beyond
``local[*]``.

Each worker runs in its own session, so `kill_worker` takes the worker and the executor JVM and Python
workers it launched (as a lost machine would); the master is told to give up on a silent worker after a
few seconds instead of a minute. Lifecycle, logs and the leak-proof cleanup are the peers' (`_Peer`).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from logbroker.spark.session import SPARK_JAVA_OPTIONS_ENV
from logbroker_devtools.testing.net import LOOPBACK, free_ports
from logbroker_devtools.testing.peers import PeerError, _Peer, _signal_group, _tail

__all__ = ["SparkStandalone"]


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class SparkStandalone(_Peer):
    """``spark://127.0.0.1:PORT`` with `workers` workers of one core and `worker_memory` each."""

    kind = "spark"

    def __init__(self, workers: int = 2, worker_memory: str = "2g", *, base_dir: str | None = None,
                 start_timeout: float = 120.0) -> None:  # fmt: skip
        super().__init__(start_timeout=start_timeout, stop_grace=5.0)
        self.workers = workers
        self.worker_memory = worker_memory
        self.base_dir = base_dir
        self.port, self.ui_port = free_ports(2)
        self._worker_procs: dict[int, subprocess.Popen[bytes]] = {}
        self._dir: Path | None = None

    @property
    def bootstrap(self) -> str:
        return f"spark://{LOOPBACK}:{self.port}"

    master_url = bootstrap

    def _env(self) -> dict[str, str]:
        assert self._dir is not None
        home = _spark_home()
        return {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": LOOPBACK,
                "SPARK_LOG_DIR": str(self._dir / "logs"), "SPARK_WORKER_DIR": str(self._dir / "work"),
                "SPARK_DAEMON_MEMORY": "384m",
                # A lost worker is dropped after 10 s (default 60 s). Master and workers must agree: a worker
                # heartbeats every quarter of its own setting, the master judges by its own.
                # No REST submission server: it binds the fixed port 6066, which two clusters would share.
                "SPARK_DAEMON_JAVA_OPTS": "-Dspark.worker.timeout=10 -Dspark.master.rest.enabled=false "
                f"{os.environ.get(SPARK_JAVA_OPTIONS_ENV, '')}"
                .strip()}  # fmt: skip

    def _class(self, main: str, *args: str) -> list[str]:
        return [str(_spark_home() / "bin" / "spark-class"), main, *args]

    def _launch(self) -> None:
        self._dir = self._make_tmpdir(self.base_dir)
        (self._dir / "work").mkdir()
        master = self._class("org.apache.spark.deploy.master.Master", "--host", LOOPBACK, "--port", str(self.port),
                             "--webui-port", str(self.ui_port))  # fmt: skip
        log = self._dir / "master.log"
        proc = self._spawn(master, log, env=self._env())
        self._read_master_ports(proc, log, time.monotonic() + self.start_timeout)
        for i in range(self.workers):
            self.start_worker(i)

    def _read_master_ports(self, proc: subprocess.Popen[bytes], log: Path, deadline: float) -> None:
        """Take the ports the master really bound from its log: a port chosen free can be taken before the JVM
        binds it, and Spark then moves on to the next one (once a console answered /json/ with HTML)."""
        want = {"sparkMaster": "port", "MasterUI": "ui_port"}
        found: dict[str, int] = {}
        while True:
            text = log.read_text(errors="replace") if log.exists() else ""
            for name, port in re.findall(r"Successfully started service '(\w+)' on port (\d+)", text):
                if name in want:
                    found[name] = int(port)
            if len(found) == len(want):
                for name, attr in want.items():
                    setattr(self, attr, found[name])
                return
            if proc.poll() is not None or time.monotonic() > deadline:
                raise PeerError(f"spark master did not bind its ports (exit {proc.poll()}); " + _tail(log, 20))
            time.sleep(0.1)

    def start_worker(self, i: int) -> None:
        """(Re)start worker `i`; `wait_workers` blocks until the master sees it."""
        assert self._dir is not None
        ui = free_ports(1)[0]
        argv = self._class("org.apache.spark.deploy.worker.Worker", "--host", LOOPBACK, "--cores", "1",
                           "--memory", self.worker_memory, "--webui-port", str(ui),
                           "--work-dir", str(self._dir / "work" / str(i)), self.bootstrap)  # fmt: skip
        self._worker_procs[i] = self._spawn(argv, self._dir / f"worker-{i}.log", env=self._env())

    def kill_worker(self, i: int) -> None:
        """SIGKILL worker `i` with everything it launched (its executor JVM and Python workers)."""
        proc = self._worker_procs[i]
        _signal_group(proc, signal.SIGKILL)
        proc.wait(30)

    def restart_dead_workers(self) -> None:
        """Start again every worker that was killed, and wait until the master sees them all."""
        for i, proc in self._worker_procs.items():
            if proc.poll() is not None:
                self.start_worker(i)
        self.wait_workers()

    def state(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://{LOOPBACK}:{self.ui_port}/json/", timeout=5) as resp:
            return dict(json.load(resp))

    def alive_workers(self) -> int:
        return sum(1 for w in self.state().get("workers", []) if w.get("state") == "ALIVE")

    def wait_workers(self, n: int | None = None, timeout: float = 60.0) -> None:
        want = self.workers if n is None else n
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.alive_workers() == want:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise PeerError(f"spark master sees no {want} live workers within {timeout:.0f}s; " + self.logs())
            time.sleep(0.3)

    def _wait_ready(self, deadline: float) -> None:
        self.wait_workers(timeout=max(1.0, deadline - time.monotonic()))

    def logs(self) -> str:
        assert self._dir is not None
        return " | ".join(f"{p.name}: {_tail(p, 10)}" for p in sorted(self._dir.glob("*.log")))
