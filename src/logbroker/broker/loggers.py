"""Broker loggers as Kafka exposes them (KIP-412): DescribeConfigs and IncrementalAlterConfigs on resource
type BROKER_LOGGER change a logger's level while the broker runs, as `kafka-configs --entity-type
broker-loggers` does. Levels are Kafka's names over Python's logging; changes last until the process ends,
as in Kafka. `setup` is how `logbroker serve` writes them: plain text, or one JSON object per line
(`--log-format json`, through python-json-logger) for log shippers."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TextIO

from pythonjsonlogger.json import JsonFormatter as _JsonFormatter

from logbroker.protocol.errors import ErrorCode as E
from logbroker.storage.configs import ConfigError

ROOT = "root"
# Kafka's level names -> Python levels (TRACE sits below DEBUG).
LEVELS = {"TRACE": 5, "DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING,
          "ERROR": logging.ERROR, "FATAL": logging.CRITICAL}  # fmt: skip
_NAMES = {v: k for k, v in LEVELS.items()}


def _name_of(level: int) -> str:
    return _NAMES.get(level) or logging.getLevelName(level)


def loggers() -> dict[str, str]:
    """The root logger and every logbroker logger, with its effective level in Kafka's names."""
    out = {ROOT: _name_of(logging.getLogger().getEffectiveLevel())}
    for name in sorted(logging.root.manager.loggerDict):
        if name == "logbroker" or name.startswith("logbroker."):
            out[name] = _name_of(logging.getLogger(name).getEffectiveLevel())
    return out


def check(name: str, level: str | None, delete: bool) -> None:
    """Kafka's refusals, before anything changes (a request's changes apply all or none)."""
    if name not in loggers():
        raise ConfigError(f"Logger {name} does not exist!")
    if delete:
        if name == ROOT:
            raise ConfigError("Removing the log level of the root logger is not allowed", E.INVALID_REQUEST)
        return
    if level not in LEVELS:
        raise ConfigError(
            f"Cannot set the log level of {name} to {level} as it is not a supported log level. "
            f"Valid log levels are {', '.join(sorted(LEVELS))}"
        )


def apply(name: str, level: str | None) -> None:
    """Set a logger's level; None: it follows its parent again (Kafka: back to the root logger's level)."""
    logger = logging.getLogger() if name == ROOT else logging.getLogger(name)
    logger.setLevel(logging.NOTSET if level is None else LEVELS[level])


# ----------------------------------------------------------------------------- output formats

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(_JsonFormatter):
    """One JSON object per line for log shippers: time (ISO 8601, UTC), level, logger, message, and
    `exception` when there is one; `extra=` fields of a call are kept as keys of their own."""

    def __init__(self) -> None:
        super().__init__(
            "{asctime}{levelname}{name}{message}",
            style="{",
            rename_fields={"asctime": "time", "levelname": "level", "name": "logger", "exc_info": "exception"},
            json_ensure_ascii=False,
        )

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def setup(level: str, fmt: str = "text", stream: TextIO | None = None) -> logging.Handler:
    """Route every log record to `stream` (stderr) in `fmt` (text or json), as `logbroker serve` does;
    returns the handler installed on the root logger."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    return handler


# ----------------------------------------------------------------------------- what a log line may show

HIDDEN = "[hidden]"
# Kafka's PASSWORD-typed configs and their kin (ssl.key.password, sasl.jaas.config, *.secret, ssl.keystore.key):
# their values never reach a log line.
_SENSITIVE = re.compile(r"password|secret|jaas|credential|token|(^|\.)key$|keystore\.key", re.IGNORECASE)


def sensitive(name: str) -> bool:
    return _SENSITIVE.search(name) is not None


def shown(name: str, value: object) -> str:
    """A config value as a log line may show it: masked for a sensitive name."""
    return HIDDEN if sensitive(name) and value is not None else str(value)


def config_values(values: Mapping[str, object]) -> str:
    """`k=v, ...` of configs with sensitive values masked; "none" when empty."""
    return ", ".join(f"{k}={shown(k, v)}" for k, v in sorted(values.items())) or "none"


def config_changes(old: Mapping[str, object], new: Mapping[str, object]) -> str:
    """`k: old -> new` for each key that changed (unset where a side has none), sensitive values masked;
    empty when nothing changed."""
    parts = []
    for k in sorted(set(old) | set(new)):
        before, after = old.get(k), new.get(k)
        if before != after:
            b = "unset" if before is None else shown(k, before)
            a = "unset" if after is None else shown(k, after)
            parts.append(f"{k}: {b} -> {a}")
    return ", ".join(parts)
