"""A read-only window on a running broker for an in-process observer (the web console of
`serve --console`): running totals for its charts and the share-partitions' locks, which no Kafka API
shows. Everything is read on the broker's event loop (`BrokerMetrics.on_loop`), so the observer's thread
never sees state half-changed, and a busy loop is reported (`LoopBusy`) rather than waited for."""

from __future__ import annotations

import shutil
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .share.partition import ACKNOWLEDGED, ACQUIRED, ARCHIVED, AVAILABLE

if TYPE_CHECKING:
    from .context import BrokerContext

READ_TIMEOUT = 2.0


class BrokerInspector:
    def __init__(self, context: BrokerContext) -> None:
        self._ctx = context

    @property
    def data_dir(self) -> Path:
        return Path(self._ctx.settings.data_dir)

    def totals(self) -> dict[str, float]:
        """Counters since start (bytes in/out, records in, requests, fsync rounds and their seconds) and
        gauges (bytes of partition logs, connections, the data directory's file system)."""
        m = self._ctx.metrics

        def read() -> dict[str, float]:
            ctx = self._ctx
            out = {
                "bytes_in": float(sum(s.bytes_in for s in m.topics.values())),
                "messages_in": float(sum(s.messages_in for s in m.topics.values())),
                "bytes_out": float(sum(s.bytes_out for s in m.topics.values())),
                "requests": float(sum(sum(a.versions.values()) for a in m.apis.values())),
                "fsync_rounds": float(sum(c for c in m.flush.rounds.counts)),
                "fsync_seconds": m.flush.rounds.sum,
                "connections": float(sum(m.open_connections().values())),
                "log_bytes": 0.0,
            }
            if ctx.opened and not ctx.stopping:
                total = 0
                for meta in ctx.topics.all():
                    for i in range(meta.partitions):
                        plog = ctx.topics.log(meta.name, i)
                        if plog is not None:
                            total += plog.size_bytes
                out["log_bytes"] = float(total)
            return out

        out = m.on_loop(read, READ_TIMEOUT) if m.loop is not None else read()
        try:
            disk = shutil.disk_usage(self.data_dir)
            out["disk_total"], out["disk_free"] = float(disk.total), float(disk.free)
        except OSError:
            pass
        out["time"] = time.time()
        return out

    def share_locks(self, group_id: str) -> list[dict[str, Any]]:
        """Each share-partition of the group: its window [start, end), how many records are available,
        locked (acquired, by how many members, the soonest expiry), acknowledged and archived in it, and
        the delivery counts of the records not yet finished."""
        ctx = self._ctx

        def read() -> list[dict[str, Any]]:
            share = ctx.share
            names = share.topic_ids()
            rows = []
            now = time.monotonic()
            for (g, tid, p), sp in sorted(share.partitions.items()):
                if g != group_id:
                    continue
                states = Counter(s.state for s in sp.slots.values())
                locked = [s for s in sp.slots.values() if s.state == ACQUIRED]
                deliveries = Counter(s.count for s in sp.slots.values() if s.state in (AVAILABLE, ACQUIRED))
                rows.append({
                    "topic": names.get(tid, tid), "partition": p, "start": sp.start, "end": sp.end,
                    "available": states[AVAILABLE], "acquired": states[ACQUIRED],
                    "acknowledged": states[ACKNOWLEDGED], "archived": states[ARCHIVED],
                    "holders": len({s.owner for s in locked}),
                    "expires_in": min((s.deadline - now for s in locked), default=None),
                    "deliveries": sorted(deliveries.items()),
                    "max_deliveries": max((s.count for s in sp.slots.values()), default=0),
                })  # fmt: skip
            return sorted(rows, key=lambda r: (r["topic"], r["partition"]))

        return ctx.metrics.on_loop(read, READ_TIMEOUT)
