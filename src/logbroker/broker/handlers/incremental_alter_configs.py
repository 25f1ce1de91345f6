"""IncrementalAlterConfigs (44, KIP-339): SET, DELETE, APPEND and SUBTRACT single configs of a topic or
of the broker's dynamic layers.

Authorization as Kafka's: after the broker's preprocessing (duplicates, duplicate keys, the broker id), the
controller needs ALTER_CONFIGS on the topic or the cluster; broker loggers need CLUSTER_ACTION on the cluster
(checked first by Kafka's RuntimeLoggerManager)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from .. import loggers
from ..auth.checks import alter_configs_denial
from ..configs import BROKER_CONFIGS
from ..context import BrokerContext
from ..dispatch import handles
from ..seams import TOPIC_CONFIGS, ConfigError, ConfigType
from ._configs import BROKER, Edit, alter, duplicates

API = api(ApiKey.IncrementalAlterConfigs)
R = API.response
RR = R.AlterConfigsResourceResponse
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


class _UnknownOperation(Exception):
    pass


@handles(ApiKey.IncrementalAlterConfigs, 0, 1)
def handle(ctx: BrokerContext, req: Request) -> R:
    dup = duplicates(req.body.resources)
    out = []
    for res in req.body.resources:
        if (res.resource_type, res.resource_name) in dup:
            err, msg = E.INVALID_REQUEST, "Each resource must appear at most once."
        elif any(n > 1 for n in Counter(c.name for c in res.configs).values()):
            err, msg = E.INVALID_REQUEST, "Error due to duplicate config keys"
        elif (refused := _preprocess_refusal(ctx, res)) is not None:
            err, msg = E.INVALID_REQUEST, refused
        elif (denied := alter_configs_denial(ctx, req, res.resource_type, res.resource_name)) is not None:
            err, msg = denied
        else:
            try:
                err, msg = alter(ctx, res, _operations(res.configs), req.body.validate_only, _loggers(res.configs))
            except _UnknownOperation:  # Kafka fails such a resource with an unexpected error, no message
                err, msg = E.UNKNOWN_SERVER_ERROR, None
        out.append(RR(error_code=err, error_message=msg, resource_type=res.resource_type,
                      resource_name=res.resource_name))  # fmt: skip
    return R(throttle_time_ms=0, responses=out)


def _preprocess_refusal(ctx: BrokerContext, res: Any) -> str | None:
    """The broker's preprocessing (ConfigAdminManager.preprocess), before the controller authorizes: a null
    value other than a DELETE's, then a broker resource naming another broker."""
    nulls = [c.name for c in res.configs if c.config_operation != DELETE and c.value is None]
    if nulls:
        return "Null value not supported for : " + ", ".join(nulls)
    if res.resource_type == BROKER:
        try:
            ctx.configs.check_scope(res.resource_name)
        except ConfigError as exc:
            return str(exc)
    return None


def _operations(configs: list[Any]) -> Edit:
    def edit(current: Mapping[str, str], topic: bool) -> dict[str, str]:
        new = dict(current)
        for c in configs:
            op, name, value = c.config_operation, c.name, c.value
            if op not in (SET, DELETE, APPEND, SUBTRACT):
                raise _UnknownOperation
            if op == DELETE:
                new.pop(name, None)
                continue
            if value is None:
                raise ConfigError(f"Null value not supported for : {name}", E.INVALID_REQUEST)
            if op == SET:
                new[name] = value
                continue
            kind, default = _list_type(name, topic)
            if kind is not ConfigType.LIST:
                what = "APPEND" if op == APPEND else "SUBTRACT"
                raise ConfigError(f"Can't {what} to key {name} because its type is not LIST.")
            old = [v.strip() for v in new.get(name, default).split(",") if v.strip()]
            items = [v.strip() for v in value.split(",") if v.strip()]
            keep = [v for v in old if v not in items]
            merged = old + [v for v in items if v not in old] if op == APPEND else keep
            new[name] = ",".join(merged)
        return new

    return edit


def _loggers(configs: list[Any]) -> Callable[[bool], None]:
    """Broker-logger changes: SET a level or DELETE it (back to the root's); checked whole, then applied."""

    def edit(validate_only: bool) -> None:
        for c in configs:
            if c.config_operation not in (SET, DELETE, APPEND, SUBTRACT):
                raise _UnknownOperation
            if c.config_operation in (APPEND, SUBTRACT):
                what = "APPEND" if c.config_operation == APPEND else "SUBTRACT"
                raise ConfigError(f"{what} operation is not allowed for the BROKER_LOGGER resource", E.INVALID_REQUEST)
            loggers.check(c.name, c.value, c.config_operation == DELETE)
        if not validate_only:
            for c in configs:
                loggers.apply(c.name, None if c.config_operation == DELETE else c.value)

    return edit


def _list_type(name: str, topic: bool) -> tuple[ConfigType | None, str]:
    """The config's type and Kafka's default (what APPEND/SUBTRACT start from when it is not set)."""
    spec: Any = TOPIC_CONFIGS.get(name) if topic else BROKER_CONFIGS.get(name)
    if spec is None:
        return None, ""
    return spec.type, spec.default or ""
