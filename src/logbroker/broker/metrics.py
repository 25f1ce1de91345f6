"""The broker's Prometheus metrics (Kafka's names, Prometheus' conventions) and its `/metrics`, `/health` and
`/ready` endpoint.

Kafka's JMX names map to snake_case series: BrokerTopicMetrics' BytesInPerSec becomes
`logbroker_topic_bytes_in_total{topic}` (a counter: Prometheus takes the rate), RequestMetrics' TotalTimeMs
`logbroker_request_total_time_seconds{api}` (a histogram in seconds), Log's Size
`logbroker_log_size_bytes{topic,partition}`, and so on (docs/design.md, "Metrics", has the table).

Each broker has a registry of its own (several brokers may live in one process). The hot paths (every
request, every produced batch, every fetched topic) only add to plain integers and lists on the event loop:
prometheus_client's own metric objects take a lock per update (0.3-0.7 us, for threads the broker does
not have), these cost about 0.1 us. One custom collector turns them into metric families at scrape time,
together with what is read from the broker's state then (log sizes and offsets, consumer lag, open
connections), so gauges over partitions and groups cost nothing per request.

The endpoint is prometheus_client's WSGI app under wsgiref, on threads of its own, so that `/ready` can
say 503 while the event loop is still busy opening storage; the collector itself runs on the event loop
(the HTTP thread hands it over and waits), where it reads state no other thread changes, and `/health` is
the event loop running a no-op in time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import socket
import threading
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, TypeVar
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.registry import Collector

from logbroker.config import parse_host_port
from logbroker.protocol import ApiKey, ErrorCode

if TYPE_CHECKING:
    from logbroker.protocol import Request

# The broker context is read at scrape time; it is typed loosely here because the context imports this
# module (through the flusher), and the broker's modules keep no import loop, not even for type checking.
BrokerContext = Any

log = logging.getLogger("logbroker.broker")
T = TypeVar("T")
SCRAPE_TIMEOUT = 10.0  # a scrape waits this long for the event loop to read the broker's state
HEALTH_TIMEOUT = 5.0  # /health: the event loop must run a no-op within this

# Request phases run from microseconds (an ApiVersions) to a long poll's max_wait_ms; fsync rounds from
# tens of microseconds (page cache on tmpfs) to seconds (a saturated disk).
LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    float("inf"),
)  # fmt: skip
_BUCKET_LABELS = tuple("+Inf" if b == float("inf") else repr(b) for b in LATENCY_BUCKETS)


class Timer:
    """A histogram's buckets and sum, updated by the event loop only (no lock)."""

    __slots__ = ("counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * len(LATENCY_BUCKETS)
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.sum += seconds

    def cumulative(self) -> list[tuple[str, float]]:
        out, total = [], 0
        for label, n in zip(_BUCKET_LABELS, self.counts, strict=True):
            total += n
            out.append((label, total))
        return out


class ApiStats:
    """One API's requests by version, the time of their phases (Kafka's RequestMetrics), and the error codes
    its answers carried (Kafka's ErrorsPerSec; counted for Produce and Fetch, per partition)."""

    __slots__ = ("errors", "local", "name", "queue", "remote", "response_queue", "total", "versions")

    def __init__(self, name: str) -> None:
        self.name = name
        self.versions: dict[int, int] = {}
        self.queue = Timer()  # received -> handled: reading paused behind the connection's earlier requests
        self.local = Timer()  # the handler's own work
        self.remote = Timer()  # waiting for others: the fsync round (Produce), new data (Fetch's long poll)
        self.response_queue = Timer()  # answer ready -> sent: behind the connection's earlier answers
        self.total = Timer()
        self.errors: dict[int, int] = {}

    def record(self, t: list[Any], sent: float) -> None:
        """One answered request's phases, from the server's [stats, received, started, ready, remote] and the
        time its answer went to the socket: written out, not five `observe` calls, as this runs per request."""
        _, received, started, ready, remote = t
        b = LATENCY_BUCKETS
        v = started - received
        h = self.queue
        h.counts[bisect_left(b, v)] += 1
        h.sum += v
        v = ready - started - remote
        h = self.local
        h.counts[bisect_left(b, v)] += 1
        h.sum += v
        h = self.remote
        h.counts[bisect_left(b, remote)] += 1
        h.sum += remote
        v = sent - ready
        h = self.response_queue
        h.counts[bisect_left(b, v)] += 1
        h.sum += v
        v = sent - received
        h = self.total
        h.counts[bisect_left(b, v)] += 1
        h.sum += v


class TopicStats:
    """Kafka's BrokerTopicMetrics of one topic: bytes and records appended, bytes fetched."""

    __slots__ = ("bytes_in", "bytes_out", "messages_in")

    def __init__(self) -> None:
        self.bytes_in = 0
        self.messages_in = 0
        self.bytes_out = 0


class ListenerStats:
    """Kafka's socket-server metrics of one listener (connection-creation-total, failed-authentication-total...)."""

    __slots__ = ("accepted", "closed", "failed_auth", "mutes", "protocol_errors", "refused", "succeeded_auth")

    def __init__(self) -> None:
        self.accepted = 0
        self.refused = 0
        self.closed = 0
        self.failed_auth = 0
        self.succeeded_auth = 0
        self.protocol_errors = 0
        self.mutes = 0  # reading a connection paused (back-pressure)


class FlushStats:
    """fdatasync rounds (Kafka's LogFlushStats.LogFlushRateAndTimeMs) and the produces they made durable."""

    __slots__ = ("errors", "rounds", "waiters")

    def __init__(self) -> None:
        self.rounds = Timer()
        self.waiters = 0
        self.errors = 0


class LoopBusy(Exception):
    """The broker's event loop did not run a call from the HTTP thread in time (or is gone)."""


class BrokerMetrics:
    """Everything one broker counts, and the registry that exposes it."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.apis: dict[int, ApiStats] = {}
        self.topics: dict[str, TopicStats] = {}
        self.listeners: dict[str, ListenerStats] = {}
        self.flush = FlushStats()
        # Seconds each handler task waited on others, for the server to take out of its local time.
        self._remote: dict[asyncio.Task[Any], float] = {}
        self.context: BrokerContext | None = None
        self.loop: asyncio.AbstractEventLoop | None = None  # the broker's, set when it starts
        # Set by the server: open connections by listener, and bytes of requests and answers in memory.
        self.open_connections: Callable[[], dict[str, int]] = dict
        self.inflight_bytes: Callable[[], int] = lambda: 0
        self.ready: Callable[[], bool] = lambda: False
        self.untrusted_stores: Callable[[], dict[str, str]] = dict  # security stores with damaged records
        self.registry.register(_BrokerCollector(self))
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)

    # ------------------------------------------------------------------ the hot paths

    def request(self, req: Request) -> ApiStats:
        """Count a request; its API's stats. Only requests the codec parsed get here, so the API and version
        are ones this broker serves (an unknown key or version closes the connection before counting)."""
        key = req.header.api_key
        stats = self.apis.get(key)
        if stats is None:
            stats = self.apis[key] = ApiStats(_api_name(key))
        # A too-new ApiVersions is answered (KIP-511) but its version can be any number: one label for them.
        v = req.header.api_version if req.version_error is None else -1
        versions = stats.versions
        versions[v] = versions.get(v, 0) + 1
        return stats

    def waited(self, seconds: float) -> None:
        """The running handler waited `seconds` on others (fsync, a long poll): Kafka's RemoteTimeMs."""
        task = asyncio.current_task()
        if task is not None:
            self._remote[task] = self._remote.get(task, 0.0) + seconds

    def take_remote(self, task: asyncio.Future[Any]) -> float:
        return self._remote.pop(task, 0.0) if self._remote else 0.0  # type: ignore[call-overload]

    def produced(self, topic: str, size: int, records: int) -> None:
        stats = self.topics.get(topic)
        if stats is None:
            stats = self.topics[topic] = TopicStats()
        stats.bytes_in += size
        stats.messages_in += records

    def fetched(self, sizes: Iterable[tuple[str, int]]) -> None:
        topics = self.topics
        for topic, size in sizes:
            stats = topics.get(topic)
            if stats is None:
                stats = topics[topic] = TopicStats()
            stats.bytes_out += size

    def errors(self, api_key: int, codes: Iterable[int]) -> None:
        """Count the error codes of an answer's partitions (0s are skipped)."""
        stats = self.apis.get(api_key)
        if stats is None:
            return
        errors = stats.errors
        for code in codes:
            if code:
                errors[code] = errors.get(code, 0) + 1

    def listener(self, name: str) -> ListenerStats:
        stats = self.listeners.get(name)
        if stats is None:
            stats = self.listeners[name] = ListenerStats()
        return stats

    def on_loop(self, fn: Callable[[], T], timeout: float) -> T:
        """`fn()` run on the broker's event loop (the only thread that touches its state); LoopBusy if the loop
        does not run it within `timeout` seconds."""
        loop = self.loop
        if loop is None:
            raise LoopBusy("the broker's event loop is not running")
        try:
            if asyncio.get_running_loop() is loop:
                return fn()
        except RuntimeError:
            pass  # no loop in this thread: the HTTP server's
        done: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            if done.set_running_or_notify_cancel():
                try:
                    done.set_result(fn())
                except BaseException as exc:
                    done.set_exception(exc)

        try:
            loop.call_soon_threadsafe(run)
            return done.result(timeout)
        except RuntimeError as exc:  # the loop is closed
            raise LoopBusy("the broker's event loop is closed") from exc
        except TimeoutError:
            done.cancel()
            raise LoopBusy(f"the broker's event loop did not answer within {timeout:g} s") from None

    def text(self) -> bytes:
        """The Prometheus text exposition (what `/metrics` answers a plain scraper)."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


def _api_name(key: int) -> str:
    """Kafka's name of an API, as its RequestMetrics `request` tag has it (Produce, Fetch...)."""
    try:
        return ApiKey(key).name
    except ValueError:
        return str(key)


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


class _BrokerCollector(Collector):
    """Turns the counters and the broker's state into metric families, at scrape time."""

    def __init__(self, metrics: BrokerMetrics) -> None:
        self.m = metrics

    def collect(self) -> Iterator[Metric]:
        m = self.m
        if m.loop is None:
            return iter(list(self._collect(m)))  # not started: nothing is shared with another thread yet
        return iter(m.on_loop(lambda: list(self._collect(m)), SCRAPE_TIMEOUT))

    def _collect(self, m: BrokerMetrics) -> Iterator[Metric]:
        yield from self._requests(m)
        yield from self._topics(m)
        yield from self._connections(m)
        flush = m.flush
        rounds = HistogramMetricFamily(
            "logbroker_log_flush_seconds", "fdatasync rounds and their duration (Kafka's LogFlushRateAndTimeMs)"
        )
        rounds.add_metric([], flush.rounds.cumulative(), flush.rounds.sum)
        yield rounds
        yield CounterMetricFamily(
            "logbroker_log_flush_waiters",
            "requests and internal writes made durable by fsync rounds (several share a round under fsync=always)",
            flush.waiters,
        )
        yield CounterMetricFamily("logbroker_log_flush_errors", "failed fdatasync rounds", flush.errors)
        ready = GaugeMetricFamily("logbroker_ready", "1 while the broker serves (storage open, listeners bound)")
        ready.add_metric([], 1.0 if m.ready() else 0.0)
        yield ready
        untrusted = m.untrusted_stores()
        stores = GaugeMetricFamily(
            "logbroker_security_store_untrusted",
            "1 while a security store (acls, users) has damaged records and is distrusted (see /health)",
            labels=["store"],
        )
        for name in ("acls", "users"):
            stores.add_metric([name], 1.0 if name in untrusted else 0.0)
        yield stores
        ctx = m.context
        if ctx is not None and m.ready():
            yield from self._state(ctx)

    @staticmethod
    def _requests(m: BrokerMetrics) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "logbroker_requests", "requests by API and version (Kafka's RequestsPerSec)", labels=["api", "version"]
        )
        errors = CounterMetricFamily(
            "logbroker_request_errors",
            "error codes in Produce and Fetch answers, per partition (Kafka's ErrorsPerSec)",
            labels=["api", "error"],
        )
        phases = {
            "queue": HistogramMetricFamily(
                "logbroker_request_queue_time_seconds",
                "received to handled: waiting behind the connection's earlier requests (Kafka's RequestQueueTimeMs)",
                labels=["api"],
            ),
            "local": HistogramMetricFamily(
                "logbroker_request_local_time_seconds", "the handler's own work (Kafka's LocalTimeMs)", labels=["api"]
            ),
            "remote": HistogramMetricFamily(
                "logbroker_request_remote_time_seconds",
                "waiting for the fsync round (Produce) or for data (Fetch long poll) (Kafka's RemoteTimeMs)",
                labels=["api"],
            ),
            "response_queue": HistogramMetricFamily(
                "logbroker_response_queue_time_seconds",
                "answer ready to sent: waiting behind the connection's earlier answers (Kafka's ResponseQueueTimeMs)",
                labels=["api"],
            ),
            "total": HistogramMetricFamily(
                "logbroker_request_total_time_seconds",
                "received to answer handed to the socket (Kafka's TotalTimeMs)",
                labels=["api"],
            ),
        }
        for stats in list(m.apis.values()):
            for v, n in list(stats.versions.items()):
                requests.add_metric([stats.name, str(v) if v >= 0 else "unsupported"], n)
            for code, n in list(stats.errors.items()):
                errors.add_metric([stats.name, _error_name(code)], n)
            for phase, family in phases.items():
                timer: Timer = getattr(stats, phase)
                family.add_metric([stats.name], timer.cumulative(), timer.sum)
        yield requests
        yield errors
        yield from phases.values()

    @staticmethod
    def _topics(m: BrokerMetrics) -> Iterator[Metric]:
        ctx = m.context
        families = (
            ("bytes_in", "logbroker_topic_bytes_in", "bytes of record batches appended (Kafka's BytesInPerSec)"),
            ("messages_in", "logbroker_topic_messages_in", "records appended (Kafka's MessagesInPerSec)"),
            ("bytes_out", "logbroker_topic_bytes_out", "bytes of record batches fetched (Kafka's BytesOutPerSec)"),
        )
        out = [CounterMetricFamily(name, doc, labels=["topic"]) for _, name, doc in families]
        for topic, stats in list(m.topics.items()):
            if ctx is not None and m.ready() and ctx.topics.get(topic) is None:
                del m.topics[topic]  # deleted: its series go, as Kafka removes a deleted topic's metrics
                continue
            for (attr, _, _), family in zip(families, out, strict=True):
                family.add_metric([topic], getattr(stats, attr))
        yield from out

    @staticmethod
    def _connections(m: BrokerMetrics) -> Iterator[Metric]:
        open_now = GaugeMetricFamily(
            "logbroker_connections", "open client connections (Kafka's connection-count)", labels=["listener"]
        )
        for name, n in sorted(m.open_connections().items()):
            open_now.add_metric([name], n)
        yield open_now
        families = (
            ("accepted", "logbroker_connections_accepted", "connections accepted (Kafka's connection-creation-total)"),
            ("refused", "logbroker_connections_refused", "connections refused: max_connections or per-address limits"),
            ("closed", "logbroker_connections_closed", "connections closed (Kafka's connection-close-total)"),
            ("failed_auth", "logbroker_failed_authentications", "failed TLS or SASL authentications"),
            ("succeeded_auth", "logbroker_successful_authentications", "TLS client certificates and SASL logins"),
            ("protocol_errors", "logbroker_protocol_errors", "connections closed for a request that cannot be served"),
            (
                "mutes",
                "logbroker_connection_mutes",
                "times a connection stopped being read: too many requests in "
                "progress, an exclusive request, unsent answers or the broker-wide memory bound",
            ),
        )
        for attr, name, doc in families:
            family = CounterMetricFamily(name, doc, labels=["listener"])
            for listener, stats in sorted(m.listeners.items()):
                family.add_metric([listener], getattr(stats, attr))
            yield family
        yield GaugeMetricFamily(
            "logbroker_inflight_bytes",
            "bytes of requests in progress and answers not yet sent, all connections (max_inflight_bytes bounds it)",
            m.inflight_bytes(),
        )

    @staticmethod
    def _state(ctx: BrokerContext) -> Iterator[Metric]:
        """Gauges read from the broker's state now (Kafka's Log and ReplicaManager metrics, consumer lag)."""
        labels = ["topic", "partition"]
        size = GaugeMetricFamily("logbroker_log_size_bytes", "bytes on disk (Kafka's Log Size)", labels=labels)
        end = GaugeMetricFamily(
            "logbroker_log_end_offset", "the next offset to write (Kafka's LogEndOffset)", labels=labels
        )
        start = GaugeMetricFamily("logbroker_log_start_offset", "the first offset kept (Kafka's LogStartOffset)",
                                  labels=labels)  # fmt: skip
        segments = GaugeMetricFamily("logbroker_log_segments", "segment files (Kafka's NumLogSegments)", labels=labels)
        topics = partitions = 0
        ends: dict[tuple[str, int], int] = {}
        for meta in ctx.topics.all():
            topics += 1
            for i in range(meta.partitions):
                plog = ctx.topics.log(meta.name, i)
                if plog is None:
                    continue
                partitions += 1
                key = [meta.name, str(i)]
                ends[(meta.name, i)] = leo = plog.next_offset
                size.add_metric(key, plog.size_bytes)
                end.add_metric(key, leo)
                start.add_metric(key, plog.log_start_offset)
                segments.add_metric(key, len(plog.segments))
        if ctx.scrubber is not None:
            sc = ctx.scrubber
            yield CounterMetricFamily("logbroker_scrubber_verified_bytes", "closed-segment bytes whose CRCs the "
                                      "scrubber verified", sc.bytes_verified)  # fmt: skip
            yield CounterMetricFamily("logbroker_scrubber_damaged_batches", "damaged stretches the scrubber found "
                                      "and quarantined", sc.damaged_found)  # fmt: skip
            yield GaugeMetricFamily("logbroker_quarantined_batches", "damaged stretches fenced off in the logs "
                                    "(readers step over them)", sc.quarantined())  # fmt: skip
        yield from _BrokerCollector._fetch_sessions(ctx)
        yield from _BrokerCollector._buffers(ctx)
        yield GaugeMetricFamily("logbroker_topics", "topics, internal ones included", topics)
        yield GaugeMetricFamily("logbroker_partitions", "partitions (Kafka's PartitionCount)", partitions)
        yield from (size, end, start, segments)
        labels = ["group", "topic", "partition"]
        committed = GaugeMetricFamily(
            "logbroker_consumer_group_committed_offset", "a group's committed offset", labels=labels
        )
        lag = GaugeMetricFamily(
            "logbroker_consumer_group_lag", "log end offset minus the group's committed offset", labels=labels
        )
        groups = ctx.groups.all_groups()
        for g in groups:
            for (topic, partition), c in list(g.offsets.items()):
                leo = ends.get((topic, partition))
                if leo is None or c.offset < 0:
                    continue
                key = [g.group_id, topic, str(partition)]
                committed.add_metric(key, c.offset)
                lag.add_metric(key, leo - c.offset)
        yield GaugeMetricFamily("logbroker_consumer_groups", "consumer groups, classic and KIP-848", len(groups))
        yield committed
        yield lag

    @staticmethod
    def _buffers(ctx: BrokerContext) -> Iterator[Metric]:
        """Warm buffers kept for reuse: memory the broker holds beyond its requests in progress."""
        count = GaugeMetricFamily("logbroker_pooled_buffers", "buffers kept warm for reuse", labels=["pool"])
        size = GaugeMetricFamily(
            "logbroker_pooled_buffer_bytes", "bytes of buffers kept warm for reuse", labels=["pool"]
        )
        pools = (("requests", ctx.request_buffers), ("responses", ctx.frame_buffers), ("reads", ctx.read_buffers))
        for name, pool in pools:
            count.add_metric([name], pool.pooled)
            size.add_metric([name], pool.pooled_bytes)
        yield count
        yield size

    @staticmethod
    def _fetch_sessions(ctx: BrokerContext) -> Iterator[Metric]:
        """Kafka's FetchSessionCache metrics, plus the incremental fetches served (that clients use them)."""
        cache = ctx.polls.sessions
        yield GaugeMetricFamily(
            "logbroker_incremental_fetch_sessions", "fetch sessions cached (Kafka's NumIncrementalFetchSessions)",
            len(cache),
        )  # fmt: skip
        yield GaugeMetricFamily(
            "logbroker_incremental_fetch_partitions_cached",
            "partitions in all fetch sessions (Kafka's NumIncrementalFetchPartitionsCached)",
            cache.partitions,
        )
        yield CounterMetricFamily(
            "logbroker_incremental_fetch_session_evictions",
            "sessions evicted for new ones (Kafka's IncrementalFetchSessionEvictionsPerSec)",
            cache.evictions,
        )
        yield CounterMetricFamily(
            "logbroker_incremental_fetch_sessions_created", "fetch sessions created", cache.created
        )
        yield CounterMetricFamily(
            "logbroker_incremental_fetches", "Fetch requests served in a session, epoch > 0", cache.incremental_fetches
        )


