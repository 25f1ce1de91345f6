"""What AlterConfigs and IncrementalAlterConfigs share: resources checked as Kafka checks them, then each
one's new set of overrides (topic) or dynamic values (broker) handed to the context whole."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from logbroker.protocol import ErrorCode as E

from ..configs import DYNAMIC_TOPIC, Entry
from ..context import BrokerContext
from ..seams import TOPIC_CONFIGS, ConfigError, TopicError, validate_topic_name

TOPIC, BROKER_LOGGER, BROKER, GROUP = 2, 8, 4, 32
KNOWN_TYPES = (TOPIC, BROKER, BROKER_LOGGER, 16, 32)  # client metrics and groups: Kafka knows them

Result = tuple[int, str | None]  # error code, message
# (current values of the resource) -> its new values, or ConfigError
Edit = Callable[[Mapping[str, str], bool], dict[str, str]]


def duplicates(resources: list[Any]) -> set[tuple[int, str]]:
    """Resources named more than once: Kafka refuses each occurrence."""
    counts = Counter((r.resource_type, r.resource_name) for r in resources)
    return {k for k, n in counts.items() if n > 1}


def alter(
    ctx: BrokerContext,
    resource: Any,
    edit: Edit,
    validate_only: bool,
    loggers_edit: Callable[[bool], None] | None = None,
) -> Result:
    """Apply `edit` to one resource; Kafka's error code and message for whatever is refused."""
    rtype, name = resource.resource_type, resource.resource_name
    try:
        if rtype == TOPIC:
            try:
                validate_topic_name(name)
            except TopicError:
                return E.INVALID_TOPIC_EXCEPTION, _invalid_name(name)
            meta = ctx.topics.get(name)
            if meta is None:
                return E.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist."
            ctx.topics.alter_configs(name, edit(meta.configs, True), validate_only)
        elif rtype == BROKER:
            scope = ctx.configs.check_scope(name)
            ctx.alter_broker_configs(scope, edit(ctx.configs.dynamic.get(scope, {}), False), validate_only)
        elif rtype == BROKER_LOGGER and loggers_edit is not None:
            if name != ctx.configs.node:  # one broker's loggers: no cluster-wide layer (Kafka's messages)
                if not name.lstrip("-").isdigit():
                    raise ConfigError(f"Node id must be an integer, but it is: {name}", E.INVALID_REQUEST)
                msg = f"Unexpected node id. Expected {ctx.configs.node}, but received {name}"
                raise ConfigError(msg, E.INVALID_REQUEST)
            loggers_edit(validate_only)
        elif rtype == GROUP:
            groups = ctx.group_configs
            groups.replace(name, edit(groups.overrides.get(name, {}), False), validate_only)
        elif rtype in KNOWN_TYPES:
            return E.INVALID_REQUEST, f"logbroker does not support altering configs of resource type {rtype}"
        else:
            return E.INVALID_REQUEST, f"Unknown resource type {rtype}"
    except ConfigError as exc:
        return exc.error, str(exc)
    except TopicError as exc:
        return exc.error, str(exc)
    return E.NONE, None


def _invalid_name(name: str) -> str:
    if not name or name in (".", ".."):
        return f"Topic name is invalid: '{name}' is not allowed"
    if len(name) > 249:
        return f"Topic name is invalid: '{name}' is longer than 249 characters"
    return (
        f"Topic name is invalid: '{name}' contains one or more characters other than ASCII alphanumerics, "
        f"'.', '_' and '-'"
    )


def topic_config_entries(ctx: BrokerContext, overrides: dict[str, str], keys: list[str] | None) -> list[Entry]:
    """Every topic config: its override (source 1), else the broker layer it comes from, with synonyms."""
    out = []
    for name, spec in TOPIC_CONFIGS.items():
        if keys is not None and name not in keys:
            continue
        value, source, synonyms = ctx.configs.topic_default(spec)
        if name in overrides:
            value, source = overrides[name], DYNAMIC_TOPIC
            synonyms = [(name, value, DYNAMIC_TOPIC), *synonyms]
        out.append(Entry(name, value, source, False, spec.type, tuple(synonyms), spec.doc or None))
    return out
