"""SaslHandshake (17) reaching a handler: on a listener without SASL, or on a connection already authenticated
that may not re-authenticate now. Kafka answers ILLEGAL_SASL_STATE and keeps the connection; the exchange
itself is the connection's (`broker/auth/authenticator.py`)."""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..context import BrokerContext
from ..dispatch import handles

R = api(ApiKey.SaslHandshake).response


@handles(ApiKey.SaslHandshake, 0, 1)
def handle(ctx: BrokerContext, req: Request) -> R:
    return R(error_code=int(E.ILLEGAL_SASL_STATE), mechanisms=[])