class _QuietHandler(WSGIRequestHandler):
    """wsgiref prints every request to stderr: scrapes and probes go to the debug log instead."""

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("metrics endpoint: %s: " + format, self.address_string(), *args)


class MetricsEndpoint:
    """`/metrics` (prometheus_client's WSGI app: text or OpenMetrics as the scraper asks, gzip), `/health` and
    `/ready`, served by wsgiref on threads of their own: `/ready` answers 503 while storage is still being
    opened (recovery blocks the event loop) and through shutdown, and a blocked loop is reported rather than
    waited for."""

    def __init__(self, metrics: BrokerMetrics) -> None:
        self.metrics = metrics
        self._wsgi = make_wsgi_app(metrics.registry)
        self._httpd: ThreadingWSGIServer | None = None
        self._thread: threading.Thread | None = None
        self.address: tuple[str, int] | None = None

    def start(self, listen: str) -> tuple[str, int]:
        """Bind and serve (OSError when the address cannot be bound)."""
        host, port = parse_host_port(listen, "metrics_listen")
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
        server_class = type("Server", (ThreadingWSGIServer,), {"address_family": family})
        httpd = make_server(host, port, self._app, server_class, _QuietHandler)
        self._httpd = httpd
        self.address = (host, int(httpd.server_address[1]))
        self._thread = threading.Thread(target=httpd.serve_forever, name="metrics-http", daemon=True)
        self._thread.start()
        log.info("metrics on http://%s:%d/metrics (and /health, /ready)", *self.address)
        return self.address

    async def close(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            await asyncio.to_thread(httpd.shutdown)  # returns once serve_forever has (up to its 0.5 s poll)
            httpd.server_close()

    def _app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "").rstrip("/")
        m = self.metrics
        if path == "/metrics":
            try:
                return self._wsgi(environ, start_response)  # type: ignore[no-any-return]
            except LoopBusy as exc:
                return _plain(start_response, HTTPStatus.SERVICE_UNAVAILABLE, f"{exc}\n")
        if environ["REQUEST_METHOD"] not in ("GET", "HEAD"):
            return _plain(start_response, HTTPStatus.METHOD_NOT_ALLOWED, "GET or HEAD\n")
        if path == "/health":
            try:
                m.on_loop(lambda: None, HEALTH_TIMEOUT)
            except LoopBusy as exc:
                return _plain(start_response, HTTPStatus.SERVICE_UNAVAILABLE, f"{exc}\n")
            untrusted = m.untrusted_stores()
            if untrusted:  # alive (restarting would not help), but not as configured: say so
                lines = "".join(f"untrusted {name} store: {what}\n" for name, what in sorted(untrusted.items()))
                return _plain(start_response, HTTPStatus.OK, "degraded\n" + lines)
            return _plain(start_response, HTTPStatus.OK, "ok\n")
        if path == "/ready":
            if m.ready():
                return _plain(start_response, HTTPStatus.OK, "ready\n")
            return _plain(start_response, HTTPStatus.SERVICE_UNAVAILABLE, "not ready\n")
        return _plain(start_response, HTTPStatus.NOT_FOUND, "/metrics, /health or /ready\n")


def _plain(start_response: Callable[..., Any], status: HTTPStatus, body: str) -> list[bytes]:
    data = body.encode()
    headers = [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(data)))]
    start_response(f"{status.value} {status.phrase}", headers)
    return [data]
