"""What handlers share about authorization: Kafka's cluster-level check and its message, and the
authorized-operations bitfields (Kafka's AuthHelper.authorizeClusterOperation / authorizedOperations).

Kafka's denial message embeds its own request object's toString (processor, connection id, buffers); the
part a client can act on is the end, "needs <OPERATION> permission.", which we keep verbatim and put our
request's session (principal, address, listener) in front of.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..seams import KAFKA_INTERNAL_TOPICS as _INTERNAL_TOPICS
from .acls import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from logbroker.protocol import Request

    from ..context import BrokerContext

__all__ = [
    "KAFKA_INTERNAL_TOPICS",
    "SUPPORTED_OPERATIONS",
    "alter_configs_denial",
    "authorized_operations",
    "cluster_allows",
    "cluster_denial",
    "denial_message",
    "describe_configs_denial",
]

_Op = AclOperation
# Kafka's AclEntry.supportedOperations: what an authorized-operations bitfield may contain per resource type.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (_Op.READ, _Op.WRITE, _Op.CREATE, _Op.DESCRIBE, _Op.DELETE, _Op.ALTER,
                         _Op.DESCRIBE_CONFIGS, _Op.ALTER_CONFIGS),
    ResourceType.GROUP: (_Op.READ, _Op.DESCRIBE, _Op.DELETE, _Op.DESCRIBE_CONFIGS, _Op.ALTER_CONFIGS),
    ResourceType.CLUSTER: (_Op.CREATE, _Op.CLUSTER_ACTION, _Op.DESCRIBE_CONFIGS, _Op.ALTER_CONFIGS,
                           _Op.IDEMPOTENT_WRITE, _Op.ALTER, _Op.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (_Op.DESCRIBE, _Op.WRITE, _Op.TWO_PHASE_COMMIT),
    ResourceType.DELEGATION_TOKEN: (_Op.DESCRIBE,),
    ResourceType.USER: (_Op.CREATE_TOKENS, _Op.DESCRIBE_TOKENS),
}  # fmt: skip
_ALL: dict[ResourceType, frozenset[int]] = {t: frozenset(map(int, ops)) for t, ops in SUPPORTED_OPERATIONS.items()}

# Topics Kafka treats as internal by name (Topic.isInternal): never writable into a transaction by a client.
KAFKA_INTERNAL_TOPICS = _INTERNAL_TOPICS  # re-exported: the handlers' checks name it here


def denial_message(req: Request, operation: AclOperation) -> str:
    """The message of Kafka's ClusterAuthorizationException for a request lacking `operation` on the cluster."""
    session = f"Session({req.principal},/{req.client_address})"
    listener = f"ListenerName({req.listener})"
    return f"Request Request(session={session}, listenerName={listener}) needs {operation.name} permission."


def cluster_denial(ctx: BrokerContext, req: Request, operation: AclOperation) -> str | None:
    """None when the request may do `operation` on the cluster (always, without an authorizer), else the
    message Kafka's CLUSTER_AUTHORIZATION_FAILED carries."""
    if ctx.access.authorize(req, operation, ResourceType.CLUSTER, CLUSTER_NAME):
        return None
    return denial_message(req, operation)


def authorized_operations(ctx: BrokerContext, req: Request, resource_type: ResourceType, name: str) -> frozenset[int]:
    """Kafka's authorizedOperations: the codes of the supported operations the principal may do on the
    resource (every supported one without an authorizer). The codec writes the set as Kafka's bitfield
    (1 << code each, Utils.to32BitField); None stands for "not requested" (-2147483648)."""
    if ctx.access.authorizer is None:
        return _ALL[resource_type]
    ops = SUPPORTED_OPERATIONS[resource_type]
    return frozenset(int(op) for op in ops if ctx.access.authorize(req, op, resource_type, name))


def cluster_allows(ctx: BrokerContext, req: Request, operation: AclOperation) -> bool:
    """`operation` on the cluster resource (Kafka's only cluster name, "kafka-cluster")."""
    return ctx.access.authorize(req, operation, ResourceType.CLUSTER, CLUSTER_NAME)


# DescribeConfigs / AlterConfigs resource types (Kafka's ConfigResource.Type ids).
CONFIG_TOPIC, CONFIG_BROKER, CONFIG_BROKER_LOGGER, CONFIG_CLIENT_METRICS, CONFIG_GROUP = 2, 4, 8, 16, 32
_E_TOPIC, _E_GROUP, _E_CLUSTER = 29, 30, 31  # TOPIC/GROUP/CLUSTER_AUTHORIZATION_FAILED


def describe_configs_denial(ctx: BrokerContext, req: Request, rtype: int, name: str) -> tuple[int, str] | None:
    """ConfigHelper's check for one DescribeConfigs resource: DESCRIBE_CONFIGS on the cluster (broker, broker
    logger, client metrics), the topic or the group; the refusal carries the error's default message."""
    if rtype == CONFIG_TOPIC:
        ok = ctx.access.authorize(req, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, name)
        return None if ok else (_E_TOPIC, "Topic authorization failed.")
    if rtype == CONFIG_GROUP:
        ok = ctx.access.authorize(req, AclOperation.DESCRIBE_CONFIGS, ResourceType.GROUP, name)
        return None if ok else (_E_GROUP, "Group authorization failed.")
    ok = ctx.access.authorize(req, AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME)
    return None if ok else (_E_CLUSTER, "Cluster authorization failed.")


def alter_configs_denial(ctx: BrokerContext, req: Request, rtype: int, name: str) -> tuple[int, str | None] | None:
    """The controller's authorizeAlterResource for one (Incremental)AlterConfigs resource: ALTER_CONFIGS on the
    cluster (broker, client metrics; no message), the topic or the group; broker loggers need CLUSTER_ACTION
    (RuntimeLoggerManager, checked first among its checks). None when allowed or for other types."""
    if rtype == CONFIG_TOPIC:
        ok = ctx.access.authorize(req, AclOperation.ALTER_CONFIGS, ResourceType.TOPIC, name)
        return None if ok else (_E_TOPIC, "Topic authorization failed.")
    if rtype == CONFIG_GROUP:
        ok = ctx.access.authorize(req, AclOperation.ALTER_CONFIGS, ResourceType.GROUP, name)
        return None if ok else (_E_GROUP, None)
    if rtype in (CONFIG_BROKER, CONFIG_CLIENT_METRICS):
        ok = ctx.access.authorize(req, AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME)
        return None if ok else (_E_CLUSTER, None)
    if rtype == CONFIG_BROKER_LOGGER:
        ok = ctx.access.authorize(req, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)
        return None if ok else (_E_CLUSTER, "Cluster authorization failed.")
    return None
