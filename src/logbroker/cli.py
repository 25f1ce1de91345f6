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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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
    """Produce/consume throughput and acks=all latency, logbroker and its peers side by side."""
    from logbroker.bench import parse_targets, run_bench

    try:
        names = parse_targets(targets)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--targets") from None
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
    )
    if any(r["status"] not in ("ok", "skipped") for r in results["targets"].values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
