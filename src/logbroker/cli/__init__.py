"""The `logbroker` command: one module per command group.

`serve` (the broker), `config` (its settings), `topics`, `produce`/`consume` (`records`), `groups`, `users`, `certs`,
`bench` (which loads the `logbroker_devtools.bench` tooling only when it runs) and, loaded on use because of
their optional dependencies, `demo` and `pipeline` (`logbroker.spark.cli`).
"""

from __future__ import annotations

import click

from logbroker import __version__
from logbroker.cli import acls as _acls
from logbroker.cli import bench as _bench
from logbroker.cli import certs as _certs
from logbroker.cli import cluster as _cluster
from logbroker.cli import config_cmd as _config_cmd
from logbroker.cli import console as _console
from logbroker.cli import groups as _groups
from logbroker.cli import migrate as _migrate
from logbroker.cli import records as _records
from logbroker.cli import serve as _serve
from logbroker.cli import storage as _storage
from logbroker.cli import topics as _topics
from logbroker.cli import users as _users

__all__ = ["main"]


class _LazyGroup(click.Group):
    """Commands whose modules pull in heavy optional dependencies (pyspark, matplotlib) load on use,
    so `logbroker serve` starts fast and works without the `spark`/`demo` extras."""

    lazy: dict[str, tuple[str, str, str]] = {
        "pipeline": ("logbroker.spark.cli", "pipeline", "PySpark pipelines: run SPEC, archive, rollup, replay."),
        "demo": ("logbroker.cli.demo", "demo", "End to end: embedded broker, notifications, Spark archive + rollup."),
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.lazy])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.lazy:
            return super().get_command(ctx, cmd_name)
        module_name, attr, _ = self.lazy[cmd_name]
        import importlib

        try:
            command = getattr(importlib.import_module(module_name), attr)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("logbroker"):
                raise
            raise click.ClickException(
                f"`logbroker {cmd_name}` needs {exc.name}: pip install 'logbroker[demo]' (pyspark, matplotlib)"
            ) from exc
        assert isinstance(command, click.Command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            if name in self.lazy:
                rows.append((name, self.lazy[name][2]))
            elif (cmd := super().get_command(ctx, name)) is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(formatter.width - 6 - len(name))))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="logbroker")
def main() -> None:
    """logbroker: a Kafka-compatible log broker toolkit."""


for _command in (
    _serve.serve,
    _topics.topics,
    _groups.groups,
    _records.produce,
    _records.consume,
    _bench.bench,
    _users.users,
    _acls.acls,
    _storage.storage,
    _cluster.cluster,
    _certs.certs,
    _config_cmd.config,
    _console.console,
    _migrate.migrate,
):
    main.add_command(_command)
del _command
