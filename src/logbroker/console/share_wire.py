"""ShareGroupDescribe (77) and DescribeShareGroupOffsets (90) over kafka-python's admin connection.

Neither admin library has a call for them yet; kafka-python builds a request class from a Kafka message
schema, so the broker's own copies of Kafka's schemas (`logbroker.protocol.schemas`) serve, and the request
goes to the group's coordinator on the admin client's connections (its TLS and SASL login included).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kafka.protocol.api_message import ApiMessage

from logbroker.console.errors import ConsoleError, code_name

if TYPE_CHECKING:
    from kafka.admin import KafkaAdminClient

_SCHEMAS = "logbroker.protocol.schemas"
TP = tuple[str, int]


@dataclass
class ShareMemberRow:
    member_id: str
    client_id: str
    host: str
    epoch: int
    assignment: list[TP]


@dataclass
class SharePartitionRow:
    topic: str
    partition: int
    start: int
    lag: int
    error: str | None = None


class ShareGroupDescribeRequest(ApiMessage, load_json=_SCHEMAS):
    pass


class ShareGroupDescribeResponse(ApiMessage, load_json=_SCHEMAS):
    pass


class DescribeShareGroupOffsetsRequest(ApiMessage, load_json=_SCHEMAS):
    pass


class DescribeShareGroupOffsetsResponse(ApiMessage, load_json=_SCHEMAS):
    pass


def describe(w: KafkaAdminClient, group_id: str) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        node = await w._find_coordinator_id(group_id)
        desc = await w._manager.send(
            ShareGroupDescribeRequest(group_ids=[group_id], include_authorized_operations=False), node_id=node
        )
        g = desc.groups[0]
        if g.error_code:
            raise ConsoleError(f"{code_name(g.error_code)}" + (f" ({g.error_message})" if g.error_message else ""),
                               403 if g.error_code in (30, 31) else 400)  # fmt: skip
        members = [
            ShareMemberRow(m.member_id, m.client_id, m.client_host, m.member_epoch,
                           sorted((tp.topic_name, p) for tp in m.assignment.topic_partitions for p in tp.partitions))
            for m in g.members
        ]  # fmt: skip
        offsets = await w._manager.send(
            DescribeShareGroupOffsetsRequest(
                groups=[
                    DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup(
                        group_id=group_id, topics=None
                    )
                ]
            ),
            node_id=node,
        )
        og = offsets.groups[0]
        if og.error_code:
            raise ConsoleError(code_name(og.error_code) + (f" ({og.error_message})" if og.error_message else ""),
                               403 if og.error_code in (30, 31) else 400)  # fmt: skip
        parts = [
            SharePartitionRow(t.topic_name, p.partition_index, p.start_offset, getattr(p, "lag", -1),
                              code_name(p.error_code) if p.error_code else None)
            for t in og.topics for p in t.partitions
        ]  # fmt: skip
        return {"group_id": group_id, "state": g.group_state, "epoch": g.group_epoch, "assignor": g.assignor_name,
                "members": members, "partitions": sorted(parts, key=lambda r: (r.topic, r.partition))}  # fmt: skip

    return w._manager.run(run)  # type: ignore[no-any-return]
