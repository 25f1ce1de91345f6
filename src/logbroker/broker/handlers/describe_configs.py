"""DescribeConfigs (32): topic configs (overrides and defaults) and the broker's own settings."""

from __future__ import annotations

from dataclasses import dataclass

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E
from logbroker.storage.manager import (
    MAX_TOPIC_NAME,
    PASSIVE_TOPIC_CONFIGS,
    TOPIC_CONFIG_KEYS,
    TopicError,
    validate_topic_name,
)

from ..context import BrokerContext
from ..dispatch import handles

API = api(ApiKey.DescribeConfigs)
R = API.response
RR = R.DescribeConfigsResult
CE = RR.DescribeConfigsResourceResult

TOPIC, BROKER = 2, 4
KNOWN_TYPES = (TOPIC, BROKER, 8, 16, 32)  # and broker loggers, client metrics, groups: refused one by one here
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
T_BOOLEAN, T_STRING, T_INT, T_SHORT, T_LONG = 1, 2, 3, 4, 5

_TYPES = {"segment.bytes": T_INT, "index.interval.bytes": T_INT, "max.message.bytes": T_INT}
_DOCS = {
    "segment.bytes": "Size at which a partition's active segment file is rolled.",
    "segment.ms": "Age at which a partition's active segment is rolled even if not full.",
    "retention.ms": "Whole segments whose newest record is older than this are deleted (-1: keep forever).",
    "retention.bytes": "Oldest whole segments are deleted while a partition is larger than this (-1: no limit).",
    "index.interval.bytes": "Bytes of log between two sparse offset-index entries.",
    "max.message.bytes": "Largest record batch a produce may carry for this topic.",
}


@dataclass
class Entry:
    name: str
    value: str | None
    read_only: bool
    config_source: int
    config_type: int
    documentation: str | None = None


def topic_config_entries(ctx: BrokerContext, overrides: dict[str, str], keys: list[str] | None) -> list[Entry]:
    defaults = ctx.log_defaults
    out = []
    for name, field in TOPIC_CONFIG_KEYS.items():
        if name in overrides:
            out.append(
                Entry(name, overrides[name], False, DYNAMIC_TOPIC_CONFIG, _TYPES.get(name, T_LONG), _DOCS.get(name))
            )
        else:
            out.append(
                Entry(
                    name,
                    str(getattr(defaults, field)),
                    False,
                    DEFAULT_CONFIG,
                    _TYPES.get(name, T_LONG),
                    _DOCS.get(name),
                )
            )
    for name, default in PASSIVE_TOPIC_CONFIGS.items():
        value = overrides.get(name, default)
        out.append(
            Entry(
                name,
                value,
                False,
                DYNAMIC_TOPIC_CONFIG if name in overrides else DEFAULT_CONFIG,
                T_BOOLEAN if value in ("true", "false") else T_STRING,
                "Accepted for compatibility; a single node has no effect to apply.",
            )
        )
    if keys is not None:
        out = [e for e in out if e.name in keys]
    return out


def broker_config_entries(ctx: BrokerContext, keys: list[str] | None) -> list[Entry]:
    s = ctx.settings
    values = {
        "ctx.id": (str(s.node_id), T_INT),
        "node.id": (str(s.node_id), T_INT),
        "auto.create.topics.enable": (str(s.auto_create_topics).lower(), T_BOOLEAN),
        "num.partitions": (str(s.num_partitions), T_INT),
        "delete.topic.enable": (str(s.delete_topic_enable).lower(), T_BOOLEAN),
        "message.max.bytes": (str(s.message_max_bytes), T_INT),
        "socket.request.max.bytes": (str(s.socket_request_max_bytes), T_INT),
        "log.segment.bytes": (str(s.segment_bytes), T_INT),
        "log.roll.ms": (str(s.segment_ms), T_LONG),
        "log.retention.ms": (str(s.retention_ms), T_LONG),
        "log.retention.bytes": (str(s.retention_bytes), T_LONG),
        "log.dirs": (str(s.data_dir), T_STRING),
        "logbroker.fsync": (s.fsync.value, T_STRING),
        "logbroker.fsync.interval.ms": (str(s.fsync_interval_ms), T_LONG),
        "connections.max.idle.ms": (str(s.connections_max_idle_ms), T_LONG),
        "default.replication.factor": ("1", T_INT),
        "offsets.topic.replication.factor": ("1", T_SHORT),
        "min.insync.replicas": ("1", T_INT),
        "group.initial.rebalance.delay.ms": (str(s.group_initial_rebalance_delay_ms), T_INT),
        "group.min.session.timeout.ms": (str(s.group_min_session_timeout_ms), T_INT),
        "group.max.session.timeout.ms": (str(s.group_max_session_timeout_ms), T_INT),
        "offsets.retention.minutes": (str(s.offsets_retention_minutes), T_INT),
    }
    out = [Entry(k, v, True, STATIC_BROKER_CONFIG, t) for k, (v, t) in values.items()]
    if keys is not None:
        out = [e for e in out if e.name in keys]
    return out


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


@handles(ApiKey.DescribeConfigs, 1, 4)
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
    results = []
    for res in req.body.resources:
        keys = list(res.configuration_keys) if res.configuration_keys is not None else None
        err, msg, entries = 0, "", []  # Kafka sends an empty message, not null, with no error
        if res.resource_type == TOPIC:
            meta = ctx.topic(res.resource_name)
            invalid = _invalid_topic(res.resource_name) if meta is None else None
            if invalid is not None:  # Kafka validates the name before it looks the topic up
                err, msg = E.INVALID_TOPIC_EXCEPTION, invalid
            elif meta is None:
                err, msg = E.UNKNOWN_TOPIC_OR_PARTITION, ""  # Kafka's message here is empty
            else:
                entries = topic_config_entries(ctx, meta.configs, keys)
        elif res.resource_type == BROKER:
            if res.resource_name not in ("", str(ctx.node_id)):
                err, msg = E.INVALID_REQUEST, f"no broker {res.resource_name!r}; this is {ctx.node_id}"
            else:
                entries = broker_config_entries(ctx, keys)
        else:
            err, msg = E.INVALID_REQUEST, f"resource type {res.resource_type} is not supported"
        configs = [
            CE(
                name=e.name,
                value=e.value,
                read_only=e.read_only,
                config_source=e.config_source,
                is_default=e.config_source == DEFAULT_CONFIG,
                is_sensitive=False,
                synonyms=[],
                config_type=e.config_type,
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
    return R(throttle_time_ms=0, results=results)
