"""CreateAcls (30): add ACLs, durable before the answer, with Kafka's checks in Kafka's order.

v0-3 as Kafka 3.9 (Kafka 4 serves v1-3, KIP-896; a v0 creation has no pattern type and is LITERAL). A creation
with a zero (UNKNOWN) code does not parse: the connection is closed. ALTER on the cluster is needed, then an
authorizer (SECURITY_DISABLED without one). An ANY/MATCH element fails the whole request (Kafka's
ResourcePattern / AccessControlEntry constructors throw while it builds the bindings: UNKNOWN_SERVER_ERROR for
every entry, no message); the rest is refused per entry: the broker's CLUSTER-name and empty-name checks, then
the controller's validateNewAcl for codes Kafka does not know (INVALID_REQUEST "Invalid resourceType
UNKNOWN"...).
"""

from __future__ import annotations

import logging
from typing import Any

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import (
    CLUSTER_NAME,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    Refusal,
    ResourceType,
)
from ..auth.checks import cluster_denial
from ..context import NO_RESPONSE_CLOSE, BrokerContext, NoResponse
from ..dispatch import handles

log = logging.getLogger(__name__)
API = api(ApiKey.CreateAcls)
R = API.response
Result = R.AclCreationResult


def binding(c: Any) -> AclBinding:
    return AclBinding(
        ResourceType.from_code(c.resource_type),
        c.resource_name,
        PatternType.from_code(c.resource_pattern_type),
        c.principal,
        c.host,
        AclOperation.from_code(c.operation),
        AclPermissionType.from_code(c.permission_type),
    )


def unparsable(c: Any) -> bool:
    """Kafka's CreateAclsRequest.validate: a zero code in any element (only 0 itself; another unknown code
    parses and reads as UNKNOWN)."""
    return 0 in (c.resource_type, c.resource_pattern_type, c.operation, c.permission_type)


def _unbuildable(b: AclBinding) -> bool:
    return (
        b.resource_type == ResourceType.ANY
        or b.pattern_type in (PatternType.ANY, PatternType.MATCH)
        or b.operation == AclOperation.ANY
        or b.permission == AclPermissionType.ANY
    )


def _refusal(b: AclBinding) -> Refusal | None:
    """The broker's checks (AclApis), then the controller's (AclControlManager.validateNewAcl) for what
    reads as UNKNOWN; the model's validate_new_acl covers the rest when the ACLs are created."""
    if b.resource_type == ResourceType.CLUSTER and b.name != CLUSTER_NAME:
        return Refusal(E.INVALID_REQUEST, f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not b.name:
        return Refusal(E.INVALID_REQUEST, "Invalid empty resource name")
    for what, value in (
        ("resourceType", b.resource_type),
        ("patternType", b.pattern_type),
        ("operation", b.operation),
        ("permissionType", b.permission),
    ):
        if value.name == "UNKNOWN":
            return Refusal(E.INVALID_REQUEST, f"Invalid {what} UNKNOWN")
    return None


def _all(creations: Any, code: int, message: str | None) -> R:
    return R(throttle_time_ms=0, results=[Result(error_code=code, error_message=message) for _ in creations])


@handles(ApiKey.CreateAcls, 0, 3, kafka4_min=1, exclusive=True)
async def handle(ctx: BrokerContext, req: Request) -> R | NoResponse:
    creations = req.body.creations
    if any(unparsable(c) for c in creations):
        return NO_RESPONSE_CLOSE
    if (denied := cluster_denial(ctx, req, AclOperation.ALTER)) is not None:
        return _all(creations, E.CLUSTER_AUTHORIZATION_FAILED, denied)
    if ctx.access.authorizer is None:
        return _all(creations, E.SECURITY_DISABLED, "No Authorizer is configured.")
    bindings = [binding(c) for c in creations]
    if any(_unbuildable(b) for b in bindings):
        return _all(creations, E.UNKNOWN_SERVER_ERROR, None)
    outcomes: list[Refusal | None] = [_refusal(b) for b in bindings]
    valid = [b for b, o in zip(bindings, outcomes, strict=True) if o is None]
    if valid:
        try:
            created = iter(await ctx.access.create_acls(valid))
        except OSError as exc:
            log.error("ACLs not durable: %s", exc)
            stored = Refusal(E.KAFKA_STORAGE_ERROR, f"not stored: {exc}")
            created = iter([stored] * len(valid))
        outcomes = [next(created) if o is None else o for o in outcomes]
        log.info("ACLs created: %d of %d", sum(o is None for o in outcomes), len(outcomes))
    # Kafka leaves a successful result's message at its default, the empty string.
    return R(
        throttle_time_ms=0,
        results=[
            Result(error_code=0, error_message="") if o is None else Result(error_code=o.error, error_message=o.message)
            for o in outcomes
        ],
    )
