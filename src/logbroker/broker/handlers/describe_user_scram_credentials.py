"""DescribeUserScramCredentials (50): each user's SCRAM mechanisms and iteration counts (never a key)."""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api

from ..context import BrokerContext
from ..dispatch import handles

API = api(ApiKey.DescribeUserScramCredentials)
R = API.response
Result = R.DescribeUserScramCredentialsResult
Info = Result.CredentialInfo


@handles(ApiKey.DescribeUserScramCredentials, 0, 0)
def handle(ctx: BrokerContext, req: Request) -> R:
    names = None if req.body.users is None else [u.name for u in req.body.users]
    results = [
        Result(
            user=name,
            error_code=outcome.error,
            error_message=outcome.message,
            credential_infos=[Info(mechanism=m, iterations=i) for m, i in infos],
        )
        for name, outcome, infos in ctx.users.describe(names)
    ]
    return R(throttle_time_ms=0, error_code=0, error_message=None, results=results)
