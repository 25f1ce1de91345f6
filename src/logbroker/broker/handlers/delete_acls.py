"""DeleteAcls (31): delete the ACLs each filter matches, durable before the answer.

v0-3 as Kafka 3.9 (Kafka 4 serves v1-3; a v0 filter is LITERAL and deletes LITERAL ACLs only). A zero
(UNKNOWN) code in any filter does not parse (the connection is closed); other unknown codes read as UNKNOWN
and that filter alone is refused (the controller's validateFilter). ALTER on the cluster is needed, then an
authorizer (SECURITY_DISABLED without one). Every filter sees the ACLs as they were before the request, so two
filters matching one ACL both list it.
"""

from __future__ import annotations

import logging
from typing import Any

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import (
    AclBinding,
    AclBindingFilter,
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
API = api(ApiKey.DeleteAcls)
R = API.response
FilterResult = R.DeleteAclsFilterResult
Matching = FilterResult.DeleteAclsMatchingAcl


def acl_filter(f: Any) -> AclBindingFilter:
    return AclBindingFilter(
        ResourceType.from_code(f.resource_type_filter),
        f.resource_name_filter,
        PatternType.from_code(f.pattern_type_filter),
        f.principal_filter,
        f.host_filter,
        AclOperation.from_code(f.operation),
        AclPermissionType.from_code(f.permission_type),
    )


def _matching(a: AclBinding) -> Any:
    return Matching(
        error_code=0,
        error_message=None,
        resource_type=a.resource_type,
        resource_name=a.name,
        pattern_type=a.pattern_type,
        principal=a.principal,
        host=a.host,
        operation=a.operation,
        permission_type=a.permission,
    )


def _all(filters: Any, code: int, message: str | None) -> R:
    return R(
        throttle_time_ms=0,
        filter_results=[FilterResult(error_code=code, error_message=message, matching_acls=[]) for _ in filters],
    )


@handles(ApiKey.DeleteAcls, 0, 3, kafka4_min=1, exclusive=True)
async def handle(ctx: BrokerContext, req: Request) -> R | NoResponse:
    filters = req.body.filters
    if any(0 in (f.resource_type_filter, f.pattern_type_filter, f.operation, f.permission_type) for f in filters):
        return NO_RESPONSE_CLOSE
    if (denied := cluster_denial(ctx, req, AclOperation.ALTER)) is not None:
        return _all(filters, E.CLUSTER_AUTHORIZATION_FAILED, denied)
    if ctx.access.authorizer is None:
        return _all(filters, E.SECURITY_DISABLED, "No Authorizer is configured.")
    if not filters:
        return _all(filters, 0, None)
    try:
        outcomes = await ctx.access.delete_acls([acl_filter(f) for f in filters])
    except OSError as exc:
        log.error("ACL deletions not durable: %s", exc)
        return _all(filters, E.KAFKA_STORAGE_ERROR, f"not stored: {exc}")
    results = []
    for o in outcomes:
        if isinstance(o, Refusal):
            results.append(FilterResult(error_code=o.error, error_message=o.message, matching_acls=[]))
        else:
            results.append(FilterResult(error_code=0, error_message=None, matching_acls=[_matching(a) for a in o]))
    deleted = sum(len(o) for o in outcomes if not isinstance(o, Refusal))
    if deleted:
        log.info("ACLs deleted: %d", deleted)
    return R(throttle_time_ms=0, filter_results=results)
