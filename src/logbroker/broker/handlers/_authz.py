"""What the data-plane, group and transaction handlers share for authorization: the operations a
principal holds on one resource (KIP-430's `authorized_operations` bitfields), and Kafka's names for
resources every broker has."""

from __future__ import annotations

from logbroker.protocol import Request

from ..auth.acls import CLUSTER_NAME, AclOperation, ResourceType
from ..context import BrokerContext

Op = AclOperation

# What Kafka answers authorized operations over, per resource type (AclEntry.supportedOperations).
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER, Op.DESCRIBE_CONFIGS,
                         Op.ALTER_CONFIGS),
    ResourceType.GROUP: (Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
    ResourceType.CLUSTER: (Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE,
                           Op.ALTER, Op.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (Op.DESCRIBE, Op.WRITE, Op.TWO_PHASE_COMMIT),
}  # fmt: skip
_ALL: dict[ResourceType, frozenset[int]] = {t: frozenset(map(int, ops)) for t, ops in SUPPORTED_OPERATIONS.items()}

# Topics Kafka treats as internal by name (Topic.isInternal): never writable into a transaction by a client.
KAFKA_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


def authorized_operations(ctx: BrokerContext, req: Request, rtype: ResourceType, name: str) -> frozenset[int]:
    """The operation codes of `rtype` the request's principal may do on `name` (Kafka's
    AuthHelper.authorizedOperations; everything the type supports without an authorizer)."""
    if ctx.authorizer is None:
        return _ALL[rtype]
    return frozenset(int(op) for op in SUPPORTED_OPERATIONS[rtype] if ctx.authorize(req, op, rtype, name))


def cluster_allows(ctx: BrokerContext, req: Request, operation: AclOperation) -> bool:
    """`operation` on the cluster resource (Kafka's only cluster name, "kafka-cluster")."""
    return ctx.authorize(req, operation, ResourceType.CLUSTER, CLUSTER_NAME)
