"""One module per Kafka API; each exposes `handle(broker, request)` returning a response object,
an awaitable of one, or NO_RESPONSE."""

from __future__ import annotations

from typing import Any

from . import (
    api_versions,
    create_partitions,
    create_topics,
    delete_records,
    delete_topics,
    describe_cluster,
    describe_configs,
    fetch,
    init_producer_id,
    list_offsets,
    metadata,
    offset_for_leader_epoch,
    produce,
)

HANDLERS: dict[int, Any] = {
    0: produce.handle,
    1: fetch.handle,
    2: list_offsets.handle,
    3: metadata.handle,
    18: api_versions.handle,
    19: create_topics.handle,
    20: delete_topics.handle,
    21: delete_records.handle,
    22: init_producer_id.handle,
    23: offset_for_leader_epoch.handle,
    32: describe_configs.handle,
    37: create_partitions.handle,
    60: describe_cluster.handle,
}
