"""Run `logbroker serve` as a child process: for tests (kill -9, restart on the same data) and the
benchmark. A real process, so crashes and signals are the real thing."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Self

from logbroker_devtools.testing.net import LOOPBACK, free_port

__all__ = ["LOOPBACK", "BrokerProcess", "free_port"]


class BrokerProcess:
    """A `logbroker serve` child on a loopback port; keeps its data dir across restarts."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        port: int | None = None,
        extra_args: list[str] | None = None,
        env: dict[str, str] | None = None,
        python: str | None = None,
        wrap: list[str] | None = None,
        own_session: bool = False,
    ) -> None:
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir is not None else Path(tempfile.mkdtemp(prefix="logbroker-"))
        self.port = port or free_port()
        self.extra_args = list(extra_args or [])
        self.env = env
        self.python = python or sys.executable
        self.wrap = wrap or []
        # A session of its own, as the test peers (Kafka, Tansu) get: with the kernel's autogroup
        # scheduling each session shares the CPU as one group, so a broker left in its starter's session
        # competes thread by thread with a load generator started from there too, while a peer in its
        # own session gets its group's share. Benchmarks that compare brokers need this.
        self.own_session = own_session
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}.log"

    @property
    def bootstrap(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def command(self) -> list[str]:
        return [self.python, *self.wrap, "-m", "logbroker", "serve", "--listen", self.bootstrap,
                "--data-dir", str(self.data_dir), *self.extra_args]  # fmt: skip

    def start(self, timeout: float = 30.0) -> Self:
        env = dict(os.environ)
        env.update(self.env or {})
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        try:
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env,
                                         start_new_session=self.own_session)  # fmt: skip
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"logbroker exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with socket.create_connection((LOOPBACK, self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.02)
        self.kill()
        raise RuntimeError(f"logbroker did not listen on {self.bootstrap} within {timeout}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        """Graceful stop; returns the exit code."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        rc = self.proc.returncode
        self.proc = None
        return rc

    def kill(self) -> None:
        """kill -9: no shutdown code runs, as in a crash."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.proc = None

    def restart(self) -> Self:
        self.stop()
        return self.start()

    def cleanup(self) -> None:
        self.kill()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.log_path.unlink(missing_ok=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.cleanup()
