"""`logbroker topics`: list, create, describe, delete, alter configs, add partitions and delete records, on
any Kafka-compatible broker through confluent-kafka's AdminClient (shaped after rpk and Kafka's tools)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from logbroker.cli.common import (
    BOOTSTRAP,
    SECURITY,
    Admin,
    AdminGroup,
    BadInput,
    admin,
    cell,
    echo_json,
    kafka_failure,
    utf8_name,
    wide_console,
)

if TYPE_CHECKING:
    from logbroker._kafka.settings import KafkaSettings

JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON (keys below) instead of a table.")
_TOPIC = click.argument("name", callback=utf8_name("topic"))
# ConfigSource -> the words of the table (Kafka's tool: DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG ...).
_SOURCES = {1: "topic", 2: "broker", 3: "broker", 4: "broker", 5: "default", 8: "group"}


@click.group(cls=AdminGroup)
def topics() -> None:
    """List, create, describe, alter and delete topics; add partitions; delete records."""


def _key_values(items: tuple[str, ...], option: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k.strip():
            raise BadInput(f"{option}: {item!r} is not KEY=VALUE")
        out[k.strip()] = v
    return out


def _describe(a: Admin, names: list[str], what: str) -> dict[str, Any]:
    """TopicDescription per name (the first failure, e.g. UNKNOWN_TOPIC_OR_PARTITION, ends the command)."""
    from confluent_kafka import TopicCollection

    if not names:
        return {}
    futures = a.call(a.client.describe_topics, TopicCollection(names), what=what)
    return {name: a.result(fut, what) for name, fut in futures.items()}


# ------------------------------------------------------------------------------------------------ list


@topics.command("list")
@BOOTSTRAP
@SECURITY
@click.option("--exclude-internal", is_flag=True, help="Leave out internal topics (__consumer_offsets ...).")
@JSON
def topics_list(bootstrap: str, security: KafkaSettings | None, exclude_internal: bool, as_json: bool) -> None:
    """Every topic with its partition count, replication factor and topic id.

    \b
    --json: a list of {"topic", "partitions", "replication_factor", "topic_id", "internal"}.
    """
    from rich.table import Table

    with admin(bootstrap, security) as a:
        md = a.metadata()
        names = sorted(md.topics)
        described = _describe(a, names, "describe topics")
    rows = []
    for name in names:
        d = described[name]
        if exclude_internal and d.is_internal:
            continue
        rf = max((len(p.replicas) for p in d.partitions), default=0)
        rows.append({"topic": name, "partitions": len(d.partitions), "replication_factor": rf,
                     "topic_id": str(d.topic_id), "internal": bool(d.is_internal)})  # fmt: skip
    if as_json:
        echo_json(rows)
        return
    table = Table("topic", "partitions", "replicas", "topic id", "internal")
    for r in rows:
        table.add_row(cell(r["topic"]), str(r["partitions"]), str(r["replication_factor"]), r["topic_id"],
                      "yes" if r["internal"] else "")  # fmt: skip
    wide_console().print(table if rows else "no topics")


# ------------------------------------------------------------------------------------------------ create


@topics.command("create")
@BOOTSTRAP
@SECURITY
@_TOPIC
@click.option("-p", "--partitions", default=1, show_default=True, type=click.IntRange(min=1))
@click.option("-r", "--replication-factor", default=1, show_default=True, type=click.IntRange(min=1))
@click.option("-c", "--config", "configs", multiple=True, metavar="KEY=VALUE", help="Topic config (repeatable).")
def topics_create(
    bootstrap: str,
    security: KafkaSettings | None,
    name: str,
    partitions: int,
    replication_factor: int,
    configs: tuple[str, ...],
) -> None:
    """Create topic NAME; done once every partition has a leader (the next command can use it)."""
    from confluent_kafka.admin import NewTopic

    cfg = _key_values(configs, "--config")
    with admin(bootstrap, security) as a:
        new = NewTopic(name, partitions, replication_factor, config=cfg)
        futures = a.call(a.client.create_topics, [new], what=f"create topic {name}")
        a.result(futures[name], f"create topic {name}")
        _wait_led(a, name, partitions)
    click.echo(f"created topic {name} with {partitions} partition(s)")


def _wait_led(a: Admin, name: str, partitions: int) -> None:
    """Until metadata shows `partitions` partitions of `name`, each with a leader (Kafka elects them after it
    answers CreateTopics/CreatePartitions). Bounded by the command's timeout; not led by then is no error."""
    import time

    deadline = time.monotonic() + a.timeout
    while time.monotonic() < deadline:
        t = a.metadata(name).topics.get(name)
        led = t is not None and t.error is None and len(t.partitions) >= partitions
        if led and all(p.leader >= 0 and p.error is None for p in t.partitions.values()):
            return
        time.sleep(0.1)


