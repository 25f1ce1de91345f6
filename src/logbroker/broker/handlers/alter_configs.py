"""AlterConfigs (33): replace every override of a topic, or every dynamic config of the broker."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E
from logbroker.storage.configs import ConfigError

from ..context import BrokerContext
from ..dispatch import handles
from ._configs import BROKER_LOGGER, KNOWN_TYPES, Edit, alter, duplicates

API = api(ApiKey.AlterConfigs)
R = API.response
RR = R.AlterConfigsResourceResponse


@handles(ApiKey.AlterConfigs, 0, 2)
def handle(ctx: BrokerContext, req: Request) -> R:
    dup = duplicates(req.body.resources)
    out = []
    for res in req.body.resources:
        null = next((c.name for c in res.configs if c.value is None), None)
        if (res.resource_type, res.resource_name) in dup:
            err, msg = E.INVALID_REQUEST, "Each resource must appear at most once."
        elif res.resource_type == BROKER_LOGGER:  # only IncrementalAlterConfigs knows loggers (Kafka)
            err, msg = E.INVALID_REQUEST, f"Unknown resource type {BROKER_LOGGER}"
        elif null is not None and res.resource_type in KNOWN_TYPES:  # before the resource is looked up, as Kafka
            err, msg = E.INVALID_REQUEST, f"Null value not supported for : {null}"
        else:
            err, msg = alter(ctx, res, _replace(res.configs), req.body.validate_only)
        out.append(RR(error_code=err, error_message=msg, resource_type=res.resource_type,
                      resource_name=res.resource_name))  # fmt: skip
    return R(throttle_time_ms=0, responses=out)


def _replace(configs: list[Any]) -> Edit:
    def edit(_current: Mapping[str, str], _topic: bool) -> dict[str, str]:
        new: dict[str, str] = {}
        for c in configs:
            if c.value is None:
                raise ConfigError(f"Null value not supported for : {c.name}", E.INVALID_REQUEST)
            new[c.name] = c.value
        return new

    return edit
