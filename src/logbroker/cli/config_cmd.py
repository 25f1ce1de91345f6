"""`logbroker config list`: every broker setting with the names it goes by (its Kafka property in a
server.properties file, its LOGBROKER_* environment variable), its type and default, so an operator never has
to read the source to find a setting `logbroker serve --help` has no flag for."""

from __future__ import annotations

import json
import types
from enum import Enum
from pathlib import Path
from typing import Any, Union, get_args, get_origin

import click

from logbroker.config import ENV_PREFIX, BrokerSettings
from logbroker.kafka_properties import KAFKA_NAMES

# Settings that Kafka properties reach through load_properties' rules rather than KAFKA_NAMES (tests keep
# this in step with kafka_properties' ruled names).
RULED_NAMES: dict[str, tuple[str, ...]] = {
    "data_dir": ("log.dirs", "log.dir"),
    "listen": ("listeners",),
    "advertised_listener": ("advertised.listeners",),
    "listeners": ("listeners",),
    "advertised_listeners": ("advertised.listeners",),
    "listener_security_protocol_map": ("listener.security.protocol.map",),
    "listener_configs": ("listener.name.<listener>.<property>",),
    "node_id": ("node.id", "broker.id"),
    "retention_ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "segment_ms": ("log.roll.ms", "log.roll.hours"),
}


def kafka_names(setting: str) -> list[str]:
    """The server.properties keys that set `setting`, Kafka's first; `logbroker.<setting>` always works."""
    names = [*RULED_NAMES.get(setting, ()), *(k for k, (field, _) in KAFKA_NAMES.items() if field == setting)]
    return list(dict.fromkeys(names))


def _type_name(annotation: Any) -> str:
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        return " | ".join(_type_name(a) for a in args) + " (optional)"
    if get_origin(annotation) is dict:
        return "table"
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return "|".join(str(m.value) for m in annotation)
    return {int: "int", float: "float", bool: "bool", str: "string", Path: "path"}.get(annotation, str(annotation))


def _plain(value: Any) -> Any:
    """A default as JSON holds it."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    return value


def settings_table() -> list[dict[str, Any]]:
    """One row per BrokerSettings field, in declaration order."""
    rows = []
    for name, field in BrokerSettings.model_fields.items():
        rows.append(
            {
                "setting": name,
                "kafka": kafka_names(name),
                "property": f"logbroker.{name.replace('_', '.')}",
                "env": ENV_PREFIX + name.upper(),
                "type": _type_name(field.annotation),
                "default": _plain(field.get_default(call_default_factory=True)),
                "description": field.description or "",
            }
        )
    return rows


def _text(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return repr(value) if value == "" or value != value.strip() else value
    return str(value)


def cli_envvars(command: click.Command) -> set[str]:
    """Environment variables the options of `command` and its subcommands read (LOGBROKER_BOOTSTRAP, ...)."""
    found: set[str] = set()
    for param in command.params:
        envvar = param.envvar
        found.update([envvar] if isinstance(envvar, str) else envvar or ())
    for sub in getattr(command, "commands", {}).values():  # registered ones: lazy groups are not imported
        found |= cli_envvars(sub)
    return found


@click.group("config")
def config() -> None:
    """The broker's settings: names, environment variables, defaults."""


@config.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON array of objects.")
def list_settings(as_json: bool) -> None:
    """Every setting of `logbroker serve`: its Kafka property name (server.properties), its LOGBROKER_*
    environment variable, type, default and what it does. Precedence: defaults < --config file < environment
    < flags."""
    rows = settings_table()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        names = ", ".join(row["kafka"]) or row["property"]
        click.echo(f"{row['setting']}  [{names}]  {row['env']}")
        line = f"    {row['type']}, default {_text(row['default'])}"
        click.echo(f"{line}: {row['description']}" if row["description"] else line)
