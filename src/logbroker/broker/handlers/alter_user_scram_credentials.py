"""AlterUserScramCredentials (51): add, replace or delete users' SCRAM credentials, durably before the
answer. Validation and messages are Kafka's controller's (see `auth.users`).

Needs ALTER on the cluster; denied, every user named (once, sorted) is CLUSTER_AUTHORIZATION_FAILED with the
denial's message, nothing changes (ControllerApis.handleAlterUserScramCredentials)."""

from __future__ import annotations

import logging

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation
from ..auth.checks import cluster_denial
from ..auth.users import Upsertion
from ..context import BrokerContext
from ..dispatch import handles

log = logging.getLogger(__name__)
API = api(ApiKey.AlterUserScramCredentials)
R = API.response
Result = R.AlterUserScramCredentialsResult


@handles(ApiKey.AlterUserScramCredentials, 0, 0, exclusive=True)
async def handle(ctx: BrokerContext, req: Request) -> R:
    b = req.body
    if (denied := cluster_denial(ctx, req, AclOperation.ALTER)) is not None:
        users = sorted({d.name for d in b.deletions} | {u.name for u in b.upsertions})
        code = E.CLUSTER_AUTHORIZATION_FAILED
        return R(throttle_time_ms=0, results=[Result(user=u, error_code=code, error_message=denied) for u in users])
    outcomes, records = ctx.access.users.plan(
        [(d.name, d.mechanism) for d in b.deletions],
        [Upsertion(u.name, u.mechanism, u.iterations, bytes(u.salt), bytes(u.salted_password)) for u in b.upsertions],
    )
    if records:
        try:
            await ctx.access.alter_users(records)
        except OSError as exc:
            log.error("SCRAM credentials not durable: %s", exc)
            outcomes = {
                name: o if o.error else type(o)(E.KAFKA_STORAGE_ERROR, f"not stored: {exc}")
                for name, o in outcomes.items()
            }
        changed = sorted({name for (_k, name, _m), _v in records})
        log.info("SCRAM credentials changed for %d user(s): %s", len(changed), ", ".join(changed))
    results = [Result(user=name, error_code=o.error, error_message=o.message) for name, o in outcomes.items()]
    return R(throttle_time_ms=0, results=results)
