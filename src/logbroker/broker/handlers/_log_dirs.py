"""The one log dir this broker has, as DescribeLogDirs reports it and AlterReplicaLogDirs accepts it."""

from __future__ import annotations

from pathlib import Path

from ..context import BrokerContext


def log_dir(ctx: BrokerContext) -> str:
    """The path this broker reports as its only log dir, and the one AlterReplicaLogDirs accepts: the data
    directory made absolute (not resolved: Kafka reports `log.dirs` entries as absolute paths, no symlinks
    followed)."""
    return str(Path(ctx.settings.data_dir).absolute())
