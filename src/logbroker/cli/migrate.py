"""`logbroker migrate --to HOST:PORT`: copy this broker's topics, configs, ACLs and group offsets to a Kafka
cluster with Kafka's MirrorMaker 2, show the copy per topic as it goes, and end with a report of both sides
and what to change (the one URL)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from logbroker.cli.common import BOOTSTRAP, bootstrap_servers, cell, echo_json, security_settings, wide_console

if TYPE_CHECKING:
    from logbroker.migrate import GroupOffset, Outcome, PartitionState


def _by_topic(states: list[PartitionState]) -> dict[str, list[PartitionState]]:
    out: dict[str, list[PartitionState]] = {}
    for s in states:
        out.setdefault(s.topic, []).append(s)
    return out


def _progress_table(states: list[PartitionState]) -> Any:
    from rich.table import Table

    t = Table(title="copying", title_justify="left")
    for col in ("topic", "partitions", "source records", "copied", "lag"):
        t.add_column(col, justify="left" if col == "topic" else "right")
    for topic, parts in sorted(_by_topic(states).items()):
        src = sum(p.source_records for p in parts)
        dst = sum(p.target_records for p in parts)
        t.add_row(topic, str(len(parts)), str(src), str(dst), str(max(src - dst, 0)))
    return t


def _report(outcome: Outcome, target: str, after: dict[tuple[str, str, int], int], as_json: bool) -> None:
    topics = [
        {"topic": topic, "partitions": len(parts),
         "source": {"records": sum(p.source_records for p in parts),
                    "last_offsets": [p.source_end - 1 for p in parts]},
         "target": {"records": sum(p.target_records for p in parts),
                    "last_offsets": [p.target_end - 1 for p in parts]},
         "complete": all(p.caught_up for p in parts)}
        for topic, parts in sorted(_by_topic(outcome.partitions).items())
    ]  # fmt: skip
    groups = [
        {"group": g.group, "topic": g.topic, "partition": g.partition, "source_offset": g.source,
         "target_offset": after.get((g.group, g.topic, g.partition), g.target), "exact": g.exact}
        for g in outcome.groups
    ]  # fmt: skip
    if as_json:
        echo_json({"target": target, "seconds": round(outcome.seconds, 1), "topics": topics, "groups": groups})
        return
    from rich.table import Table

    console = wide_console()
    t = Table(title="topics", title_justify="left")
    for col in ("topic", "partitions", "records here", "records there", "last offsets here", "last offsets there",
                "complete"):  # fmt: skip
        t.add_column(col)
    for row in topics:
        t.add_row(row["topic"], str(row["partitions"]), str(row["source"]["records"]), str(row["target"]["records"]),
                  cell(row["source"]["last_offsets"]), cell(row["target"]["last_offsets"]),
                  "yes" if row["complete"] else "NO")  # fmt: skip
    console.print(t)
    if groups:
        g = Table(title="group offsets", title_justify="left")
        for col in ("group", "topic", "partition", "committed here", "committed there", "translation"):
            g.add_column(col)
        for row in groups:
            g.add_row(row["group"], row["topic"], str(row["partition"]), str(row["source_offset"]),
                      cell(row["target_offset"]), "exact" if row["exact"] else "approximate")  # fmt: skip
        console.print(g)
    console.print(
        f"Copied in {outcome.seconds:.0f} s. To move your applications: stop the producers here first, then set "
        f"bootstrap.servers={target} in every client (producers, consumers, streams, connectors) and restart "
        "them; consumers resume from the offsets above."
    )


_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)


@click.command("migrate", context_settings={"show_default": True})
@BOOTSTRAP
@click.option("--source-command-config", type=_FILE, help="Client properties for this broker (-b), if secured.")
@click.option("--to", "to", required=True, help="The Kafka cluster to move to: HOST:PORT[,HOST:PORT...].")
@click.option("--command-config", "to_config", type=_FILE,
              help="Client properties for the cluster (security.protocol, sasl.*, ssl.*), Kafka's format.")  # fmt: skip
@click.option("--topics", default=".*", help="Regex of the topics to copy (internal ones never are).")
@click.option("--groups", default=".*", help="Regex of the consumer groups whose offsets to copy.")
@click.option("--timeout", type=float, default=1800.0, help="Seconds to wait for the copy to catch up.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def migrate(bootstrap: str, source_command_config: Path | None, to: str, to_config: Path | None, topics: str,
            groups: str, timeout: float, as_json: bool) -> None:  # fmt: skip
    """Copy this broker to a Kafka cluster with MirrorMaker 2 (topic names, records, configs, ACLs, group
    offsets), then report both sides.

    \b
    Runs Kafka's MirrorMaker 2 (connect-mirror from Maven, fetched on first use when Maven is installed) until
    every partition is copied, translates each group's committed offsets to the copies exactly, and stops.
    Stop the producers here first for a cut-over; consumers switched to the cluster resume where they were.
    """
    from logbroker._kafka import KafkaSettings
    from logbroker._kafka.settings import read_properties
    from logbroker.migrate import MigrateError, Migration, mm2_jars

    source = security_settings(bootstrap, command_config=source_command_config) or KafkaSettings(bootstrap)
    target = {"bootstrap.servers": bootstrap_servers(to)}
    if to_config is not None:
        target = {**{k: v for k, v in read_properties(to_config).items()}, **target}
    try:
        jars = mm2_jars()
        job = Migration(source, target, topics, groups)
        if as_json or not sys.stdout.isatty():
            outcome = job.run(jars, timeout=timeout)
        else:
            from rich.live import Live

            with Live(_progress_table([]), console=wide_console(), refresh_per_second=2) as live:
                outcome = job.run(jars, timeout=timeout, on_progress=lambda s: live.update(_progress_table(s)))
        after = job.target_offsets({g.group for g in outcome.groups})
    except MigrateError as exc:
        raise click.ClickException(str(exc)) from None
    _report(outcome, target["bootstrap.servers"], after, as_json)
    if not all(p.caught_up for p in outcome.partitions) or not all(_fine(g) for g in outcome.groups):
        sys.exit(1)


def _fine(g: GroupOffset) -> bool:
    return g.target is not None
