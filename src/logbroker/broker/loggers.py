"""Broker loggers as Kafka exposes them (KIP-412): DescribeConfigs and IncrementalAlterConfigs on resource
type BROKER_LOGGER change a logger's level while the broker runs, as `kafka-configs --entity-type
broker-loggers` does. Levels are Kafka's names over Python's logging; changes last until the process ends,
as in Kafka."""

from __future__ import annotations

import logging

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
