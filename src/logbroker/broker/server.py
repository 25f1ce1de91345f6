"""The broker's network side: accepts connections, decodes requests, runs handlers, answers in order.

Everything a handler may touch lives in `BrokerContext`; this module owns sockets and their timeouts.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import itertools
import logging
import os
import resource
import socket
import ssl
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from logbroker.config import BrokerSettings, Listener, parse_ip_overrides
from logbroker.protocol import ApiKey, ProtocolError, RawFrame, Request, ServerConnection
from logbroker.protocol.errors import FrameTooLarge
from logbroker.protocol.fetch_response import SplicedFrame
from logbroker.storage.segment import FileRange

from .auth.authenticator import Outcome, SaslSession, load_plain_users, plain_checker
from .auth.tls import ANONYMOUS, PrincipalMapper, certificate_principal, listener_context_factory
from .context import BrokerContext, NoResponse, descriptor_shares
from .dispatch import Handler
from .handlers import registry, served_apis
from .logfilter import RepeatFilter
from .metrics import MetricsEndpoint
from .tlsconn import RECEIVE_BUFFER, TlsSession, TlsTransport

log = logging.getLogger("logbroker.broker")


def _open_listener_risk(spec: Listener) -> str:
    """Why a listener without an authorizer is worth a warning ("" when it is not): a secured protocol says
    the operator means to keep clients out, a non-loopback address lets other machines in."""
    if spec.tls or spec.sasl:
        return f"is secured ({spec.protocol})"
    try:
        loopback = ipaddress.ip_address(spec.host.strip("[]")).is_loopback
    except ValueError:
        loopback = spec.host == "localhost"
    return "" if loopback else "takes connections from other machines"


# How often pooled buffers that went unused are let go (`BufferPool.trim`).
BUFFER_TRIM_INTERVAL_S = 10.0
_TLS_RECORD = 0x1603  # the first two bytes of a TLS handshake record, read as a frame size's high half


_SERIALS = itertools.count(1)  # connection ids, for state that lives as long as a connection


@dataclass
class ListenerRuntime:
    """One open listener: its settings, TLS context and principal mapping, and SASL configuration."""

    spec: Listener
    tls: ssl.SSLContext | None = None
    mapper: PrincipalMapper | None = None
    mechanisms: list[str] = field(default_factory=list)
    plain_check: Callable[[str, str], bool] | None = None
    reauth_ms: int = 0

    @classmethod
    def build(cls, spec: Listener, settings: BrokerSettings) -> ListenerRuntime:
        """Everything a listener needs before it opens; ValueError naming the setting when it cannot."""

        def get(key: str) -> Any:
            return settings.for_listener(spec.name, key)

        rt = cls(spec)
        if spec.tls:
            rt.tls, rt.mapper = listener_context_factory(get)
        if spec.sasl:
            rt.mechanisms = [m.strip().upper() for m in str(get("sasl_enabled_mechanisms")).split(",") if m.strip()]
            users = load_plain_users(get("sasl_plain_users_file"), get("sasl_plain_jaas_config"))
            if "PLAIN" in rt.mechanisms and not users:
                log.warning("listener %s offers SASL/PLAIN but no PLAIN user is configured", spec.name)
            rt.plain_check = plain_checker(users)
            rt.reauth_ms = int(get("connections_max_reauth_ms"))
        return rt


class Broker:
    """A single-node, durable, Kafka-compatible broker on one data directory."""

    def __init__(self, settings: BrokerSettings) -> None:
        self.settings = settings
        self.context = BrokerContext(settings, served_apis(settings.protocol_versions))
        self._handlers: dict[int, Handler] = dict(registry())
        self._servers: list[asyncio.base_events.Server] = []
        self.listeners: list[ListenerRuntime] = []
        self._connections: set[ClientConnection] = set()
        self._tasks: list[asyncio.Task[None]] = []
        self.started = asyncio.Event()
        self.stats = {"connections": 0, "requests": 0, "protocol_errors": 0, "refused_connections": 0, "mutes": 0}
        self._per_host: dict[str, int] = {}  # open connections by client address
        self._host_limits: dict[str, int] = {}  # max.connections.per.ip.overrides, resolved to addresses
        self._fd_cap = settings.max_connections  # what descriptors allow, set at start
        self._limits_from: tuple[int, str] = (settings.max_connections, settings.max_connections_per_ip_overrides)
        self.max_connections = settings.max_connections  # lowered at start to what descriptors allow
        # Bytes of requests in progress and of responses not yet sent, over all connections (a running
        # estimate: transports drain without telling, so it is recounted before it mutes anyone).
        self.inflight = 0
        self.muted = False  # every connection stops reading while `inflight` is over the broker-wide bound
        self._unmute_timer: asyncio.TimerHandle | None = None
        self._log_filter = RepeatFilter()
        self._tls_inbox: memoryview | None = None
        m = self.metrics = self.context.metrics
        m.open_connections = self._open_by_listener
        m.inflight_bytes = lambda: self.inflight
        m.ready = lambda: self.started.is_set() and not self.context.stopping
        m.untrusted_stores = lambda: self.context.access.untrusted_stores() if self.context.opened else {}
        self.metrics_endpoint: MetricsEndpoint | None = None

    def tls_inbox(self) -> memoryview:
        """Where TLS connections receive ciphertext: one buffer for all (the event loop fills it for one
        connection at a time, which feeds it to its session at once)."""
        if self._tls_inbox is None:
            self._tls_inbox = memoryview(bytearray(RECEIVE_BUFFER))
        return self._tls_inbox

    def _open_by_listener(self) -> dict[str, int]:
        out = dict.fromkeys((rt.spec.name for rt in self.listeners), 0)
        for conn in self._connections:
            name = conn.listener.spec.name
            out[name] = out.get(name, 0) + 1
        return out

    @property
    def host(self) -> str:
        return self.context.host

    @property
    def port(self) -> int:
        return self.context.port

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        ctx = self.context
        self._log_filter.install()
        fds = raise_fd_limit()
        # Connections get what descriptors the logs do not need: accept() must never hit EMFILE.
        allowed = descriptor_shares(fds)[0]
        self._fd_cap = allowed
        if self.max_connections > allowed:
            log.info(
                "max_connections %d lowered to %d by the file-descriptor limit %d", self.max_connections, allowed, fds
            )
            self.max_connections = allowed
        self._host_limits = resolve_overrides(self.settings.max_connections_per_ip_overrides)
        self._limits_from = (self.settings.max_connections, self.settings.max_connections_per_ip_overrides)
        # TLS files and PLAIN users are read before anything opens: a bad one refuses to start, naming it.
        self.listeners = [ListenerRuntime.build(spec, self.settings) for spec in ctx.listeners]
        self.metrics.loop = asyncio.get_running_loop()
        for rt in self.listeners:
            self.metrics.listener(rt.spec.name)  # every listener's series from the start, at 0
        if self.settings.metrics_listen:
            # First, so that /ready answers 503 while storage opens (a recovery can take a while).
            self.metrics_endpoint = MetricsEndpoint(self.metrics)
            self.metrics_endpoint.start(self.settings.metrics_listen)
        try:
            ctx.open()
        except BaseException:
            await self._close_metrics()
            raise
        loop = asyncio.get_running_loop()
        try:
            for rt in self.listeners:
                spec = rt.spec
                connection = TlsClientConnection if rt.tls is not None else ClientConnection
                server = await loop.create_server(
                    lambda rt=rt, connection=connection: connection(self, rt),  # type: ignore[misc]
                    spec.host,
                    spec.port,
                    reuse_address=True,
                    backlog=1024,
                )
                self._servers.append(server)
                bound = server.sockets[0].getsockname()[1]
                host, port = ctx.endpoints[spec.name]
                if port == 0:
                    ctx.endpoints[spec.name] = (host, bound)
                log.info(
                    "listener %s (%s) on %s:%d, advertised as %s:%d%s",
                    spec.name,
                    spec.protocol,
                    spec.host,
                    bound,
                    *ctx.endpoints[spec.name],
                    f", SASL mechanisms {','.join(rt.mechanisms)}" if rt.mechanisms else "",
                )
        except BaseException:
            for server in self._servers:
                server.close()
            await ctx.close()
            await self._close_metrics()
            raise
        self._tasks.append(asyncio.create_task(self._housekeeping(), name="housekeeping"))
        # Before the "serving" line: whoever waits for that line finds these said.
        if ctx.access.authorizer is None:
            for spec in ctx.listeners:
                if why := _open_listener_risk(spec):
                    log.warning(
                        "listener %s (%s on %s:%d) %s, and no authorizer is set: every client that connects "
                        "may create, delete, read and write every topic (set authorizer_class_name, or serve "
                        "--authorizer, with super_users)",
                        spec.name, spec.protocol, spec.host or "*", spec.port, why,
                    )  # fmt: skip
        log.info(
            "logbroker serving %d listener(s), data in %s, fsync=%s, authorizer %s%s",
            len(self.listeners),
            self.settings.data_dir,
            self.settings.fsync.value,
            "on (ACLs enforced)" if ctx.access.authorizer is not None else "off",
            "" if ctx.clean_start else " (recovered after unclean shutdown)",
        )
        self.started.set()

    async def stop(self) -> None:
        """Stop accepting, let in-flight requests finish, sync everything, release the data dir."""
        if self.context.stopping:
            return
        self.context.begin_stopping()  # long polls answer now, so connections can drain
        for server in self._servers:
            server.close()
        for conn in list(self._connections):
            conn.stop_reading()
        deadline = time.monotonic() + 10
        while any(c.busy for c in self._connections) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for conn in list(self._connections):
            conn.close()
        for t in self._tasks:
            t.cancel()
        if self._unmute_timer is not None:
            self._unmute_timer.cancel()
        await self.context.close()
        await self._close_metrics()  # last: /ready answers 503 through the whole shutdown
        log.info("logbroker stopped cleanly")
        self._log_filter.uninstall()

    async def _close_metrics(self) -> None:
        if self.metrics_endpoint is not None:
            await self.metrics_endpoint.close()
            self.metrics_endpoint = None

    # ------------------------------------------------------------------ connection quotas and memory

    def admit(self, conn: ClientConnection) -> bool:
        """Count a new connection in, or say no (over max_connections or its address's limit)."""
        if self.context.stopping:
            return False
        host = conn.address
        self._follow_limits()
        limit = self._host_limits.get(host, self.settings.max_connections_per_ip)
        if len(self._connections) >= self.max_connections:
            reason = f"{len(self._connections)} connections open (max_connections={self.max_connections})"
        elif self._per_host.get(host, 0) >= limit:
            reason = f"{limit} connections from {host} already (max_connections_per_ip)"
        else:
            self._connections.add(conn)
            self._per_host[host] = self._per_host.get(host, 0) + 1
            self.stats["connections"] += 1
            self.metrics.listener(conn.listener.spec.name).accepted += 1
            return True
        self.stats["refused_connections"] += 1
        self.metrics.listener(conn.listener.spec.name).refused += 1
        log.warning("refusing connection from %s: %s", conn.peer, reason)
        return False

    def _follow_limits(self) -> None:
        """max.connections and max.connections.per.ip.overrides are dynamic broker configs: a change takes
        effect at the next connection (the descriptor cap still holds)."""
        now = (self.settings.max_connections, self.settings.max_connections_per_ip_overrides)
        if now == self._limits_from:
            return
        self._limits_from = now
        self.max_connections = min(now[0], self._fd_cap)
        try:
            self._host_limits = resolve_overrides(now[1])
        except ValueError as exc:  # checked when altered; a name that stopped resolving keeps the old map
            log.warning("max.connections.per.ip.overrides not applied: %s", exc)
        log.info("connection limits now: max_connections=%d, overrides=%r", self.max_connections, now[1])

    def release(self, conn: ClientConnection) -> None:
        if conn in self._connections:
            self._connections.discard(conn)
            n = self._per_host.get(conn.address, 1) - 1
            if n > 0:
                self._per_host[conn.address] = n
            else:
                self._per_host.pop(conn.address, None)

    def account(self, delta: int) -> None:
        """Bytes held for requests and answers changed by `delta`. Over `max_inflight_bytes`, connections
        that hold any stop taking requests until the total is back under three quarters of it; clients
        that read their answers drain at once and go on, so those that do not cannot starve them."""
        self.inflight += delta
        limit = self.settings.max_inflight_bytes
        if not self.muted and self.inflight > limit and self._recount() > limit:
            self.muted = True
            self.stats["mutes"] += 1
            log.warning(
                "pausing connections that hold answers: %d bytes of requests and unsent responses "
                "(max_inflight_bytes=%d)",
                self.inflight,
                limit,
            )
            for conn in list(self._connections):
                conn.update_reading()
            self._schedule_unmute()

    def _recount(self) -> int:
        self.inflight = sum(c.refresh_held() for c in self._connections)
        return self.inflight

    def _schedule_unmute(self) -> None:
        if self._unmute_timer is None:
            self._unmute_timer = asyncio.get_running_loop().call_later(0.02, self._try_unmute)

    def _try_unmute(self) -> None:
        """Transports drain without a callback below their own limit: recount until under the bound,
        resuming each connection that has drained meanwhile."""
        self._unmute_timer = None
        if not self.muted:
            return
        if self._recount() <= self.settings.max_inflight_bytes * 3 // 4:
            self.muted = False
            log.info("connections resumed: %d bytes in flight", self.inflight)
        else:
            self._schedule_unmute()
        for conn in list(self._connections):
            conn.update_reading()

    async def _housekeeping(self) -> None:
        """Connection timeouts every second; pooled buffers left idle by a burst every
        `BUFFER_TRIM_INTERVAL_S`; retention every `retention_check_interval_ms`."""
        interval = self.settings.retention_check_interval_ms / 1000
        last_retention = last_trim = time.monotonic()
        while True:
            await asyncio.sleep(min(interval, 1.0))
            now = time.monotonic()
            for conn in list(self._connections):
                conn.check_timeouts(now)
            if now - last_trim >= BUFFER_TRIM_INTERVAL_S:
                last_trim = now
                self.context.trim_buffers()
            if now - last_retention >= interval:
                last_retention = now
                deleted = self.context.enforce_retention()
                if deleted:
                    log.info("retention deleted %d segments", deleted)


_CLOSE = memoryview(b"")  # a request's "answer" that closes the connection instead


@dataclass(frozen=True, slots=True)
class _Last:
    """An answer after which the connection closes (a failed authentication's)."""

    frame: memoryview


# Answers smaller than this that are due together go out in one send (`ClientConnection._drain`).
COALESCE_MAX = 16 << 10


class ClientConnection(asyncio.BufferedProtocol):
    """One client socket: pipelined requests are handled concurrently and answered in arrival order.

    A buffered protocol: the kernel writes received bytes straight into the codec's buffers. The
    connection stops taking requests (reads paused, buffered frames left unparsed: Kafka "mutes" the
    channel) while too much is in progress: `max_pipelined_requests` requests (until half of them are
    answered), an exclusive request (Fetch), a request frame's worth of request bytes, more than
    `connection_max_unsent_bytes` of answers the client has not read, or the broker-wide bound. Memory
    per connection stays bounded whatever the client sends or fails to read."""

    LAZY_PAUSE = True  # see update_reading

    def __init__(self, broker: Broker, listener: ListenerRuntime | None = None) -> None:
        self.broker = broker
        self.serial = next(_SERIALS)
        ctx = broker.context
        self.listener = listener or broker.listeners[0]
        self.codec = ServerConnection(
            ctx.apis, broker.settings.socket_request_max_bytes, ctx.frame_buffers, ctx.request_buffers
        )
        self.principal = ANONYMOUS
        self.sasl: SaslSession | None = None
        self._auth_failed = False  # stop reading: the connection closes once its failure answer is sent
        self.transport: asyncio.Transport | None = None
        self.pending: deque[asyncio.Future[memoryview | None]] = deque()
        self.peer = "?"
        self.address = ""
        self.host = ""
        self.last_activity = time.monotonic()
        self.partial_since: float | None = None
        self._reading = True  # frame parsing on (requests taken)
        self._paused = False  # the transport told to stop reading (see update_reading)
        self._eof = False  # the client ended its stream with requests pending (eof_received)
        self._write_paused = False
        self._closed = False
        self._stopped = False
        self._admitted = False
        self._exclusive = 0  # exclusive requests in progress
        self._request_bytes = 0  # frames of requests in progress
        self._unsent = 0  # the transport's unsent bytes, as last seen
        self._held = 0  # what this connection counts in the broker's `inflight`
        self._metrics = broker.metrics
        self._stats = broker.metrics.listener(self.listener.spec.name)
        # Per request in progress: [its API's stats, received, handler started, answer ready, remote seconds].
        self._timing: dict[asyncio.Future[Any], list[Any]] = {}
        self._splice: asyncio.Task[None] | None = None  # an answer going out from its files (sendfile)
        self._outbox: list[memoryview] = []  # small answers due, sent together (`_drain`)
        self._flush_soon: asyncio.Handle | None = None
        # Made by the loop's protocol factory: kept, since every get_running_loop() is a getpid(2) on 3.11.
        self._loop = asyncio.get_running_loop()

    # ------------------------------------------------------------------ asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if self._opened(transport):
            self._established()

    def _opened(self, transport: asyncio.Transport) -> bool:
        """The socket is connected: admit it (or close it) and set it up; False when refused."""
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.address = peer[0] if peer else ""
        self.host = f"/{peer[0]}" if peer else ""
        if not self.broker.admit(self):
            self._closed = True
            transport.abort()
            return False
        self._admitted = True
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # pause_writing past the per-connection bound, resume_writing once everything is sent.
        transport.set_write_buffer_limits(high=self.broker.settings.connection_max_unsent_bytes, low=0)
        return True

    def _established(self) -> None:
        """The connection carries requests now (after the TLS handshake, on a TLS listener): its principal
        from the client certificate, and a SASL exchange to come on a SASL listener."""
        transport = self.transport
        assert transport is not None
        lst = self.listener
        if lst.mapper is not None:
            try:
                self.principal = certificate_principal(transport.get_extra_info("ssl_object"), lst.mapper)
            except (LookupError, ValueError) as exc:
                self._stats.failed_auth += 1
                log.info("Failed authentication with %s (listener %s): %s", self.host, lst.spec.name, exc)
                self._fail()
                return
            self._stats.succeeded_auth += 1
        log.debug("connection from %s opened on listener %s (%s)", self.peer, lst.spec.name, self.principal)
        if lst.spec.sasl:
            users = self.broker.context.access.users
            self.sasl = SaslSession(
                lst.mechanisms, lst.plain_check or plain_checker({}), users.credential, lst.reauth_ms
            )
            # Before authentication a frame may only be as large as a SASL token (Kafka's
            # sasl.server.max.receive.size): an unauthenticated client cannot make the broker hold 100 MB.
            self.codec.max_request_bytes = min(
                self.broker.settings.sasl_server_max_receive_size, self.codec.max_request_bytes
            )

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self.broker.context.connection_closed(self.serial)
        if self._admitted:
            self._admitted = False
            self.broker.release(self)
            self.broker.account(-self._held)
            self._held = self._unsent = 0
            self._stats.closed += 1
            log.debug(
                "connection from %s closed on listener %s (%s)%s",
                self.peer,
                self.listener.spec.name,
                self.principal,
                f": {exc}" if exc is not None else "",
            )
        for fut in self.pending:
            fut.cancel()
        self.pending.clear()
        self._timing.clear()
        self._outbox.clear()
        if self._flush_soon is not None:
            self._flush_soon.cancel()
            self._flush_soon = None
        if self._splice is not None:
            self._splice.cancel()
        # The TLS transport's protocol keeps this one's bound methods (get_buffer, buffer_updated) after the
        # close: holding the transport would make a cycle that only the collector frees, and it holds a 256 KiB
        # read buffer per connection (a handshake flood grew RSS ~290 KB per connection).
        self.transport = None

    def pause_writing(self) -> None:
        self._write_paused = True
        self._track_unsent()
        self.update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._track_unsent()
        self.update_reading()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.codec.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self.last_activity = time.monotonic()
        self.codec.buffer_updated(nbytes)
        if not self._reading and not self._paused and self.transport is not None:
            self._paused = True  # bytes while muted: now the transport stops (update_reading)
            self.transport.pause_reading()
        self._parse()

    def eof_received(self) -> bool:
        if self.codec.buffered:
            log.info("connection from %s closed with %d bytes of an incomplete request", self.peer, self.codec.buffered)
        if self.pending and not self._closed:
            # Requests taken before the client's end of stream are answered first, then the connection closes
            # (`_drain`), as Kafka does (it reads the end only once the muted channel's answer is out).
            self._eof = True
            return True
        # The transport closes once we return False, after what it still has to write.
        return False

    # ------------------------------------------------------------------ back-pressure

    def _may_read(self) -> bool:
        s = self.broker.settings
        return not (
            self._closed
            or self._stopped
            or self._auth_failed
            or self._exclusive
            or self._write_paused
            or self._splice is not None
            or (self.broker.muted and self._held > 0)
            or len(self.pending) >= (s.max_pipelined_requests if self._reading else self._resume_pipelined)
            or self._request_bytes >= s.socket_request_max_bytes
        )

    @property
    def _resume_pipelined(self) -> int:
        """A connection paused at `max_pipelined_requests` resumes once half are answered, not at the first:
        a client that keeps more in flight (librdkafka: up to a million) would otherwise flip reading off
        and on (an epoll_ctl each) around every answer, a quarter of the loop's time on one-record produces
        (design.md, "Pipelined one-record produces")."""
        return max(1, self.broker.settings.max_pipelined_requests // 2)

    def update_reading(self) -> None:
        """Pause or resume taking requests after anything that bears on `_may_read` changed.

        Muted for its own request flow (`_lazy_mute`), a plain connection stops parsing at once but leaves the
        transport reading until bytes arrive (`buffer_updated` pauses it then, one read later): a client that
        waits for its answer before it asks again, as every consumer does with its fetches (Fetch is
        exclusive), would otherwise cost an epoll_ctl pair and the selector's bookkeeping per request. TLS
        pauses at once: its ciphertext would pile up in the session, which `buffer_updated` never sees."""
        t = self.transport
        if t is None or self._closed:
            return
        if self._may_read():
            if not self._reading:
                self._reading = True
                if self._paused:
                    self._paused = False
                    t.resume_reading()
                self._parse()  # frames that arrived before the pause
        elif self._reading:
            self._reading = False
            self.broker.stats["mutes"] += 1
            self._stats.mutes += 1
            if not self._lazy_mute():
                self._paused = True
                t.pause_reading()

    def _lazy_mute(self) -> bool:
        """Whether a mute may leave the transport reading (`update_reading`): only for the connection's own
        request flow (an exclusive request, a splice, the pipelining bound) with nothing buffered; a mute for
        memory (the broker-wide bound, unread answers, request bytes) or a stop pauses it at once."""
        return (
            self.LAZY_PAUSE
            and not self.codec.buffered
            and not (self.broker.muted or self._write_paused or self._stopped or self._auth_failed)
            and self._request_bytes < self.broker.settings.socket_request_max_bytes
        )

    def _parse(self) -> None:
        completed = False
        try:
            while self._may_read():
                req = self.codec.next_event()
                if req is None:
                    break
                completed = True
                if self.sasl is None:
                    self._dispatch(req)
                else:
                    self._sasl_event(req)
        except ProtocolError as exc:
            self.broker.stats["protocol_errors"] += 1
            self._stats.protocol_errors += 1
            if isinstance(exc, FrameTooLarge) and exc.size >> 16 == _TLS_RECORD and not self.listener.tls:
                log.warning(
                    "closing connection from %s: a TLS handshake on listener %s, which is %s (%s)",
                    self.peer,
                    self.listener.spec.name,
                    self.listener.spec.protocol,
                    exc,
                )
            elif self.sasl is not None and self.sasl.in_exchange:
                self._stats.failed_auth += 1
                log.info("Failed authentication with %s (listener %s): %s", self.host, self.listener.spec.name, exc)
            else:
                log.warning("closing connection from %s: %s", self.peer, exc)
            self._fail()
            return
        # The clock starts when a request's first bytes arrive, not at its latest chunk: a client trickling
        # a byte at a time must not hold the connection (and its buffer) past request_timeout_ms.
        if not self.codec.buffered:
            self.partial_since = None
        elif completed or self.partial_since is None:
            self.partial_since = time.monotonic()
        self.update_reading()

    def refresh_held(self) -> int:
        """Recount what this connection holds (the broker's exact recount)."""
        self._track_unsent(account=False)
        self._held = self._request_bytes + self._unsent
        return self._held

    def _track_unsent(self, account: bool = True) -> None:
        t = self.transport
        self._unsent = t.get_write_buffer_size() if t is not None and not self._closed else 0
        if account:
            held = self._request_bytes + self._unsent
            delta, self._held = held - self._held, held
            if delta:
                self.broker.account(delta)

    # ------------------------------------------------------------------ SASL

    def _sasl_event(self, event: Request | RawFrame) -> None:
        """A request or raw frame on a SASL listener: the authenticator's while the exchange is on (or a
        re-authentication begins), the handlers' after it; a session past its lifetime is closed."""
        sasl = self.sasl
        assert sasl is not None
        if isinstance(event, RawFrame):
            self._sasl_answer(None, sasl.on_token(event.data))
            return
        if not sasl.in_exchange:
            if event.api_key == ApiKey.SaslHandshake and sasl.may_reauthenticate():
                sasl.begin_reauthentication()
            elif sasl.expired():
                log.info("closing connection from %s: its SASL session expired (%s)", self.peer, self.principal)
                self._fail()
                return
            else:
                self._dispatch(event)
                return
        outcome = sasl.on_request(event)
        if outcome.dispatch:
            self._dispatch(event)
        else:
            self._sasl_answer(event, outcome)

    def _sasl_answer(self, req: Request | None, out: Outcome) -> None:
        sasl = self.sasl
        assert sasl is not None
        frame: memoryview | None = None
        if req is not None:
            self._metrics.request(req)
        if out.response is not None and req is not None:
            frame = self.codec.encode_response(req, out.response)
        elif out.raw is not None:
            frame = self.codec.encode_raw(out.raw)
        if out.authenticated:
            assert sasl.principal is not None
            self.principal = sasl.principal
            self.codec.max_request_bytes = self.broker.settings.socket_request_max_bytes
            self._stats.succeeded_auth += 1
            log.debug("%s authenticated as %s with %s", self.peer, self.principal, sasl.mechanism_name)
        if sasl.raw and sasl.in_exchange:
            self.codec.expect_raw(1)
        fut: asyncio.Future[Any] = self._loop.create_future()
        self.pending.append(fut)
        if out.failure is not None:
            self._auth_failed = True
            self._stats.failed_auth += 1
            detail = out.failure.detail
            log.info("Failed authentication with %s (listener %s): %s", self.host, self.listener.spec.name, detail)
            delay = self.broker.settings.connection_failed_authentication_delay_ms / 1000
            # Kafka delays a failed authentication's answer and close (connection.failed.authentication.
            # delay.ms): a client guessing passwords gets one try per connection and per delay.
            result: Any = _Last(frame) if frame is not None else _CLOSE
            self._loop.call_later(delay, self._settle, fut, result)
        elif out.close:
            fut.set_result(_CLOSE)
        else:
            fut.set_result(frame)
        self._drain()

    def _settle(self, fut: asyncio.Future[Any], result: Any) -> None:
        if not fut.done():
            fut.set_result(result)
            self._drain()

    # ------------------------------------------------------------------ request flow

    def _dispatch(self, req: Request) -> None:
        self.broker.stats["requests"] += 1
        started = time.monotonic()
        stats = self._metrics.request(req)
        req.client_host = self.host
        req.client_address = self.address
        req.connection_id = self.serial
        req.principal = self.principal
        req.listener = self.listener.spec.name
        handler = self.broker._handlers.get(req.api_key)
        fut: asyncio.Future[memoryview | None] = self._loop.create_future()
        self.pending.append(fut)
        # Received no later than the last bytes read: a request parsed once reading resumed has waited behind
        # the connection's earlier ones (an exclusive Fetch, the pipelining or memory bounds) since then.
        self._timing[fut] = [stats, self.last_activity, started, 0.0, 0.0]
        if handler is None:  # registered in the codec but no handler: cannot happen for advertised APIs
            self.codec.release(req)
            fut.set_exception(ProtocolError(f"no handler for API key {req.api_key}"))
            self._drain()
            return
        exclusive = handler.exclusive
        busy = req.api_key != ApiKey.Fetch  # a fetch mostly waits (long polls): it shares no fsync round
        self._begin(req.size, exclusive, busy)
        try:
            result = handler.fn(self.broker.context, req)
        except Exception as exc:
            self._end(req.size, exclusive, busy)
            self.codec.release(req)
            fut.set_exception(exc)
            self._drain()
            return
        if isinstance(result, Awaitable):
            task = asyncio.ensure_future(result, loop=self._loop)
            task.add_done_callback(lambda t, f=fut, r=req, x=exclusive, b=busy: self._complete(f, r, t, x, b))
        else:
            self._end(req.size, exclusive, busy)
            self.codec.release(req)
            self._finish(fut, req, result)

    def _begin(self, size: int, exclusive: bool, busy: bool) -> None:
        self.broker.context.busy_requests += busy
        self._request_bytes += size
        self._exclusive += exclusive
        self._held += size
        self.broker.account(size)

    def _end(self, size: int, exclusive: bool, busy: bool) -> None:
        self.broker.context.busy_requests -= busy
        self._request_bytes -= size
        self._exclusive -= exclusive
        if self._closed:
            return
        self._held -= size
        self.broker.account(-size)

    def _complete(
        self,
        fut: asyncio.Future[memoryview | None],
        req: Request,
        task: asyncio.Future[Any],
        exclusive: bool,
        busy: bool,
    ) -> None:
        self._end(req.size, exclusive, busy)
        self.codec.release(req)  # the handler is done with the request's frame
        remote = self._metrics.take_remote(task)
        if fut.done():
            return
        if task.cancelled():
            fut.cancel()
        elif task.exception() is not None:
            fut.set_exception(task.exception())  # type: ignore[arg-type]
        else:
            self._finish(fut, req, task.result(), remote)
            return
        self._drain()

    def _finish(self, fut: asyncio.Future[memoryview | None], req: Request, response: Any, remote: float = 0.0) -> None:
        if fut.done():
            return
        try:
            if isinstance(response, NoResponse) and response.close:
                fut.set_result(_CLOSE)
            elif response is None or isinstance(response, NoResponse):
                fut.set_result(None)
            else:
                fut.set_result(self.codec.encode_response(req, response))
        except Exception as exc:
            if not fut.done():
                fut.set_exception(exc)
        now = 0.0
        timing = self._timing.get(fut)
        if timing is not None:  # the answer is ready (encoded): the handler's part is over
            timing[3] = now = time.monotonic()
            timing[4] = remote
        self._drain(now)

    def _drain(self, now: float = 0.0) -> None:
        """Send the answers that are due, in request order; `now`: the clock, if just read."""
        t = self.transport
        wrote = False
        while self._splice is None and self.pending and self.pending[0].done():
            fut = self.pending.popleft()
            timing = self._timing.pop(fut, None) if self._timing else None
            if fut.cancelled():
                continue
            exc = fut.exception()
            if exc is not None:
                log.error("request from %s failed: %s", self.peer, exc, exc_info=exc)
                self._fail()
                return
            frame = fut.result()
            if self._outbox and not (frame is not None and type(frame) is memoryview and len(frame) < COALESCE_MAX):
                self._flush()  # what is due before this answer goes first
            if isinstance(frame, _Last):
                if t is not None and not self._closed:
                    t.write(frame.frame)
                frame = _CLOSE
            if frame is _CLOSE:
                # Kafka reads a connection's requests one at a time, so nothing after this one is ever
                # answered: close once what came before is sent, and drop the rest.
                self._closed = True
                for later in self.pending:
                    later.cancel()
                self.pending.clear()
                self._timing.clear()
                if t is not None and not t.is_closing():
                    t.close()
                return
            if isinstance(frame, SplicedFrame):
                if t is None or self._closed:
                    frame.close()
                elif self.listener.tls:  # TLS encrypts in user space: the records are read, not spliced
                    try:
                        data = frame.materialize()
                    finally:
                        frame.close()
                    t.write(data)
                    wrote = True
                else:
                    wrote = True
                    try:
                        at = self._splice_now(t, frame)
                    except ConnectionError as exc:
                        frame.close()
                        log.debug("connection from %s closed by the client during a fetch answer: %s", self.peer, exc)
                        self._fail()
                        return
                    if at is None:  # all of it went at once: the usual case, no task, no loop round
                        frame.close()
                    else:
                        # Reading stays paused (as Kafka mutes a channel until its answer is out) and later
                        # answers wait: the splice task drains again when done.
                        self._splice = self._loop.create_task(self._send_spliced(frame, *at))
                        if timing is not None and timing[3]:
                            timing[0].record(timing, now or time.monotonic())
                        break
            elif frame is not None and t is not None and not self._closed:
                if len(frame) < COALESCE_MAX:
                    self._outbox.append(frame)
                else:
                    self._write(frame)
                    wrote = True
            if timing is not None and timing[3]:
                timing[0].record(timing, now or time.monotonic())
        if self._outbox and self._flush_soon is None:
            if self.pending and not self._closed:
                # More answers are on their way (pipelined requests finish together, as one fsync round
                # answers them all): they go out in one send a loop turn later, not a syscall each.
                self._flush_soon = self._loop.call_soon(self._flush_later)
            else:
                self._flush()
                wrote = True
        if wrote and not self._closed:
            self._track_unsent()
        self.update_reading()
        if self._eof and not self.pending and self._splice is None and t is not None and not self._closed:
            # The client ended its stream (eof_received) and every request it sent before is answered (the
            # frames still buffered were taken just above): close once the answers are out.
            self._flush()
            t.close()

    def _write(self, frame: memoryview) -> None:
        t = self.transport
        assert t is not None
        t.write(frame)  # sent at once when the socket takes it
        if not t.get_write_buffer_size():
            # All sent: the frame's buffer may be reused. Otherwise the transport keeps the rest
            # (Python 3.12+ keeps a view of it, not a copy): the buffer is left to it, not pooled.
            self.codec.sent(frame)

    def _flush(self) -> None:
        """Send the answers waiting in the outbox, in order: one write."""
        frames, self._outbox = self._outbox, []
        if self._flush_soon is not None:
            self._flush_soon.cancel()
            self._flush_soon = None
        t = self.transport
        if not frames or t is None or self._closed:
            return
        if len(frames) == 1:
            self._write(frames[0])
            return
        t.write(b"".join(frames))  # a copy: every frame's buffer may be reused at once
        for frame in frames:
            self.codec.sent(frame)

    def _flush_later(self) -> None:
        self._flush_soon = None
        if self._outbox and not self._closed:
            self._flush()
            self._track_unsent()
            self.update_reading()

    def _splice_now(self, t: asyncio.Transport, frame: SplicedFrame) -> tuple[int, int] | None:
        """Send as much of a spliced answer as the socket takes now, calling sendfile(2) directly; None once all
        of it went, else (part, bytes of that part sent) where `_send_spliced` goes on.

        A fetch answer of 1 MiB usually fits the socket's buffer: `loop.sendfile` would pause and resume
        reading (two epoll_ctl calls), wait on a future for the transport to drain and run as a task, about a
        quarter of the broker's user time per fetch under the Java consumer (design.md). Raises ConnectionError
        if the client went; any other error leaves the part to `_send_spliced`, which knows what to do."""
        parts = frame.parts
        sock = t.get_extra_info("socket")
        if sock is None:
            return 0, 0
        out = sock.fileno()
        for i, part in enumerate(parts):
            if t.is_closing():
                return i, 0
            if isinstance(part, memoryview):
                t.write(part)
                continue
            if t.get_write_buffer_size():  # bytes before this part still wait in the transport
                return i, 0
            pos, left = part.position, part.length
            while left:
                try:
                    n = os.sendfile(out, part.fd, pos, left)
                except (BlockingIOError, InterruptedError):
                    return i, part.length - left
                except ConnectionError:
                    raise
                except OSError:
                    return i, part.length - left
                if n == 0:  # the file is shorter than the range: `_send_spliced` reports it
                    return i, part.length - left
                pos += n
                left -= n
        return None

    async def _send_spliced(self, frame: SplicedFrame, start: int = 0, skip: int = 0) -> None:
        """Send an answer whose records go from their files to the socket (`loop.sendfile`: no copy in
        user space); its frame bytes go through the transport between them. From part `start`, of which
        `skip` bytes went already (`_splice_now`)."""
        t = self.transport
        loop = asyncio.get_running_loop()
        parts = frame.parts
        i = start
        try:
            while i < len(parts):
                part = parts[i]
                if t is None or self._closed or t.is_closing():
                    return
                if isinstance(part, memoryview):
                    t.write(part)
                    i += 1
                    continue
                done, skip = skip, 0
                with open(part.fd, "rb", buffering=0, closefd=False) as f:
                    try:
                        sent = done + await loop.sendfile(t, f, part.position + done, part.length - done,
                                                          fallback=False)  # fmt: skip
                    except asyncio.SendfileNotAvailableError:
                        # asyncio's word for any error before the first byte went (the errno is dropped): the
                        # client closed meanwhile (reads are paused during a fetch, so its close went unseen),
                        # or the kernel would not splice this file. Nothing went out in this call either way:
                        # the range from where `_splice_now` stopped is copied, then the rest of the frame.
                        if self._peer_gone(t):
                            raise ConnectionResetError("the client closed the connection") from None
                        rest = FileRange(None, part.fd, part.position + done, part.length - done, 0)
                        self._copy_out(t, [rest, *parts[i + 1 :]])
                        return
                if sent != part.length:  # the file shrank under us: the frame cannot be completed
                    raise OSError(f"sent {sent} of {part.length} stored bytes")
                i += 1
        except (OSError, RuntimeError) as exc:
            if not self._closed:
                if isinstance(exc, ConnectionError) or (t is not None and self._peer_gone(t)):
                    log.debug("connection from %s closed by the client during a fetch answer: %s", self.peer, exc)
                else:
                    log.warning("closing connection from %s: a fetch answer could not be sent: %s", self.peer, exc)
                self._fail()
        finally:
            frame.close()
            self._splice = None
            if not self._closed:
                self._track_unsent()
                self._drain()

    @staticmethod
    def _peer_gone(t: asyncio.Transport) -> bool:
        """Whether the client has closed or reset the connection (a peek at the socket; reading is paused
        while a fetch answer is being sent, so nothing else would have noticed)."""
        if t.is_closing():
            return True
        sock = t.get_extra_info("socket")
        if sock is None:
            return False
        try:
            with socket.socket(sock.family, sock.type, fileno=os.dup(sock.fileno())) as peek:
                return peek.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False  # open, nothing sent: alive
        except OSError:
            return True  # reset

    def _copy_out(self, t: asyncio.Transport, parts: list[Any]) -> None:
        """Send the rest of a spliced answer by copying its stored bytes (when the kernel would not splice)."""
        for part in parts:
            if isinstance(part, memoryview):
                t.write(part)
            else:
                buf = bytearray(len(part))
                part.read_into(memoryview(buf))
                t.write(buf)

    # ------------------------------------------------------------------ teardown

    @property
    def busy(self) -> bool:
        return bool(self.pending) or self._splice is not None

    def stop_reading(self) -> None:
        self._stopped = True
        self.update_reading()

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
            self._flush()
            self.transport.close()


HANDSHAKE_TIMEOUT_S = 10.0  # a TLS client that has not finished its handshake by then is cut off


class TlsClientConnection(ClientConnection):
    """A client connection on a TLS listener: the handshake and the record layer run here (`tlsconn`), then
    requests go as on any connection, through a `TlsTransport`. The connection counts against the connection
    limits from the TCP accept; its OpenSSL session (~60 KB once the handshake is under way) is made when the
    client's first bytes arrive, so connections accepted in a burst and not yet served cost only their
    Python objects, and it goes as soon as the connection closes."""

    LAZY_PAUSE = False  # see update_reading

    def __init__(self, broker: Broker, listener: ListenerRuntime) -> None:
        super().__init__(broker, listener)
        self._session: TlsSession | None = None
        self._raw: asyncio.Transport | None = None
        self._handshake_timer: asyncio.TimerHandle | None = None
        self._pumping = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._raw = transport
        if not self._opened(transport):
            return
        loop = asyncio.get_running_loop()
        self._handshake_timer = loop.call_later(HANDSHAKE_TIMEOUT_S, self._handshake_expired)

    def _end_handshake(self) -> None:
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()
            self._handshake_timer = None

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.broker.tls_inbox()

    def buffer_updated(self, nbytes: int) -> None:
        if self._session is None:  # the client's first bytes
            if self._closed:
                return
            assert self.listener.tls is not None
            self._session = TlsSession(self.listener.tls)
        self._session.feed(self.broker.tls_inbox()[:nbytes])
        self._pump()

    def _pump(self) -> None:
        """Move what arrived through the TLS session: the handshake, then plaintext into the request codec
        for as long as the connection takes requests."""
        session = self._session
        if session is None or self._pumping or self._raw is None:
            return
        self._pumping = True
        try:
            if not session.established:
                try:
                    done = session.handshake()
                except ssl.SSLError as exc:
                    self._send(session.outgoing())  # the alert that says why
                    self._handshake_failed(exc)
                    return
                self._send(session.outgoing())
                if not done:
                    return
                self._handshake_done()
            while self._reading and not self._closed and self._session is not None:
                try:
                    n = session.read_into(self.codec.get_buffer(-1))
                except ssl.SSLError as exc:
                    log.info("closing connection from %s: TLS stream damaged: %s", self.peer, exc.reason or exc)
                    self._fail()
                    return
                if n is None:  # close_notify: the client is done; ours answers it (clients wait for it)
                    session.close_notify()
                    self._send(session.outgoing())
                    self._raw.close()
                    return
                if n == 0:
                    break
                super().buffer_updated(n)
            self._send(session.outgoing())  # key updates, session tickets
        finally:
            self._pumping = False

    def _send(self, data: bytes) -> None:
        if data and self._raw is not None and not self._raw.is_closing():
            self._raw.write(data)

    def _handshake_done(self) -> None:
        assert self._session is not None and self._raw is not None
        self._end_handshake()
        self.last_activity = time.monotonic()
        self.transport = TlsTransport(self._raw, self._session, self._resumed)
        self._established()

    def _resumed(self) -> None:
        """Reading resumed: plaintext that arrived meanwhile waits in the session (no new bytes may come to
        call `buffer_updated`)."""
        if self._session is not None and self._session.buffered:
            asyncio.get_running_loop().call_soon(self._pump)

    def _handshake_failed(self, exc: ssl.SSLError) -> None:
        self._end_handshake()
        self._stats.failed_auth += 1
        log.info(
            "TLS handshake with %s on listener %s failed: %s", self.host or self.peer, self.listener.spec.name,
            exc.reason or exc.strerror or exc,
        )  # fmt: skip
        self._session = None
        self._closed = True
        if self._raw is not None:
            self._raw.close()  # after the alert

    def _handshake_expired(self) -> None:
        self._handshake_timer = None
        if not (self._session is not None and self._session.established) and not self._closed:
            log.info("closing connection from %s: no TLS handshake within %g s", self.peer, HANDSHAKE_TIMEOUT_S)
            self._stats.failed_auth += 1
            self._fail()

    def connection_lost(self, exc: Exception | None) -> None:
        self._end_handshake()
        super().connection_lost(exc)
        self._session = None
        self._raw = None

    def _fail(self) -> None:
        self._closed = True
        if self.transport is not None:
            self.transport.abort()
        elif self._raw is not None:
            self._raw.abort()

    def close(self) -> None:
        if self.transport is None and self._raw is not None:  # still in the handshake: nothing to flush
            self._closed = True
            self._raw.close()
            return
        super().close()


def raise_fd_limit() -> int:
    """Raise the soft limit on open files to the hard limit (as Kafka's start scripts advise); returns it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            log.info("open-file limit raised from %d to %d", soft, want)
            soft = want
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-file limit from %d: %s", soft, exc)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def resolve_overrides(value: str) -> dict[str, int]:
    """Per-address connection limits: host names resolve to every address they have, as Kafka does."""
    out: dict[str, int] = {}
    for host, count in parse_ip_overrides(value).items():
        try:
            infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
        except OSError as exc:
            log.warning("max_connections_per_ip_overrides: cannot resolve %s: %s", host, exc)
            continue
        for info in infos:
            out[str(info[4][0])] = count
    return out
