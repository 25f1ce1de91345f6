"""`logbroker produce` and `logbroker consume`: records from standard input, records to standard output
(kcat -P / -C style)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from logbroker.cli.common import BOOTSTRAP, SECURITY, client, fail

if TYPE_CHECKING:
    from logbroker._kafka.settings import KafkaSettings


@click.command()
@BOOTSTRAP
@SECURITY
@click.option("-t", "--topic", required=True)
@click.option(
    "-p",
    "--partition",
    type=int,
    default=None,
    help="Partition of every record. Default: a keyed record goes where the Java client puts it (murmur2 of the "
    "key), one without a key to partition 0.",
)
@click.option("-K", "--key-delimiter", default=None, help="Split each line into KEY<delim>VALUE.")
@click.option("-H", "--header", "headers", multiple=True, help="NAME=VALUE header on every record (repeatable).")
@click.option("-z", "--compression", type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]), default="none")
@click.option("--acks", type=click.Choice(["-1", "0", "1", "all"]), default="all", show_default=True)
@click.option("--batch-size", default=500, show_default=True, help="Records per produce request.")
@click.option("-Z", "--null-empty", is_flag=True, help="Send empty keys/values as null (as kcat -Z).")
@click.argument("values", nargs=-1)
def produce(
    bootstrap: str,
    security: KafkaSettings | None,
    topic: str,
    partition: int | None,
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
    from logbroker.client.partitioner import partition_for_key
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
    codec = Compression.NAMES[compression]
    sent: dict[int, int] = {}
    with client(bootstrap, security) as c:
        pending: dict[int, list[NewRecord]] = {}
        partition_count: int | None = None

        def target(record: NewRecord) -> int:
            nonlocal partition_count
            if partition is not None:
                return partition
            if record.key is None:
                return 0
            if partition_count is None:
                partition_count = c.partition_count(topic, auto_create=True)
            return partition_for_key(record.key, partition_count)

        def send(p: int) -> None:
            batch = pending.pop(p)
            c.produce(topic, p, batch, codec, ack)
            sent[p] = sent.get(p, 0) + len(batch)

        try:
            for line in lines:
                record = to_record(line)
                p = target(record)
                pending.setdefault(p, []).append(record)
                if len(pending[p]) >= batch_size:
                    send(p)
            for p in sorted(pending):
                send(p)
        except BrokerError as exc:
            fail(exc)
    if partition is not None or len(sent) == 1:
        where = f"{topic}-{partition if partition is not None else next(iter(sent))}"
    elif sent:
        where = f"{topic} partitions {', '.join(map(str, sorted(sent)))}"
    else:
        where = topic
    click.echo(f"produced {sum(sent.values())} record(s) to {where}", err=True)


@click.command()
@BOOTSTRAP
@SECURITY
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
@click.option(
    "--isolation",
    type=click.Choice(["read_committed", "read_uncommitted"]),
    default="read_committed",
    show_default=True,
    help="read_committed skips records of aborted transactions and stops at open ones (kcat's default); "
    "read_uncommitted prints every record.",
)
def consume(
    bootstrap: str,
    security: KafkaSettings | None,
    topic: str,
    partitions: tuple[int, ...],
    offset: str,
    from_beginning: bool,
    count: int | None,
    exit_at_end: bool,
    fmt: str,
    idle_timeout: float,
    isolation: str,
) -> None:
    """Print records of a topic (kcat -C style; partitions are assigned, no consumer group)."""
    import base64
    import json

    from logbroker.client import BrokerError

    if from_beginning:
        offset = "beginning"
    printed = 0
    committed = isolation == "read_committed"
    with client(bootstrap, security) as c:
        try:
            parts = list(partitions) or [p.partition_index for p in c.describe_topic(topic).partitions]
            positions = {}
            ends = {}
            for p in parts:
                lo, hi = c.list_offset(topic, p, -2), c.list_offset(topic, p, -1, read_committed=committed)
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
                    recs, ends[p], after = c.fetch_next(topic, p, positions[p], max_wait_ms=100,
                                                        read_committed=committed)  # fmt: skip
                    for r in recs:
                        if count is not None and printed >= count:
                            break
                        _print_record(r, p, fmt, base64, json)
                        positions[p] = r.offset + 1
                        printed += 1
                        got += 1
                    else:
                        positions[p] = after  # past markers and aborted records as well
                if exit_at_end and all(positions[p] >= ends[p] for p in parts):
                    break
                if got:
                    idle_since = None
                else:
                    idle_since = idle_since or _time.monotonic()
                    if _time.monotonic() - idle_since > idle_timeout:
                        break
        except BrokerError as exc:
            fail(exc)
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
