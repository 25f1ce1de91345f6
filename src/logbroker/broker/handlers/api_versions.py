"""ApiVersions (18): v0-4; an unsupported version is answered in v0 with the full list (KIP-511)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafka.protocol.metadata import ApiVersionsResponse

from logbroker.protocol.connection import Request
from logbroker.protocol.messages import APIS

if TYPE_CHECKING:
    from logbroker.broker.server import Broker

R = ApiVersionsResponse


def supported_keys() -> list:
    return [
        R.ApiVersion(api_key=s.key, min_version=s.min_version, max_version=s.max_version)
        for s in sorted(APIS.values(), key=lambda s: s.key)
    ]


def handle(broker: Broker, req: Request) -> R:
    if req.version_error is not None:
        req.header.api_version = 0  # the client parses an error reply as v0
        return R(error_code=int(req.version_error), api_keys=supported_keys())
    return R(error_code=0, api_keys=supported_keys(), throttle_time_ms=0)
