"""The `logbroker` command."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path

import click

from logbroker import __version__
from logbroker.config import ConfigError, load_settings


class _LazyGroup(click.Group):
    """Commands whose modules pull in heavy optional dependencies (pyspark, matplotlib) load on use,
    so `logbroker serve` starts fast and works without the `spark`/`demo` extras."""

    lazy: dict[str, tuple[str, str, str]] = {
        "pipeline": ("logbroker.spark.cli", "pipeline", "PySpark pipelines: run SPEC, archive, rollup, replay."),
        "demo": ("logbroker.demo", "demo", "End to end: embedded broker, notifications, Spark archive + rollup."),
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


@main.command()
@click.option("--config", "config_file", type=click.Path(path_type=Path), help="TOML or YAML settings file.")
@click.option("--data-dir", type=click.Path(path_type=Path), help="Where partition logs live.")
@click.option("--listen", help="HOST:PORT to accept clients on (default 127.0.0.1:9092).")
@click.option("--advertised-listener", help="HOST:PORT clients should connect to.")
@click.option("--fsync", type=click.Choice(["always", "interval", "never"]), help="Durability policy.")
@click.option("--fsync-interval-ms", type=int)
@click.option("--num-partitions", type=int, help="Partitions of auto-created topics.")
@click.option("--auto-create-topics/--no-auto-create-topics", default=None)
@click.option("--message-max-bytes", type=int)
@click.option("--log-level", help="DEBUG, INFO, WARNING, ERROR.")
def serve(config_file: Path | None, **flags: object) -> None:
    """Run the embedded broker until SIGTERM or Ctrl-C."""
    try:
        settings = load_settings(config_file, **flags)
    except ConfigError as exc:
        click.echo(str(exc), err=True)
        sys.exit(2)
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    from logbroker.broker import Broker

    async def run() -> None:
        broker = Broker(settings)
        try:
            await broker.start()
        except (OSError, RuntimeError) as exc:
            click.echo(f"logbroker: cannot start: {exc}", err=True)
            sys.exit(1)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        logging.getLogger("logbroker").info("shutting down")
        await broker.stop()

    asyncio.run(run())


# ---------------------------------------------------------------------- client commands

BOOTSTRAP = click.option(
    "-b",
    "--bootstrap",
    default="127.0.0.1:9092",
    envvar="LOGBROKER_BOOTSTRAP",
    show_default=True,
    help="Broker HOST:PORT (any Kafka-compatible broker).",
)


def _client(bootstrap: str):
    from logbroker.client import KafkaClient

    try:
        return KafkaClient(bootstrap)
    except OSError as exc:
        raise click.ClickException(f"cannot reach {bootstrap}: {exc}") from None


def _fail(exc: Exception) -> None:
    raise click.ClickException(str(exc)) from None


@main.group()
def topics() -> None:
    """List, create, describe and delete topics."""


@topics.command("list")
@BOOTSTRAP
def topics_list(bootstrap: str) -> None:
    from rich.console import Console
    from rich.table import Table

    with _client(bootstrap) as c:
        table = Table("topic", "partitions", "topic id")
        for t in c.list_topics():
            table.add_row(t.name, str(t.partitions), t.topic_id)
    Console().print(table)


@topics.command("create")
@BOOTSTRAP
@click.argument("name")
@click.option("-p", "--partitions", default=1, show_default=True)
@click.option("-r", "--replication-factor", default=1, show_default=True)
@click.option("-c", "--config", "configs", multiple=True, help="KEY=VALUE topic config (repeatable).")
def topics_create(
    bootstrap: str, name: str, partitions: int, replication_factor: int, configs: tuple[str, ...]
) -> None:
    from logbroker.client import BrokerError

    cfg = {}
    for item in configs:
        k, sep, v = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--config")
        cfg[k] = v
    with _client(bootstrap) as c:
        try:
            c.create_topic(name, partitions, replication_factor, cfg)
        except BrokerError as exc:
            _fail(exc)
    click.echo(f"created topic {name} with {partitions} partition(s)")


@topics.command("describe")
@BOOTSTRAP
@click.argument("name")
def topics_describe(bootstrap: str, name: str) -> None:
    from rich.console import Console
    from rich.table import Table

    from logbroker.client import BrokerError

    with _client(bootstrap) as c:
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
        except BrokerError as exc:
            _fail(exc)
    console = Console()
    console.print(f"[bold]{name}[/bold]  id={t.topic_id}  partitions={len(offsets)}")
    table = Table("partition", "leader", "start offset", "end offset", "records")
    for part, leader, lo, hi in offsets:
        table.add_row(str(part), str(leader), str(lo), str(hi), str(hi - lo))
    console.print(table)
    ctable = Table("config", "value", "source")
    sources = {1: "topic", 4: "broker", 5: "default"}
    for k, (v, src) in sorted(configs.items()):
        ctable.add_row(k, str(v), sources.get(src, str(src)))
    console.print(ctable)


@topics.command("delete")
@BOOTSTRAP
@click.argument("name")
def topics_delete(bootstrap: str, name: str) -> None:
    from logbroker.client import BrokerError

    with _client(bootstrap) as c:
        try:
            c.delete_topic(name)
        except BrokerError as exc:
            _fail(exc)
    click.echo(f"deleted topic {name}")


# ---------------------------------------------------------------------- consumer groups


def _console():
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 160)  # pipes and logs: keep member ids on one line
    return console


def _group_admin(c):
    from logbroker.client import GroupAdmin

    return GroupAdmin(c)


@main.group()
def groups() -> None:
    """List, describe and delete consumer groups; reset their committed offsets."""


@groups.command("list")
@BOOTSTRAP
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def groups_list(bootstrap: str, as_json: bool) -> None:
    """Every group of every broker, with its state and type."""
    import json

    from rich.table import Table

    from logbroker.client import BrokerError

    with _client(bootstrap) as c:
        try:
            listed = _group_admin(c).list_groups()
        except (BrokerError, OSError) as exc:
            _fail(exc)
    if as_json:
        click.echo(json.dumps([vars(g) for g in listed], indent=2))
        return
    table = Table("group", "state", "protocol type", "group type")
    for g in listed:
        table.add_row(g.group_id, g.state or "-", g.protocol_type or "-", g.group_type or "-")
    console = _console()
    console.print(table if listed else "no consumer groups")


@groups.command("describe")
@BOOTSTRAP
@click.argument("group")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def groups_describe(bootstrap: str, group: str, as_json: bool) -> None:
    """State, members and their partitions, and committed offset / log end / lag per partition."""
    import json

    from rich.table import Table

    from logbroker.client import BrokerError
    from logbroker.client.groups import lag_report

    with _client(bootstrap) as c:
        admin = _group_admin(c)
        try:
            desc = admin.describe_group(group)
            rows = admin.lag(desc)
        except (BrokerError, OSError) as exc:
            _fail(exc)
    if desc.state == "Dead" and not desc.members and not rows:
        raise click.ClickException(f"consumer group {group!r} does not exist")
    report = lag_report(desc, rows)
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    console = _console()
    node, host, port = desc.coordinator
    protocol = f"{desc.protocol_type or '-'}/{desc.protocol or '-'}"
    console.print(
        f"[bold]{group}[/bold]  state={desc.state}  type={desc.group_type or '-'}  protocol={protocol}  "
        f"members={len(desc.members)}  "
        f"coordinator={node} ({host}:{port})",
        highlight=False,
    )
    if desc.note:
        console.print(f"[yellow]{desc.note}[/]")
    if desc.members:
        mt = Table("member id", "instance id", "client id", "host", "partitions", title="members")
        for m in desc.members:
            parts = m.assignment_text() or ("-" if m.assignment_error is None else f"? ({m.assignment_error})")
            mt.add_row(m.member_id, m.instance_id or "-", m.client_id, m.host, parts)
        console.print(mt)
    ot = Table("topic", "partition", "committed", "log end", "lag", "member id", "host", title="offsets")
    for col in ot.columns[1:5]:
        col.justify = "right"

    def num(v: int | None) -> str:
        return "-" if v is None else str(v)

    for r in rows:
        ot.add_row(
            r.topic,
            str(r.partition),
            num(r.committed),
            num(r.log_end),
            num(r.lag),
            r.member.member_id if r.member else "-",
            r.member.host if r.member else "-",
        )
    totals = report["totals"]
    ot.add_section()
    ot.add_row(
        "[bold]total[/]", str(totals["partitions"]), str(totals["committed_partitions"]), str(totals["log_end"]),
        num(totals["lag"]), "", "",
    )  # fmt: skip
    console.print(ot)


@groups.command("delete")
@BOOTSTRAP
@click.argument("group_ids", metavar="GROUP...", nargs=-1, required=True)
def groups_delete(bootstrap: str, group_ids: tuple[str, ...]) -> None:
    """Delete groups and their committed offsets (only groups without active members)."""
    from logbroker.client import BrokerError
    from logbroker.protocol.errors import ErrorCode

    with _client(bootstrap) as c:
        try:
            codes = _group_admin(c).delete_groups(group_ids)
        except (BrokerError, OSError) as exc:
            _fail(exc)
    failed = 0
    for g in dict.fromkeys(group_ids):
        code = codes.get(g, int(ErrorCode.UNKNOWN_SERVER_ERROR))
        if code == 0:
            click.echo(f"deleted group {g}")
            continue
        failed += 1
        if code == ErrorCode.NON_EMPTY_GROUP:
            msg = "it has active members; stop its consumers first (NON_EMPTY_GROUP)"
        elif code == ErrorCode.GROUP_ID_NOT_FOUND:
            msg = "no such group (GROUP_ID_NOT_FOUND)"
        else:
            msg = BrokerError(code).name
        click.echo(f"Error: cannot delete group {g}: {msg}", err=True)
    if failed:
        sys.exit(1)


def _parse_topic_spec(spec: str) -> tuple[str, list[int] | None]:
    name, sep, parts = spec.partition(":")
    if not name:
        raise click.BadParameter(f"{spec!r}: empty topic name", param_hint="--topic")
    if not sep:
        return name, None
    try:
        ids = sorted({int(p) for p in parts.split(",") if p.strip()})
    except ValueError:
        raise click.BadParameter(f"{spec!r} is not TOPIC or TOPIC:P[,P...]", param_hint="--topic") from None
    if not ids or ids[0] < 0:
        raise click.BadParameter(f"{spec!r} names no valid partition", param_hint="--topic")
    return name, ids


def _parse_datetime_ms(text: str) -> int:
    from datetime import datetime

    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not ISO 8601 (e.g. 2024-05-01T12:00:00, 2024-05-01T12:00:00.000+02:00, ...Z)",
            param_hint="--to-datetime",
        ) from None
    if when.tzinfo is None:
        when = when.astimezone()  # local time, as Kafka's tool
    return int(when.timestamp() * 1000)


@groups.command("reset-offsets")
@BOOTSTRAP
@click.argument("group")
@click.option(
    "--topic",
    "topic_specs",
    multiple=True,
    metavar="TOPIC[:P,...]",
    help="Topic, or some of its partitions (repeatable).",
)
@click.option("--all-topics", is_flag=True, help="Every partition the group has committed offsets for.")
@click.option("--to-earliest", is_flag=True, help="Log start offset.")
@click.option("--to-latest", is_flag=True, help="Log end offset.")
@click.option("--to-datetime", metavar="ISO8601", help="First offset stamped at or after this time (no zone: local).")
@click.option("--to-offset", type=int, metavar="N", help="Offset N.")
@click.option("--shift-by", type=int, metavar="N", help="Committed offset plus N (N may be negative).")
@click.option("--execute", is_flag=True, help="Commit the new offsets (default: only print the plan).")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
def groups_reset_offsets(
    bootstrap: str,
    group: str,
    topic_specs: tuple[str, ...],
    all_topics: bool,
    to_earliest: bool,
    to_latest: bool,
    to_datetime: str | None,
    to_offset: int | None,
    shift_by: int | None,
    execute: bool,
    as_json: bool,
) -> None:
    """Reset committed offsets of an inactive group. A dry run printing the plan unless --execute.

    New offsets are clamped to [log start, log end] of each partition. The group must have no active
    members (state Empty, or Dead/unknown, in which case --execute creates its offsets)."""
    import json

    from rich.table import Table

    from logbroker.client import BrokerError, ResetStrategy
    from logbroker.client.groups import reset_report

    chosen = [
        (name, value)
        for name, value, given in (
            ("earliest", 0, to_earliest),
            ("latest", 0, to_latest),
            ("datetime", to_datetime, to_datetime is not None),
            ("offset", to_offset, to_offset is not None),
            ("shift", shift_by, shift_by is not None),
        )
        if given
    ]
    if len(chosen) != 1:
        raise click.UsageError("give exactly one of --to-earliest, --to-latest, --to-datetime, --to-offset, --shift-by")
    if bool(topic_specs) == all_topics:
        raise click.UsageError("give --topic (repeatable) or --all-topics")
    kind, value = chosen[0]
    if kind == "datetime":
        value = _parse_datetime_ms(str(value))
    elif kind == "offset" and int(value or 0) < 0:
        raise click.BadParameter("must be >= 0", param_hint="--to-offset")
    strategy = ResetStrategy(kind, int(value or 0))
    topics = [_parse_topic_spec(s) for s in topic_specs]

    with _client(bootstrap) as c:
        admin = _group_admin(c)
        try:
            desc = admin.describe_group(group)
            if not desc.inactive:
                raise click.ClickException(
                    f"cannot reset offsets of group {group!r}: it is {desc.state} with {len(desc.members)} "
                    "member(s). Offsets can only be reset while the group is inactive (Empty); stop its "
                    "consumers first."
                )
            partitions = admin.reset_partitions(group, topics, all_topics)
            plan = admin.plan_reset(group, partitions, strategy)
            if execute and plan:
                admin.execute_reset(group, plan)
        except (BrokerError, ValueError, OSError) as exc:
            _fail(exc)
    failed = [e for e in plan if e.error]
    if as_json:
        click.echo(json.dumps(reset_report(group, strategy, plan, execute), indent=2))
        if failed:
            sys.exit(1)
        return
    console = _console()
    if not plan:
        console.print(f"nothing to reset: group {group} has no committed offsets" if all_topics else "no partitions")
        return
    title = f"group {group}: reset {strategy.describe()}" + ("" if execute else " (dry run)")
    table = Table("group", "topic", "partition", "current offset", "new offset", "note", title=title)
    for col in table.columns[2:5]:
        col.justify = "right"
    for e in plan:
        notes = []
        if e.clamped:
            notes.append(f"clamped from {e.requested}")
        if e.error:
            notes.append(f"[red]failed: {e.error}[/]")
        table.add_row(
            group,
            e.topic,
            str(e.partition),
            "-" if e.current is None else str(e.current),
            str(e.target),
            "; ".join(notes),
        )
    console.print(table)
    if not execute:
        console.print("dry run: nothing was committed; add --execute to apply this plan")
    elif failed:
        console.print(f"[red]{len(failed)} of {len(plan)} partition(s) failed[/]")
        sys.exit(1)
    else:
        console.print(f"committed new offsets for {len(plan)} partition(s) of group {group}")


@main.command()
@BOOTSTRAP
@click.option("-t", "--topic", required=True)
@click.option("-p", "--partition", default=0, show_default=True)
@click.option("-K", "--key-delimiter", default=None, help="Split each line into KEY<delim>VALUE.")
@click.option("-H", "--header", "headers", multiple=True, help="NAME=VALUE header on every record (repeatable).")
@click.option("-z", "--compression", type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]), default="none")
@click.option("--acks", type=click.Choice(["-1", "0", "1", "all"]), default="all", show_default=True)
@click.option("--batch-size", default=500, show_default=True, help="Records per produce request.")
@click.option("-Z", "--null-empty", is_flag=True, help="Send empty keys/values as null (as kcat -Z).")
@click.argument("values", nargs=-1)
def produce(
    bootstrap: str,
    topic: str,
    partition: int,
    key_delimiter: str | None,
    headers: tuple[str, ...],
    compression: str,
    acks: str,
    batch_size: int,
    null_empty: bool,
    values: tuple[str, ...],
) -> None:
    """Produce VALUES, or one record per line of standard input (kcat -P style)."""
    from logbroker.client import BrokerError
    from logbroker.protocol.records import Compression, NewRecord

    hdrs = []
    for h in headers:
        k, sep, v = h.partition("=")
        if not sep:
            raise click.BadParameter(f"{h!r} is not NAME=VALUE", param_hint="--header")
        hdrs.append((k, v.encode()))
    lines = values or (line.rstrip("\n") for line in sys.stdin)

    def to_record(line: str) -> NewRecord:
        key: bytes | None = None
        value: bytes | None = line.encode()
        if key_delimiter is not None and key_delimiter in line:
            k, _, v = line.partition(key_delimiter)
            key, value = k.encode(), v.encode()
        if null_empty:
            key = key or None
            value = value or None
        return NewRecord(key, value, hdrs)

    ack = -1 if acks == "all" else int(acks)
    sent = 0
    with _client(bootstrap) as c:
        batch: list[NewRecord] = []
        try:
            for line in lines:
                batch.append(to_record(line))
                if len(batch) >= batch_size:
                    c.produce(topic, partition, batch, Compression.NAMES[compression], ack)
                    sent += len(batch)
                    batch = []
            if batch:
                c.produce(topic, partition, batch, Compression.NAMES[compression], ack)
                sent += len(batch)
        except BrokerError as exc:
            _fail(exc)
    click.echo(f"produced {sent} record(s) to {topic}-{partition}", err=True)


@main.command()
@BOOTSTRAP
@click.option("-t", "--topic", required=True)
@click.option("-p", "--partition", "partitions", type=int, multiple=True, help="Partition(s); default all.")
@click.option(
    "-o", "--offset", default="end", show_default=True, help="beginning, end, an offset, or -N for N before the end."
)
@click.option("--from-beginning", is_flag=True, help="Same as --offset beginning.")
@click.option("-c", "--count", type=int, default=None, help="Stop after this many records.")
@click.option("-e", "--exit-at-end", is_flag=True, help="Stop when every partition is read to its end.")
@click.option("-f", "--format", "fmt", type=click.Choice(["value", "kv", "json"]), default="value", show_default=True)
@click.option("--idle-timeout", default=2.0, show_default=True, help="Seconds without data before stopping.")
def consume(
    bootstrap: str,
    topic: str,
    partitions: tuple[int, ...],
    offset: str,
    from_beginning: bool,
    count: int | None,
    exit_at_end: bool,
    fmt: str,
    idle_timeout: float,
) -> None:
    """Print records of a topic (kcat -C style; partitions are assigned, no consumer group)."""
    import base64
    import json

    from logbroker.client import BrokerError

    if from_beginning:
        offset = "beginning"
    printed = 0
    with _client(bootstrap) as c:
        try:
            parts = list(partitions) or [p.partition_index for p in c.describe_topic(topic).partitions]
            positions = {}
            ends = {}
            for p in parts:
                lo, hi = c.list_offset(topic, p, -2), c.list_offset(topic, p, -1)
                ends[p] = hi
                if offset == "beginning":
                    positions[p] = lo
                elif offset == "end":
                    positions[p] = hi
                elif offset.lstrip("-").isdigit():
                    n = int(offset)
                    positions[p] = max(lo, hi + n) if n < 0 else n
                else:
                    raise click.BadParameter(f"{offset!r}", param_hint="--offset")
            idle_since = None
            import time as _time

            while count is None or printed < count:
                got = 0
                for p in parts:
                    recs, hwm = c.fetch(topic, p, positions[p], max_wait_ms=100)
                    ends[p] = hwm
                    for r in recs:
                        if count is not None and printed >= count:
                            break
                        _print_record(r, p, fmt, base64, json)
                        positions[p] = r.offset + 1
                        printed += 1
                        got += 1
                if exit_at_end and all(positions[p] >= ends[p] for p in parts):
                    break
                if got:
                    idle_since = None
                else:
                    idle_since = idle_since or _time.monotonic()
                    if _time.monotonic() - idle_since > idle_timeout:
                        break
        except BrokerError as exc:
            _fail(exc)
    click.echo(f"consumed {printed} record(s)", err=True)


def _print_record(r, partition, fmt, base64, json) -> None:
    def text(b: bytes | None) -> str | None:
        if b is None:
            return None
        try:
            return b.decode()
        except UnicodeDecodeError:
            return "base64:" + base64.b64encode(b).decode()

    if fmt == "value":
        click.echo(text(r.value) or "")
    elif fmt == "kv":
        click.echo(f"{text(r.key) or ''}\t{text(r.value) or ''}")
    else:
        click.echo(
            json.dumps(
                {
                    "partition": partition,
                    "offset": r.offset,
                    "timestamp": r.timestamp,
                    "key": text(r.key),
                    "value": text(r.value),
                    "headers": [[k, text(v)] for k, v in r.headers],
                }
            )
        )


@main.command()
@click.option("--targets", default="logbroker,tansu,kafka", show_default=True, help="Comma list of brokers to run.")
@click.option(
    "--workloads",
    default="throughput,latency,groups",
    show_default=True,
    help="Comma list: throughput (produce/consume), latency (acks=all), groups (assignment and rebalance times).",
)
@click.option("--quick", is_flag=True, help="About 10x fewer records.")
@click.option("--records-100b", type=int, help="100-byte records to produce and consume.")
@click.option("--records-1kb", type=int, help="1 KB records to produce and consume.")
@click.option("--latency-samples", type=int, help="Sequential acks=all produces.")
@click.option("--out", default="bench-results", show_default=True, type=click.Path(path_type=Path))
@click.option("--fsync", type=click.Choice(["always", "interval", "never"]), default="always", show_default=True)
@click.option("--profile", is_flag=True, help="Run the logbroker server under cProfile and print where time goes.")
@click.option("--kafka-jar-dir", type=click.Path(path_type=Path), help="Apache Kafka jars (default .ci/cache/jars).")
@click.option("--no-chart", is_flag=True)
def bench(
    targets: str,
    workloads: str,
    quick: bool,
    records_100b: int | None,
    records_1kb: int | None,
    latency_samples: int | None,
    out: Path,
    fsync: str,
    profile: bool,
    kafka_jar_dir: Path | None,
    no_chart: bool,
) -> None:
    """Throughput, acks=all latency and consumer-group timings, logbroker and its peers side by side."""
    from logbroker.bench import parse_targets, parse_workloads, run_bench

    try:
        names = parse_targets(targets)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--targets") from None
    try:
        selected = parse_workloads(workloads)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--workloads") from None
    results = run_bench(
        names,
        quick=quick,
        records_100b=records_100b,
        records_1kb=records_1kb,
        latency_samples=latency_samples,
        out_dir=out,
        fsync=fsync,
        profile=profile,
        kafka_jar_dir=kafka_jar_dir,
        chart=not no_chart,
        workloads=selected,
    )
    if any(r["status"] not in ("ok", "skipped") for r in results["targets"].values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