# ------------------------------------------------------------------------------------------------ describe


@topics.command("describe")
@BOOTSTRAP
@SECURITY
@_TOPIC
@JSON
def topics_describe(bootstrap: str, security: KafkaSettings | None, name: str, as_json: bool) -> None:
    """Partitions (leader, replicas, in-sync replicas, offsets, records, bytes on disk) and configs of a topic.

    \b
    --json: {"topic", "topic_id", "internal",
             "partitions": [{"partition", "leader", "replicas", "isr", "start_offset", "end_offset",
                             "records", "size_bytes"}],
             "configs": [{"name", "value", "source", "read_only", "sensitive"}]}
    A size is null where the broker does not report it (DescribeLogDirs); a sensitive value is null.
    """
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import ConfigResource, OffsetSpec
    from rich.table import Table

    with admin(bootstrap, security) as a:
        d = _describe(a, [name], f"describe topic {name}")[name]
        parts = sorted(d.partitions, key=lambda p: p.id)
        res = ConfigResource("topic", name)
        cfg_futures = a.call(a.client.describe_configs, [res], what=f"describe configs of {name}")
        ends: dict[str, dict[int, int]] = {}
        for label, spec in (("start", OffsetSpec.earliest()), ("end", OffsetSpec.latest())):
            got = a.list_offsets({TopicPartition(name, p.id): spec for p in parts}, f"list offsets of {name}")
            for outcome in got.values():
                if isinstance(outcome, BaseException):
                    raise kafka_failure(outcome, f"list offsets of {name}")
            ends[label] = {tp.partition: outcome.offset for tp, outcome in got.items()}
        entries = a.result(cfg_futures[res], f"describe configs of {name}")
        sizes = _sizes(bootstrap, security, name, {p.id: p.leader.id if p.leader else -1 for p in parts})
    report = {
        "topic": name,
        "topic_id": str(d.topic_id),
        "internal": bool(d.is_internal),
        "partitions": [
            {
                "partition": p.id,
                "leader": p.leader.id if p.leader is not None else None,
                "replicas": [n.id for n in p.replicas],
                "isr": [n.id for n in p.isr],
                "start_offset": ends["start"][p.id],
                "end_offset": ends["end"][p.id],
                "records": ends["end"][p.id] - ends["start"][p.id],
                "size_bytes": sizes.get(p.id),
            }
            for p in parts
        ],
        "configs": [
            {
                "name": e.name,
                "value": e.value,
                "source": _SOURCES.get(int(getattr(e.source, "value", e.source)), "unknown"),
                "read_only": bool(e.is_read_only),
                "sensitive": bool(e.is_sensitive),
            }
            for e in sorted(entries.values(), key=lambda e: e.name)
        ],
    }
    if as_json:
        echo_json(report)
        return
    console = wide_console()
    console.print(f"[bold]{cell(name)}[/bold]  id={d.topic_id}  partitions={len(parts)}", highlight=False)
    table = Table("partition", "leader", "replicas", "isr", "start offset", "end offset", "records", "size (bytes)")
    for col in table.columns[4:]:
        col.justify = "right"
    for p in report["partitions"]:
        table.add_row(str(p["partition"]), cell(p["leader"]), ",".join(map(str, p["replicas"])),
                      ",".join(map(str, p["isr"])), str(p["start_offset"]), str(p["end_offset"]), str(p["records"]),
                      cell(p["size_bytes"]))  # fmt: skip
    console.print(table)
    ctable = Table("config", "value", "source")
    for c in report["configs"]:
        ctable.add_row(cell(c["name"]), "(sensitive)" if c["sensitive"] else cell(c["value"]), c["source"])
    console.print(ctable)


