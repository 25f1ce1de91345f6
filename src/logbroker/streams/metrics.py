"""Prometheus metrics of one provider, on a registry of its own so several providers can share a process."""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, start_http_server

from logbroker.streams.errors import StreamsConfigError

log = logging.getLogger(__name__)


class StreamMetrics:
    """The Orleans provider's meters, counters, histograms and timers, as Prometheus series."""

    def __init__(self, port: int | None, host: str = "127.0.0.1", *, required: bool = True) -> None:
        """Serve ``/metrics`` on ``port`` (0: any free one, None: none).

        A busy port is a StreamsConfigError when the port was chosen (``required``); when it is only the
        default (20490), a warning, because a second provider on the host must still start: its series stay
        readable through ``metrics_text()``.
        """
        r = self.registry = CollectorRegistry()
        self.produced = Counter("logbroker_streams_produced_events", "events published", registry=r)
        self.consumed = Counter("logbroker_streams_consumed_events", "events fetched into caches", registry=r)
        self.evictions = Counter("logbroker_streams_cache_evictions", "messages that left a cache", registry=r)
        self.receivers = Gauge("logbroker_streams_active_receivers", "pulling agents in this process", registry=r)
        self.in_cache = Gauge("logbroker_streams_cache_messages", "messages cached", ["partition"], registry=r)
        self.pressure = Gauge("logbroker_streams_pressure_cursors", "cursors holding a full cache", ["partition"],
                              registry=r)  # fmt: skip
        self.paused = Gauge("logbroker_streams_fetch_paused", "1 while fetching is paused", ["partition"], registry=r)
        self.offset = Gauge("logbroker_streams_current_offset", "next offset to fetch", ["partition"], registry=r)
        self.lag = Gauge("logbroker_streams_lag", "high watermark minus current offset", ["partition"], registry=r)
        self.committed = Gauge("logbroker_streams_committed_offset", "last committed offset", ["partition"],
                               registry=r)  # fmt: skip
        self.implicit_active = Gauge("logbroker_streams_implicit_subscriptions",
                                     "implicit subscriptions active (not retired)", registry=r)  # fmt: skip
        self.implicit_retired = Counter("logbroker_streams_implicit_retirements",
                                        "implicit subscriptions retired after idling", registry=r)  # fmt: skip
        self.batch_size = Histogram("logbroker_streams_produce_batch_size",
                                    "messages per produce batch (acknowledged together, per partition)", registry=r,
                                    buckets=(1, 2, 5, 10, 50, 100, 500, 1000, 5000))  # fmt: skip
        self.per_fetch = Histogram("logbroker_streams_messages_per_fetch", "messages per fetch", registry=r,
                                   buckets=(0, 1, 5, 10, 50, 100, 500, 1000))  # fmt: skip
        self.produce_time = Histogram("logbroker_streams_produce_seconds",
                                      "produce batch: first publish to acknowledgement", registry=r)  # fmt: skip
        self.fetch_time = Histogram("logbroker_streams_fetch_seconds", "one fetch call", registry=r)
        self.commit_time = Histogram("logbroker_streams_commit_seconds", "one offset commit", registry=r)
        self.port: int | None = None
        if port is not None:
            try:
                server, _thread = start_http_server(port, addr=host, registry=r)
            except OSError as exc:
                msg = f"streams.metrics_port: cannot serve metrics on {host}:{port}: {exc.strerror or exc}"
                if required:
                    raise StreamsConfigError(msg + " (choose another port, 0 for any free one, or None)") from exc
                log.warning("%s; continuing without a metrics endpoint (set streams.metrics_port to 0 or None)", msg)
                return
            self.port = server.server_port
            self._server = server

    def text(self) -> str:
        return generate_latest(self.registry).decode()

    def close(self) -> None:
        if self.port is not None:
            self._server.shutdown()
            self._server.server_close()
