"""DescribeAcls (29): the ACLs a filter selects, grouped by resource pattern as Kafka's response is.

v0-3 as Kafka 3.9 (Kafka 4 serves v1-3; v0 predates pattern types, so its filter reads as LITERAL, the field's
default, and sees LITERAL ACLs only). A zero (UNKNOWN) code in the filter does not parse (the connection is
closed); other unknown codes read as UNKNOWN and match nothing. DESCRIBE on the cluster is needed, then an
authorizer (SECURITY_DISABLED, "No Authorizer is configured on the broker", without one).
"""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclBinding, AclBindingFilter, AclOperation, AclPermissionType, PatternType, ResourceType
from ..auth.checks import cluster_denial
from ..context import NO_RESPONSE_CLOSE, BrokerContext, NoResponse
from ..dispatch import handles

API = api(ApiKey.DescribeAcls)
R = API.response
Resource = R.DescribeAclsResource
Description = Resource.AclDescription


def _error(code: int, message: str) -> R:
    return R(throttle_time_ms=0, error_code=code, error_message=message, resources=[])


@handles(ApiKey.DescribeAcls, 0, 3, kafka4_min=1)
def handle(ctx: BrokerContext, req: Request) -> R | NoResponse:
    b = req.body
    if 0 in (b.resource_type_filter, b.pattern_type_filter, b.operation, b.permission_type):
        return NO_RESPONSE_CLOSE
    if (denied := cluster_denial(ctx, req, AclOperation.DESCRIBE)) is not None:
        return _error(E.CLUSTER_AUTHORIZATION_FAILED, denied)
    if ctx.access.authorizer is None:
        return _error(E.SECURITY_DISABLED, "No Authorizer is configured on the broker")
    f = AclBindingFilter(
        ResourceType.from_code(b.resource_type_filter),
        b.resource_name_filter,
        PatternType.from_code(b.pattern_type_filter),
        b.principal_filter,
        b.host_filter,
        AclOperation.from_code(b.operation),
        AclPermissionType.from_code(b.permission_type),
    )
    groups: dict[tuple[int, str, int], list[AclBinding]] = {}
    for acl in ctx.access.describe_acls(f):
        groups.setdefault((acl.resource_type, acl.name, acl.pattern_type), []).append(acl)
    resources = [
        Resource(
            resource_type=rt,
            resource_name=name,
            pattern_type=pt,
            acls=[
                Description(principal=a.principal, host=a.host, operation=a.operation, permission_type=a.permission)
                for a in acls
            ],
        )
        for (rt, name, pt), acls in groups.items()
    ]
    return R(throttle_time_ms=0, error_code=0, error_message="", resources=resources)
