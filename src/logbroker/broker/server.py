"""The broker's network side: accepts connections, decodes requests, runs handlers, answers in order.

Everything a handler may touch lives in `BrokerContext`; this module owns sockets and their timeouts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections import deque
from collections.abc import Awaitable
from typing import Any

from logbroker.config import BrokerSettings, parse_host_port
from logbroker.protocol import ProtocolError, Request, ServerConnection

from .context import BrokerContext, NoResponse
from .dispatch import Handler
from .handlers import registry, served_apis

log = logging.getLogger("logbroker.broker")


class Broker:
    """A single-node, durable, Kafka-compatible broker on one data directory."""

    def __init__(self, settings: BrokerSettings) -> None:
        self.settings = settings
        self.context = BrokerContext(settings, served_apis())
        self._handlers: dict[int, Handler] = dict(registry())
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[ClientConnection] = set()
        self._tasks: list[asyncio.Task[None]] = []
        self.started = asyncio.Event()
        self.stats = {"connections": 0, "requests": 0, "protocol_errors": 0}

    @property
    def host(self) -> str:
        return self.context.host

    @property
    def port(self) -> int:
        return self.context.port

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        ctx = self.context
        ctx.open()
        host, port = parse_host_port(self.settings.listen)
        self._server = await asyncio.get_running_loop().create_server(
            lambda: ClientConnection(self), host, port, reuse_address=True, backlog=1024
        )
        if port == 0:
            ctx.port = self._server.sockets[0].getsockname()[1]
        self._tasks.append(asyncio.create_task(self._housekeeping(), name="housekeeping"))
        log.info(
            "logbroker listening on %s:%d (advertised %s:%d), data in %s, fsync=%s%s",
            host,
            self.port,
            self.host,
            self.port,
            self.settings.data_dir,
            self.settings.fsync.value,
            "" if ctx.clean_start else " (recovered after unclean shutdown)",
        )
        self.started.set()

    async def stop(self) -> None:
        """Stop accepting, let in-flight requests finish, sync everything, release the data dir."""
        if self.context.stopping:
            return
        self.context.begin_stopping()  # long polls answer now, so connections can drain
        if self._server is not None:
            self._server.close()
        for conn in list(self._connections):
            conn.stop_reading()
        deadline = time.monotonic() + 10
        while any(c.busy for c in self._connections) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for conn in list(self._connections):
            conn.close()
        for t in self._tasks:
            t.cancel()
        await self.context.close()
        log.info("logbroker stopped cleanly")

    async def _housekeeping(self) -> None:
        """Connection timeouts every second; retention every `retention_check_interval_ms`."""
        interval = self.settings.retention_check_interval_ms / 1000
        last_retention = time.monotonic()
        while True:
            await asyncio.sleep(min(interval, 1.0))
            now = time.monotonic()
            for conn in list(self._connections):
                conn.check_timeouts(now)
            if now - last_retention >= interval:
                last_retention = now
                deleted = self.context.enforce_retention()
                if deleted:
                    log.info("retention deleted %d segments", deleted)


class ClientConnection(asyncio.BufferedProtocol):
    """One client socket: pipelined requests are handled concurrently and answered in arrival order.

    A buffered protocol: the kernel writes received bytes straight into the codec's buffers."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        ctx = broker.context
        self.codec = ServerConnection(ctx.apis, broker.settings.socket_request_max_bytes, ctx.frame_buffers)
        self.transport: asyncio.Transport | None = None
        self.pending: deque[asyncio.Future[memoryview | None]] = deque()
        self.peer = "?"
        self.host = ""
        self.last_activity = time.monotonic()
        self.partial_since: float | None = None
        self._read_paused = False
        self._write_paused = False
        self._write_resumed: asyncio.Event | None = None
        self._closed = False
        self._stopped = False

    # ------------------------------------------------------------------ asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.host = f"/{peer[0]}" if peer else ""
        b = self.broker
        if len(b._connections) >= b.settings.max_connections or b.context.stopping:
            log.warning("refusing connection from %s: too many connections", self.peer)
            transport.abort()
            return
        b._connections.add(self)
        b.stats["connections"] += 1
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        transport.set_write_buffer_limits(high=8 << 20)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self.broker._connections.discard(self)
        for fut in self.pending:
            fut.cancel()
        self.pending.clear()

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.codec.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self.last_activity = time.monotonic()
        self.codec.buffer_updated(nbytes)
        completed = False
        try:
            while not self._closed:
                req = self.codec.next_event()
                if req is None:
                    break
                completed = True
                self._dispatch(req)
        except ProtocolError as exc:
            self.broker.stats["protocol_errors"] += 1
            log.warning("closing connection from %s: %s", self.peer, exc)
            self._fail()
            return
        # The clock starts when a request's first bytes arrive, not at its latest chunk: a client trickling
        # a byte at a time must not hold the connection (and its buffer) past request_timeout_ms.
        if not self.codec.buffered:
            self.partial_since = None
        elif completed or self.partial_since is None:
            self.partial_since = time.monotonic()
        if len(self.pending) >= self.broker.settings.max_pipelined_requests and not self._read_paused:
            self._read_paused = True
            assert self.transport is not None
            self.transport.pause_reading()

    def eof_received(self) -> bool:
        if self.codec.buffered:
            log.info("connection from %s closed with %d bytes of an incomplete request", self.peer, self.codec.buffered)
        # Let pending responses drain; the transport closes once we return False after writes.
        return False

    # ------------------------------------------------------------------ request flow

    def _dispatch(self, req: Request) -> None:
        self.broker.stats["requests"] += 1
        req.client_host = self.host
        handler = self.broker._handlers.get(req.api_key)
        fut: asyncio.Future[memoryview | None] = asyncio.get_running_loop().create_future()
        self.pending.append(fut)
        if handler is None:  # registered in the codec but no handler: cannot happen for advertised APIs
            fut.set_exception(ProtocolError(f"no handler for API key {req.api_key}"))
            self._drain()
            return
        try:
            result = handler.fn(self.broker.context, req)
        except Exception as exc:
            fut.set_exception(exc)
            self._drain()
            return
        if isinstance(result, Awaitable):
            task = asyncio.ensure_future(result)
            task.add_done_callback(lambda t, f=fut, r=req: self._complete(f, r, t))
        else:
            self._finish(fut, req, result)

    def _complete(self, fut: asyncio.Future[memoryview | None], req: Request, task: asyncio.Future[Any]) -> None:
        if fut.done():
            return
        if task.cancelled():
            fut.cancel()
        elif task.exception() is not None:
            fut.set_exception(task.exception())  # type: ignore[arg-type]
        else:
            self._finish(fut, req, task.result())
            return
        self._drain()

    def _finish(self, fut: asyncio.Future[memoryview | None], req: Request, response: Any) -> None:
        if fut.done():
            return
        try:
            if response is None or isinstance(response, NoResponse):
                fut.set_result(None)
                if isinstance(response, NoResponse) and response.close:
                    self._close_after_drain = True
            else:
                fut.set_result(self.codec.encode_response(req, response))
        except Exception as exc:
            if not fut.done():
                fut.set_exception(exc)
        self._drain()

    _close_after_drain = False

    def _drain(self) -> None:
        t = self.transport
        while self.pending and self.pending[0].done():
            fut = self.pending.popleft()
            if fut.cancelled():
                continue
            exc = fut.exception()
            if exc is not None:
                log.error("request from %s failed: %s", self.peer, exc, exc_info=exc)
                self._fail()
                return
            frame = fut.result()
            if frame is not None and t is not None and not self._closed:
                t.write(frame)  # sent at once when the socket takes it; only an unsent rest is copied
                self.codec.sent(frame)
        if self._close_after_drain and not self.pending:
            self.close()
            return
        if self._read_paused and len(self.pending) < self.broker.settings.max_pipelined_requests // 2:
            self._read_paused = False
            if t is not None and not self._closed and not self._stopped:
                t.resume_reading()

    # ------------------------------------------------------------------ teardown

    @property
    def busy(self) -> bool:
        return bool(self.pending)

    def stop_reading(self) -> None:
        self._stopped = True
        if self.transport is not None and not self._closed:
            with contextlib.suppress(Exception):
                self.transport.pause_reading()

    def check_timeouts(self, now: float) -> None:
        s = self.broker.settings
        if self.pending:
            return
        if self.partial_since is not None and now - self.partial_since > s.request_timeout_ms / 1000:
            log.warning("closing connection from %s: request incomplete after %d ms", self.peer, s.request_timeout_ms)
            self._fail()
        elif now - self.last_activity > s.connections_max_idle_ms / 1000:
            log.info("closing idle connection from %s", self.peer)
            self.close()

    def _fail(self) -> None:
        self._closed = True
        if self.transport is not None:
            self.transport.abort()

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()
