"""Serving the console with uvicorn: in the foreground (`logbroker console`) or on a thread of its own beside
the broker (`serve --console`), so the console's rendering never runs on the broker's event loop."""

from __future__ import annotations

import ipaddress
import logging
import socket
import threading
import time
from typing import Any

from logbroker.addresses import parse_host_port
from logbroker.console.options import ConsoleOptions

log = logging.getLogger("logbroker.console")


class ConsoleConfigError(ValueError):
    pass


def loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        try:
            return all(ipaddress.ip_address(info[4][0]).is_loopback for info in socket.getaddrinfo(host, None))
        except OSError:
            return False


def plan(options: ConsoleOptions) -> tuple[str, int, list[str]]:
    """Where to listen, and the warnings to log: a console off loopback without TLS is served (it was asked
    for) but said loudly to be readable and forgeable by anyone on the path."""
    host, port = parse_host_port(options.listen, "console")
    if bool(options.tls_cert) != bool(options.tls_key):
        raise ConsoleConfigError("the console's TLS needs both a certificate and its key (PEM)")
    warnings = []
    if not loopback(host) and not options.tls_cert:
        warnings.append(f"the console on {host}:{port} is served WITHOUT TLS: logins and every page travel in "
                        "clear text to anyone on the network path (give --console-tls-cert/--console-tls-key, or "
                        "listen on 127.0.0.1 and tunnel)")  # fmt: skip
    return host, port, warnings


class ConsoleServer:
    def __init__(self, options: ConsoleOptions) -> None:
        import uvicorn

        from logbroker.console.app import build_app

        host, port, self.warnings = plan(options)
        self.options = options
        self.app = build_app(options)
        config = uvicorn.Config(self.app, host=host, port=port, log_level="warning", access_log=False,
                                lifespan="on", ssl_certfile=options.tls_cert, ssl_keyfile=options.tls_key,
                                server_header=False, timeout_graceful_shutdown=2)  # fmt: skip
        self.server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.address
        scheme = "https" if self.options.tls_cert else "http"
        return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}/"

    @property
    def address(self) -> tuple[str, int]:
        servers: list[Any] = getattr(self.server, "servers", [])
        for srv in servers:
            for sock in srv.sockets:
                name = sock.getsockname()
                return str(name[0]), int(name[1])
        host, port = parse_host_port(self.options.listen, "console")
        return host, port

    def _announce(self) -> None:
        for w in self.warnings:
            log.warning("%s", w)
        log.info("console on %s (cluster %s)", self.url, self.options.bootstrap)

    def run(self) -> None:
        """In the foreground until SIGINT/SIGTERM."""
        for w in self.warnings:
            log.warning("%s", w)
        self.server.config.callback_notify = None
        threading.Thread(target=self._announce_when_started, daemon=True).start()
        self.server.run()
        if not self.server.started:
            raise OSError(f"the console could not listen on {self.options.listen}")

    def _announce_when_started(self) -> None:
        for _ in range(300):
            if self.server.started:
                log.info("console on %s (cluster %s)", self.url, self.options.bootstrap)
                return
            time.sleep(0.05)

    def start(self, timeout: float = 15.0) -> None:
        """On a thread; returns once listening (OSError when it cannot)."""
        self._thread = threading.Thread(target=self.server.run, name="console", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise OSError(f"the console could not listen on {self.options.listen}")
            time.sleep(0.02)
        self._announce()

    def stop(self) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
