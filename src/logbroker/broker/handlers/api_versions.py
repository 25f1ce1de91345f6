"""ApiVersions (18): the table built from the handlers' declarations; an unsupported version is
answered in v0 with the full list (KIP-511)."""

from __future__ import annotations

import re

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..context import BrokerContext
from ..dispatch import handles

API = api(ApiKey.ApiVersions)
R = API.response


def _supported(ctx: BrokerContext) -> list:
    return [
        R.ApiVersion(api_key=s.key, min_version=s.min_version, max_version=s.max_version)
        for s in sorted(ctx.apis.values(), key=lambda s: s.key)
    ]


# KIP-511: what a client software name and version may look like; Kafka refuses anything else.
SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


@handles(ApiKey.ApiVersions, 0, 4)
def handle(ctx: BrokerContext, req: Request) -> R:
    if req.version_error is not None:
        req.header.api_version = 0  # the client parses an error reply as v0
        return R(error_code=req.version_error, api_keys=_supported(ctx))
    body = req.body  # None only when a test builds the request by hand
    if (
        req.version >= 3
        and body is not None
        and not (SOFTWARE.fullmatch(body.client_software_name) and SOFTWARE.fullmatch(body.client_software_version))
    ):
        return R(error_code=E.INVALID_REQUEST, api_keys=[], throttle_time_ms=0)
    return R(error_code=0, api_keys=_supported(ctx), throttle_time_ms=0)
