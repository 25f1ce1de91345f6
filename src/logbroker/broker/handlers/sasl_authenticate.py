"""SaslAuthenticate (36) reaching a handler: outside a SASL exchange (a listener without SASL, or after
authentication completed). Kafka answers ILLEGAL_SASL_STATE with this message and keeps the connection."""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..context import BrokerContext
from ..dispatch import handles

R = api(ApiKey.SaslAuthenticate).response


@handles(ApiKey.SaslAuthenticate, 0, 2)
def handle(ctx: BrokerContext, req: Request) -> R:
    return R(
        error_code=int(E.ILLEGAL_SASL_STATE),
        error_message="SaslAuthenticate request received after successful authentication",
        auth_bytes=b"",
        session_lifetime_ms=0,
    )
