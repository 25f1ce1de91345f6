"""What several partition APIs share: the per-partition walk (each requested partition answered from its
log, or with UNKNOWN_TOPIC_OR_PARTITION and the API's "no value" fields when the broker has none), and the
check of a request's leader epoch."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from logbroker.protocol import ErrorCode as E

from ..context import BrokerContext
from ..seams import PartitionLog

# Kafka's MAX_PARTITIONS_PER_BATCH: partitions one request may create (CreateTopics, a streams group's topics).
MAX_PARTITIONS_PER_REQUEST = 10_000


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
            plog = ctx.topics.log(name, getattr(p, partition_field))
            rows.append(error(p, E.UNKNOWN_TOPIC_OR_PARTITION) if plog is None else answer(plog, p))
        out.append((name, rows))
    return out


LEADER_EPOCH = 0  # the one leader epoch every partition has here
NO_EPOCH = -1


def leader_epoch_error(current: int) -> E | None:
    """Kafka's check of a request's current_leader_epoch against the partition's: -1 skips it, an older
    epoch is FENCED_LEADER_EPOCH (any other negative one too), a newer one UNKNOWN_LEADER_EPOCH."""
    if current in (NO_EPOCH, LEADER_EPOCH):
        return None
    return E.FENCED_LEADER_EPOCH if current < LEADER_EPOCH else E.UNKNOWN_LEADER_EPOCH
