"""Time series behind the charts: broker totals turned into rates, and consumer groups' lag.

A background thread samples every `sample_seconds` while someone has looked at the console in the last
`IDLE_AFTER` seconds (an unwatched console costs the broker nothing). Three sources of broker totals:
the in-process broker (`serve --console`), another logbroker's Prometheus endpoint (`--metrics-url`), or,
for any Kafka cluster, what the admin API shows (log sizes and end offsets: produce rates, disk use).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import urllib.request
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from logbroker.console.cluster import Cluster

log = logging.getLogger("logbroker.console")

KEEP = 600  # points per series: 20 minutes at 2 s
IDLE_AFTER = 120.0
WATCH_GROUP_FOR = 600.0  # a group's lag is sampled this long after its page was last opened

Totals = dict[str, float]


def scrape(url: str, timeout: float = 2.0) -> Totals:
    """The totals from a logbroker's /metrics (Prometheus text)."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=timeout) as resp:
        text = resp.read().decode()
    out: Totals = {"log_bytes": 0.0, "bytes_in": 0.0, "bytes_out": 0.0, "messages_in": 0.0, "requests": 0.0,
                   "fsync_rounds": 0.0, "fsync_seconds": 0.0, "connections": 0.0}  # fmt: skip
    names = {"logbroker_topic_bytes_in_total": "bytes_in", "logbroker_topic_bytes_out_total": "bytes_out",
             "logbroker_topic_messages_in_total": "messages_in", "logbroker_requests_total": "requests",
             "logbroker_log_flush_seconds_count": "fsync_rounds", "logbroker_log_flush_seconds_sum": "fsync_seconds",
             "logbroker_log_size_bytes": "log_bytes", "logbroker_connections": "connections"}  # fmt: skip
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in names:
                out[names[s.name]] += s.value
    out["time"] = time.time()
    return out


def from_admin(cluster: Cluster) -> Totals:
    """What any Kafka cluster's admin API shows: bytes of partition logs (DescribeLogDirs) and the sum of
    end offsets (ListOffsets), whose growth is the produce rate in bytes and records."""
    from confluent_kafka.admin import OffsetSpec

    from logbroker.cli.groups import _offsets

    sizes = cluster.sizes()
    md = cluster.admin.metadata()
    tps = [(t.topic, p) for t in md.topics.values() for p in t.partitions]
    ends = _offsets(cluster.admin, tps, OffsetSpec.latest(), strict=False)
    return {"log_bytes": float(sum(sizes.values())), "messages_in": float(sum(ends.values())),
            "bytes_in": float(sum(sizes.values())), "time": time.time()}  # fmt: skip


class Sampler:
    def __init__(self, period: float, source: Callable[[], Totals | None], cluster: Callable[[], Cluster | None]):
        self.period, self._source, self._cluster = period, source, cluster
        self.series: dict[str, deque[tuple[float, float]]] = {}
        self.latest: Totals = {}
        self.error: str | None = None
        self._prev: Totals | None = None
        self._seen = 0.0
        self._groups: dict[str, float] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="console-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=5)

    def touch(self, group: str | None = None) -> None:
        """A page was looked at (and, with ``group``, that group's lag is wanted): sample from now on."""
        now = time.monotonic()
        first = now - self._seen > IDLE_AFTER
        self._seen = now
        if group is not None:
            first = first or group not in self._groups
            self._groups[group] = now
        if first:
            self._wake.set()

    def points(self, name: str) -> list[tuple[float, float]]:
        with self._lock:
            return list(self.series.get(name, ()))

    def _add(self, name: str, t: float, value: float) -> None:
        with self._lock:
            self.series.setdefault(name, deque(maxlen=KEEP)).append((t, value))

    def _run(self) -> None:
        while not self._stop.is_set():
            if time.monotonic() - self._seen <= IDLE_AFTER:
                try:
                    self.sample()
                    self.error = None
                except Exception as exc:  # a broker away or a refused call: shown on the page, tried again
                    self.error = str(exc) or type(exc).__name__
                    log.debug("console sample failed: %s", exc)
            else:
                self._prev = None  # no rate across an idle gap
            self._wake.wait(self.period)
            self._wake.clear()

    def sample(self) -> None:
        totals = self._source()
        if totals is not None:
            self._totals(totals)
        cluster = self._cluster()
        now = time.monotonic()
        watched = [g for g, seen in list(self._groups.items()) if now - seen <= WATCH_GROUP_FOR]
        if cluster is not None and watched:
            t = time.time()
            for group, lag in cluster.lags(watched).items():
                self._add(f"lag:{group}", t, float(lag))

    def _totals(self, cur: Totals) -> None:
        self.latest = cur
        t = cur["time"]
        prev, self._prev = self._prev, cur
        for gauge in ("log_bytes", "connections"):
            if gauge in cur:
                self._add(gauge, t, cur[gauge])
        if "disk_total" in cur:
            self._add("disk_used", t, cur["disk_total"] - cur["disk_free"])
        if prev is None or t <= prev["time"]:
            return
        dt = t - prev["time"]

        def rate(key: str) -> float | None:
            if key not in cur or key not in prev:
                return None
            return max(0.0, cur[key] - prev[key]) / dt

        for key, name, scale in (("bytes_in", "produce_mbps", 1e-6), ("bytes_out", "fetch_mbps", 1e-6),
                                 ("messages_in", "records_ps", 1.0), ("requests", "requests_ps", 1.0)):  # fmt: skip
            r = rate(key)
            if r is not None:
                self._add(name, t, r * scale)
        rounds = rate("fsync_rounds")
        if rounds is not None:
            secs = rate("fsync_seconds") or 0.0
            self._add("fsync_ms", t, secs / rounds * 1000 if rounds > 0 else 0.0)


def local_source(inspector: Any) -> Callable[[], Totals | None]:
    def read() -> Totals | None:
        with contextlib.suppress(RuntimeError):  # stopping
            return inspector.totals()  # type: ignore[no-any-return]
        return None

    return read
