"""`logbroker topics`: list, create, describe and delete topics (any Kafka-compatible broker)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from logbroker.cli.common import BOOTSTRAP, SECURITY, client, fail, wide_console

if TYPE_CHECKING:
    from logbroker._kafka.settings import KafkaSettings
    from logbroker.client import KafkaClient


@click.group()
def topics() -> None:
    """List, create, describe and delete topics."""


@topics.command("list")
@BOOTSTRAP
@SECURITY
def topics_list(bootstrap: str, security: KafkaSettings | None) -> None:
    from rich.console import Console
    from rich.table import Table

    with client(bootstrap, security) as c:
        table = Table("topic", "partitions", "topic id")
        for t in c.list_topics():
            table.add_row(t.name, str(t.partitions), t.topic_id)
    Console().print(table)


@topics.command("create")
@BOOTSTRAP
@SECURITY
@click.argument("name")
@click.option("-p", "--partitions", default=1, show_default=True)
@click.option("-r", "--replication-factor", default=1, show_default=True)
@click.option("-c", "--config", "configs", multiple=True, help="KEY=VALUE topic config (repeatable).")
def topics_create(
    bootstrap: str,
    security: KafkaSettings | None,
    name: str,
    partitions: int,
    replication_factor: int,
    configs: tuple[str, ...],
) -> None:
    from logbroker.client import BrokerError

    cfg = {}
    for item in configs:
        k, sep, v = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--config")
        cfg[k] = v
    with client(bootstrap, security) as c:
        try:
            c.create_topic(name, partitions, replication_factor, cfg)
        except BrokerError as exc:
            fail(exc)
    click.echo(f"created topic {name} with {partitions} partition(s)")


@topics.command("describe")
@BOOTSTRAP
@SECURITY
@click.argument("name")
def topics_describe(bootstrap: str, security: KafkaSettings | None, name: str) -> None:
    """Partitions (offsets, records, bytes on disk) and configs of a topic."""
    from rich.table import Table

    from logbroker.client import BrokerError

    with client(bootstrap, security) as c:
        try:
            t = c.describe_topic(name)
            configs = c.describe_configs(name)
            offsets = [
                (
                    p.partition_index,
                    p.leader_id,
                    c.list_offset(name, p.partition_index, -2),
                    c.list_offset(name, p.partition_index, -1),
                )
                for p in sorted(t.partitions, key=lambda p: p.partition_index)
            ]
            sizes = _sizes(c, name)
        except BrokerError as exc:
            fail(exc)
    console = wide_console()
    console.print(f"[bold]{name}[/bold]  id={t.topic_id}  partitions={len(offsets)}")
    table = Table("partition", "leader", "start offset", "end offset", "records", "size (bytes)")
    for part, leader, lo, hi in offsets:
        size = sizes.get(part)
        table.add_row(str(part), str(leader), str(lo), str(hi), str(hi - lo), "-" if size is None else str(size))
    console.print(table)
    ctable = Table("config", "value", "source")
    sources = {1: "topic", 4: "broker", 5: "default"}
    for k, (v, src) in sorted(configs.items()):
        ctable.add_row(k, str(v), sources.get(src, str(src)))
    console.print(ctable)


def _sizes(c: KafkaClient, name: str) -> dict[int, int]:
    """Bytes on disk per partition (DescribeLogDirs); none from a broker that does not serve it."""
    from logbroker.client import BrokerError
    from logbroker.protocol.errors import ErrorCode

    try:
        return c.partition_sizes(name)
    except BrokerError as exc:
        if exc.code in (ErrorCode.UNSUPPORTED_VERSION, ErrorCode.CLUSTER_AUTHORIZATION_FAILED):
            return {}
        raise


@topics.command("delete")
@BOOTSTRAP
@SECURITY
@click.argument("name")
def topics_delete(bootstrap: str, security: KafkaSettings | None, name: str) -> None:
    from logbroker.client import BrokerError

    with client(bootstrap, security) as c:
        try:
            c.delete_topic(name)
        except BrokerError as exc:
            fail(exc)
    click.echo(f"deleted topic {name}")
