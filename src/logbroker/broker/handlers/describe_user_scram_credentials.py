"""DescribeUserScramCredentials (50): each user's SCRAM mechanisms and iteration counts (never a key).

Needs DESCRIBE on the cluster. Denied, Kafka answers CLUSTER_AUTHORIZATION_FAILED at the top and once per
requested user with an empty user name (DescribeUserScramCredentialsRequest.getErrorResponse); asked for
every user (a null list) it fails building that answer and never replies, so we close the connection."""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation
from ..auth.checks import cluster_denial
from ..context import NO_RESPONSE_CLOSE, BrokerContext, NoResponse
from ..dispatch import handles

API = api(ApiKey.DescribeUserScramCredentials)
R = API.response
Result = R.DescribeUserScramCredentialsResult
Info = Result.CredentialInfo


@handles(ApiKey.DescribeUserScramCredentials, 0, 0)
def handle(ctx: BrokerContext, req: Request) -> R | NoResponse:
    if cluster_denial(ctx, req, AclOperation.DESCRIBE) is not None:
        if req.body.users is None:
            return NO_RESPONSE_CLOSE
        denied = E.CLUSTER_AUTHORIZATION_FAILED
        return R(
            throttle_time_ms=0,
            error_code=denied,
            error_message=None,
            results=[
                Result(user="", error_code=denied, error_message=None, credential_infos=[]) for _ in req.body.users
            ],
        )
    names = None if req.body.users is None else [u.name for u in req.body.users]
    results = [
        Result(
            user=name,
            error_code=outcome.error,
            error_message=outcome.message,
            credential_infos=[Info(mechanism=m, iterations=i) for m, i in infos],
        )
        for name, outcome, infos in ctx.access.users.describe(names)
    ]
    return R(throttle_time_ms=0, error_code=0, error_message=None, results=results)