def _sizes(bootstrap: str, security: KafkaSettings | None, name: str, leaders: dict[int, int]) -> dict[int, int]:
    """Bytes on disk per partition (DescribeLogDirs, which confluent-kafka has no call for: cli/wire_admin.py),
    on the same security settings. Best effort: a broker that does not serve it (or refuses us) leaves the
    sizes out."""
    from logbroker.cli.wire_admin import partition_sizes, wire_admin

    try:
        with wire_admin(bootstrap, security, timeout=10.0) as w:
            return partition_sizes(w, name, leaders)
    except (click.ClickException, Exception):
        return {}


# ------------------------------------------------------------------------------------------------ delete


@topics.command("delete")
@BOOTSTRAP
@SECURITY
@click.argument("names", metavar="NAME...", nargs=-1, required=True, callback=utf8_name("topic"))
def topics_delete(bootstrap: str, security: KafkaSettings | None, names: tuple[str, ...]) -> None:
    """Delete topics (each one reported; exit 1 if any failed)."""
    import sys

    with admin(bootstrap, security) as a:
        futures = a.call(a.client.delete_topics, list(dict.fromkeys(names)), what="delete topics")
        results = a.results(futures, "delete topics")
    failed = 0
    for name, outcome in results.items():
        if isinstance(outcome, BaseException):
            failed += 1
            click.echo(f"Error: {kafka_failure(outcome, f'cannot delete topic {name}').format_message()}", err=True)
        else:
            click.echo(f"deleted topic {name}")
    if failed:
        sys.exit(1)


# ------------------------------------------------------------------------------------------------ alter-config


