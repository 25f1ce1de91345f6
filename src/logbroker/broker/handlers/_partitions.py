"""The per-partition walk several APIs share: each requested partition is answered from its log, or
with UNKNOWN_TOPIC_OR_PARTITION (and the API's "no value" fields) when the broker has none."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from logbroker.protocol import ErrorCode as E
from logbroker.storage import PartitionLog

from ..context import BrokerContext


def by_partition(
    ctx: BrokerContext,
    topics: Iterable[Any],
    answer: Callable[[PartitionLog, Any], Any],
    error: Callable[[Any, E], Any],
    *,
    topic_field: str = "name",
    partition_field: str = "partition_index",
) -> list[tuple[str, list[Any]]]:
    """[(topic, [answer(log, p) or error(p, UNKNOWN_TOPIC_OR_PARTITION)])] in request order."""
    out = []
    for t in topics:
        name = getattr(t, topic_field)
        rows = []
        for p in t.partitions:
            plog = ctx.get_log(name, getattr(p, partition_field))
            rows.append(error(p, E.UNKNOWN_TOPIC_OR_PARTITION) if plog is None else answer(plog, p))
        out.append((name, rows))
    return out
