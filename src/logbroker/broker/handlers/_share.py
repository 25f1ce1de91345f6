"""What ShareFetch and ShareAcknowledge share: request checks and acknowledgement batches read as Kafka
reads them (KafkaApis.validateAcknowledgementBatches)."""

from __future__ import annotations

import uuid
from typing import Any

from logbroker.protocol import ErrorCode as E
from logbroker.protocol import Request

from ..auth.acls import AclOperation, ResourceType
from ..context import BrokerContext
from ..features import DISABLED_MESSAGE
from ..share.coordinator import MAX_MEMBER_ID
from ..share.partition import RENEW

Ack = tuple[str, int, list[Any]]  # (topic id, partition, its acknowledgement batches)
AckErrors = dict[tuple[str, int], tuple[int, str | None]]  # (topic id, partition) -> (code, message)


def refusal(ctx: BrokerContext, req: Request) -> tuple[E, str | None] | None:
    """Why the whole request is refused (Kafka's order: group id, member id, READ on the group), or None."""
    b = req.body
    if ctx.features.level("share.version") < 1:
        return E.UNSUPPORTED_VERSION, DISABLED_MESSAGE
    if not b.group_id:
        return E.INVALID_REQUEST, "Invalid group id"
    if not b.member_id or len(b.member_id) > MAX_MEMBER_ID:
        return E.INVALID_REQUEST, "Invalid member id"
    if not ctx.access.authorize(req, AclOperation.READ, ResourceType.GROUP, b.group_id):
        return E.GROUP_AUTHORIZATION_FAILED, None
    return None


def error_response(ctx: BrokerContext, req: Request, code: E, message: str | None) -> Any:
    """The answer to a refused request: the error, no topics."""
    ctx.metrics.errors(req.spec.key, [code])
    return req.spec.api.response(throttle_time_ms=0, error_code=int(code), error_message=message,
                                 acquisition_lock_timeout_ms=0, responses=[], node_endpoints=[])  # fmt: skip


def readable_acks(ctx: BrokerContext, req: Request, acks: list[Ack], errors: AckErrors) -> list[Ack]:
    """The acknowledgements of topics the principal may READ; the others get TOPIC_AUTHORIZATION_FAILED."""
    if ctx.access.authorizer is None or not acks:
        return acks
    names = ctx.share.topic_ids()
    readable = ctx.access.authorize_names(
        req, AclOperation.READ, ResourceType.TOPIC, {names.get(t, "") for t, _, _ in acks}
    )
    for tid, index, _b in acks:
        if names.get(tid, "") not in readable:
            errors[(tid, index)] = (int(E.TOPIC_AUTHORIZATION_FAILED), None)
    return [a for a in acks if (a[0], a[1]) not in errors]


def batches_error(batches: list[Any], version: int) -> str | None:
    """Why a partition's acknowledgement batches are malformed (INVALID_REQUEST for it), or None."""
    highest = RENEW if version >= 2 else RENEW - 1
    previous = -1
    for b in batches:
        if b.first_offset > b.last_offset:
            return "First offset of acknowledgement batch is greater than the last offset"
        if b.first_offset <= previous:
            return "Acknowledgement batches are not in order or overlap"
        previous = b.last_offset
        types = list(b.acknowledge_types)
        if not types:
            return "Acknowledge types must not be empty"
        if len(types) not in (1, b.last_offset - b.first_offset + 1):
            return "Acknowledge types count does not match the batch"
        if any(t < 0 or t > highest for t in types):
            return "Invalid acknowledge type"
    return None


def read_acks(topics: Any, version: int) -> tuple[list[Ack], dict[tuple[str, int], str]]:
    """The request's acknowledgements, and the partitions whose batches are malformed (with why)."""
    acks: list[Ack] = []
    bad: dict[tuple[str, int], str] = {}
    for t in topics:
        tid = str(t.topic_id)
        for p in t.partitions:
            batches = list(p.acknowledgement_batches or ())
            if not batches:
                continue
            why = batches_error(batches, version)
            if why is not None:
                bad[(tid, p.partition_index)] = why
            else:
                acks.append((tid, p.partition_index, batches))
    return acks, bad


NOT_HOSTED = "This server does not host this topic-partition."
ZERO_UUID = uuid.UUID(int=0)


def offsets_refusal(ctx: BrokerContext, req: Request, operation: AclOperation,
                    creates: bool = False) -> tuple[E, str | None] | None:  # fmt: skip
    """Alter/DeleteShareGroupOffsets' group checks (Kafka 4.4's order and messages), or None. `creates`
    (Alter): a group id no group has yet is a new, empty share group, as Kafka 4.4 makes its state (measured);
    one of another kind of group is GROUP_ID_NOT_FOUND."""
    gid = req.body.group_id
    if not ctx.access.authorize(req, operation, ResourceType.GROUP, gid):
        return E.GROUP_AUTHORIZATION_FAILED, None
    g = ctx.share.describe(gid)
    if g is None:
        if creates and not ctx.share.other_kind(gid):
            return None
        return E.GROUP_ID_NOT_FOUND, f"Group {gid} not found."
    if g.members:
        return E.NON_EMPTY_GROUP, "The group is not empty."
    return None