@topics.command("alter-config")
@BOOTSTRAP
@SECURITY
@_TOPIC
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Set a topic config (repeatable).")
@click.option("--delete", "deletes", multiple=True, metavar="KEY", help="Back to the default (repeatable).")
def topics_alter_config(
    bootstrap: str, security: KafkaSettings | None, name: str, sets: tuple[str, ...], deletes: tuple[str, ...]
) -> None:
    """Change configs of topic NAME (IncrementalAlterConfigs: other configs stay as they are).

    A name the broker does not list for the topic is refused before anything changes (exit 2)."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    to_set = _key_values(sets, "--set")
    to_delete = [k.strip() for k in deletes]
    if not to_set and not to_delete:
        raise BadInput("nothing to change: give --set KEY=VALUE or --delete KEY")
    if both := sorted(set(to_set) & set(to_delete)):
        raise BadInput(f"{', '.join(both)}: both --set and --delete")
    with admin(bootstrap, security) as a:
        res = ConfigResource("topic", name)
        _describe(a, [name], f"describe topic {name}")  # UNKNOWN_TOPIC_OR_PARTITION before the configs
        known = a.result(a.call(a.client.describe_configs, [res], what="describe configs")[res], "describe configs")
        unknown = [k for k in [*to_set, *to_delete] if k not in known]
        if unknown:
            raise BadInput(f"unknown topic config {', '.join(unknown)} (`logbroker topics describe {name}` lists them)")
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in to_set.items()]
        entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in to_delete]
        change = ConfigResource("topic", name, incremental_configs=entries)
        futures = a.call(a.client.incremental_alter_configs, [change], what=f"alter configs of {name}")
        a.result(futures[change], f"alter configs of {name}")
    done = [f"{k}={v}" for k, v in to_set.items()] + [f"{k} (default)" for k in to_delete]
    click.echo(f"altered topic {name}: {', '.join(done)}")


# ------------------------------------------------------------------------------------------------ add-partitions


@topics.command("add-partitions")
@BOOTSTRAP
@SECURITY
@_TOPIC
@click.option("-n", "--num", type=click.IntRange(min=1), required=True, help="How many partitions to add.")
def topics_add_partitions(bootstrap: str, security: KafkaSettings | None, name: str, num: int) -> None:
    """Add NUM partitions to topic NAME (keys hash to other partitions from then on)."""
    from confluent_kafka.admin import NewPartitions

    with admin(bootstrap, security) as a:
        before = len(_describe(a, [name], f"describe topic {name}")[name].partitions)
        futures = a.call(a.client.create_partitions, [NewPartitions(name, before + num)], what="add partitions")
        a.result(futures[name], f"add partitions to {name}")
        _wait_led(a, name, before + num)
    click.echo(f"topic {name}: {before} -> {before + num} partitions")


# ------------------------------------------------------------------------------------------------ delete-records


def _records_file(path: Path) -> list[tuple[str, int, int]]:
    """kafka-delete-records' --offset-json-file: {"partitions": [{"topic", "partition", "offset"}], "version": 1}."""
    try:
        doc = json.loads(path.read_bytes())
        entries = [(str(e["topic"]), int(e["partition"]), int(e["offset"])) for e in doc["partitions"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        shape = '{"partitions": [{"topic": ..., "partition": ..., "offset": ...}]}'
        raise BadInput(f"--offset-json-file {path}: not kafka-delete-records' format {shape} ({exc})") from None
    if not entries:
        raise BadInput(f"--offset-json-file {path}: no partitions")
    return entries


@topics.command("delete-records")
@BOOTSTRAP
@SECURITY
@click.argument("name", required=False, callback=utf8_name("topic"))
@click.option("-p", "--partition", "partitions", type=click.IntRange(min=0), multiple=True, help="Repeatable.")
@click.option("-o", "--offset", type=click.IntRange(min=-1), help="Delete records before OFFSET (-1: all of them).")
@click.option("--offset-json-file", type=click.Path(dir_okay=False, path_type=Path),
              help="Kafka's format: {\"partitions\": [{\"topic\", \"partition\", \"offset\"}]}.")  # fmt: skip
@JSON
def topics_delete_records(
    bootstrap: str,
    security: KafkaSettings | None,
    name: str | None,
    partitions: tuple[int, ...],
    offset: int | None,
    offset_json_file: Path | None,
    as_json: bool,
) -> None:
    """Delete the records before an offset: NAME --partition P --offset O, or --offset-json-file FILE as
    kafka-delete-records reads it. Prints each partition's new log start offset.

    \b
    --json: a list of {"topic", "partition", "low_watermark"}.
    """
    import sys

    from confluent_kafka import TopicPartition

    if offset_json_file is not None:
        if name or partitions or offset is not None:
            raise BadInput("give either NAME --partition P --offset O or --offset-json-file, not both")
        wanted = _records_file(offset_json_file)
    else:
        if not name or not partitions or offset is None:
            raise BadInput("give NAME --partition P (repeatable) --offset O, or --offset-json-file FILE")
        wanted = [(name, p, offset) for p in dict.fromkeys(partitions)]
    with admin(bootstrap, security) as a:
        known = _describe(a, sorted({t for t, _, _ in wanted}), "describe topics")
        for t, p, _ in wanted:
            ids = {x.id for x in known[t].partitions}
            if p not in ids:
                raise BadInput(f"UNKNOWN_TOPIC_OR_PARTITION: topic {t} has no partition {p} (it has {len(ids)})")
        request = [TopicPartition(t, p, o) for t, p, o in wanted]
        results = a.results(a.call(a.client.delete_records, request, what="delete records"), "delete records")
    rows, failed = [], 0
    for tp, outcome in sorted(results.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
        if isinstance(outcome, BaseException):
            failed += 1
            where = f"cannot delete records of {tp.topic}-{tp.partition}"
            click.echo(f"Error: {kafka_failure(outcome, where).format_message()}", err=True)
            continue
        rows.append({"topic": tp.topic, "partition": tp.partition, "low_watermark": outcome.low_watermark})
    if as_json:
        echo_json(rows)
    else:
        for r in rows:
            click.echo(f"{r['topic']} partition {r['partition']}: log start offset now {r['low_watermark']}")
    if failed:
        sys.exit(1)
