"""AlterConfigs (33): replace every override of a topic, or every dynamic config of the broker.

Needs ALTER_CONFIGS on the topic (TOPIC_AUTHORIZATION_FAILED) or the cluster for the broker
(CLUSTER_AUTHORIZATION_FAILED), checked by Kafka's controller after the broker's own checks (duplicates, the
broker id) and before anything is looked up or changed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.checks import alter_configs_denial
from ..context import BrokerContext
from ..dispatch import handles
from ..seams import ConfigError
from ._configs import BROKER, BROKER_LOGGER, KNOWN_TYPES, Edit, alter, duplicates

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
        elif (bad_id := _bad_broker_id(ctx, res)) is not None:
            err, msg = E.INVALID_REQUEST, bad_id
        elif (denied := alter_configs_denial(ctx, req, res.resource_type, res.resource_name)) is not None:
            err, msg = denied
        elif null is not None and res.resource_type in KNOWN_TYPES:  # before the resource is looked up, as Kafka
            err, msg = E.INVALID_REQUEST, f"Null value not supported for : {null}"
        else:
            err, msg = alter(ctx, res, _replace(res.configs), req.body.validate_only)
        out.append(RR(error_code=err, error_message=msg, resource_type=res.resource_type,
                      resource_name=res.resource_name))  # fmt: skip
    return R(throttle_time_ms=0, responses=out)


def _bad_broker_id(ctx: BrokerContext, res: Any) -> str | None:
    """The broker's own check of a broker resource's name (before the controller authorizes)."""
    if res.resource_type != BROKER:
        return None
    try:
        ctx.configs.check_scope(res.resource_name)
    except ConfigError as exc:
        return str(exc)
    return None


def _replace(configs: list[Any]) -> Edit:
    def edit(_current: Mapping[str, str], _topic: bool) -> dict[str, str]:
        new: dict[str, str] = {}
        for c in configs:
            if c.value is None:
                raise ConfigError(f"Null value not supported for : {c.name}", E.INVALID_REQUEST)
            new[c.name] = c.value
        return new

    return edit
