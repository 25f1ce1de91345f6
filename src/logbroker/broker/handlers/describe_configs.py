"""DescribeConfigs (32): topic configs (overrides and defaults), the broker's own settings and group configs.

Needs DESCRIBE_CONFIGS on each topic (or group), or on the cluster for broker resources; refused resources
are answered after the others, with the error's default message and no configs (ConfigHelper)."""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from .. import loggers
from ..auth.checks import describe_configs_denial
from ..configs import Entry
from ..context import BrokerContext
from ..dispatch import handles
from ..seams import MAX_TOPIC_NAME, ConfigType, TopicError, validate_topic_name
from ._configs import topic_config_entries

API = api(ApiKey.DescribeConfigs)
R = API.response
RR = R.DescribeConfigsResult
CE = RR.DescribeConfigsResourceResult
SYN = CE.DescribeConfigsSynonym

TOPIC, BROKER, BROKER_LOGGER, GROUP = 2, 4, 8, 32
DYNAMIC_BROKER_LOGGER = 6
KNOWN_TYPES = (TOPIC, BROKER, 8, 16, 32)  # and broker loggers, client metrics, groups: refused one by one here


def broker_config_entries(ctx: BrokerContext, scope: str, keys: list[str] | None) -> list[Entry]:
    return [e for e in ctx.configs.broker_entries(scope) if keys is None or e.name in keys]


def _invalid_topic(name: str) -> str | None:
    """Why `name` cannot be a topic (Kafka validates before it looks the topic up), or None."""
    try:
        validate_topic_name(name)
    except TopicError as exc:
        if len(name) > MAX_TOPIC_NAME:  # as Kafka's, the message quotes the name
            return f"topic name {name!r} is longer than {MAX_TOPIC_NAME} characters"
        return str(exc)
    return None


def _fit(code: int, message: str | None) -> tuple[int, str | None]:
    """A message longer than a Kafka string may be cannot be sent: Kafka then answers UNKNOWN_SERVER_ERROR."""
    if message is not None and len(message.encode("utf-8", "surrogatepass")) > 0x7FFF:
        return int(E.UNKNOWN_SERVER_ERROR), None
    return code, message


@handles(ApiKey.DescribeConfigs, 0, 4, kafka4_min=1)
def handle(ctx: BrokerContext, req: Request) -> R:
    v = req.version
    if any(res.resource_type not in KNOWN_TYPES for res in req.body.resources):
        # Kafka refuses the whole request when one resource type is not one it knows.
        return R(
            throttle_time_ms=0,
            results=[
                RR(
                    error_code=E.INVALID_REQUEST,
                    error_message=f"resource type {res.resource_type} is not one Kafka knows",
                    resource_type=res.resource_type,
                    resource_name=res.resource_name,
                    configs=[],
                )
                for res in req.body.resources
            ],
        )
    results, denied = [], []
    for res in req.body.resources:
        refusal = describe_configs_denial(ctx, req, res.resource_type, res.resource_name)
        if refusal is not None:
            code, message = refusal
            denied.append(RR(error_code=code, error_message=message, resource_type=res.resource_type,
                             resource_name=res.resource_name, configs=[]))  # fmt: skip
            continue
        keys = list(res.configuration_keys) if res.configuration_keys is not None else None
        err, msg, entries = 0, "", []  # Kafka sends an empty message, not null, with no error
        if res.resource_type == TOPIC:
            meta = ctx.topics.get(res.resource_name)
            invalid = _invalid_topic(res.resource_name) if meta is None else None
            if invalid is not None:  # Kafka validates the name before it looks the topic up
                err, msg = E.INVALID_TOPIC_EXCEPTION, invalid
            elif meta is None:
                err, msg = E.UNKNOWN_TOPIC_OR_PARTITION, ""  # Kafka's message here is empty
            else:
                entries = topic_config_entries(ctx, meta.configs, keys)
        elif res.resource_type == BROKER:
            if (wrong := _wrong_broker(res.resource_name, ctx.node_id)) is not None:
                err, msg = E.INVALID_REQUEST, wrong
            else:
                entries = broker_config_entries(ctx, res.resource_name, keys)
        elif res.resource_type == BROKER_LOGGER:
            if res.resource_name != str(ctx.node_id):
                err, msg = E.INVALID_REQUEST, f"no broker {res.resource_name!r}; this is {ctx.node_id}"
            else:
                entries = [Entry(n, lvl, DYNAMIC_BROKER_LOGGER, False, ConfigType.UNKNOWN, ())
                           for n, lvl in loggers.loggers().items() if keys is None or n in keys]  # fmt: skip
        elif res.resource_type == GROUP:
            entries = ctx.group_configs.entries(res.resource_name, keys)
        else:
            err, msg = E.INVALID_REQUEST, f"resource type {res.resource_type} is not supported"
        configs = [
            CE(
                name=e.name,
                value=e.value,
                read_only=e.read_only,
                config_source=e.source,
                is_default=False,  # v0's field: Kafka 3.x never sets it (measured on 3.9)
                is_sensitive=e.sensitive,
                synonyms=[SYN(name=n, value=val, source=src) for n, val, src in e.synonyms]
                if req.body.include_synonyms
                else [],
                config_type=e.type,
                documentation=e.documentation if v >= 3 and req.body.include_documentation else None,
            )
            for e in entries
        ]
        err, msg = _fit(err, msg)
        results.append(
            RR(
                error_code=err,
                error_message=msg,
                resource_type=res.resource_type,
                resource_name=res.resource_name,
                configs=configs,
            )
        )
    return R(throttle_time_ms=0, results=results + denied)


def _wrong_broker(name: str, node_id: int) -> str | None:
    """ConfigHelper's refusal of a BROKER resource that names another broker, or None for this one (or "")."""
    if name == "":
        return None
    try:
        named = int(name)
    except ValueError:
        return f"Broker id must be an integer, but it is: {name}"
    if named != node_id:
        return f"Unexpected broker id, expected {node_id} or empty string, but received {name}"
    return None
