"""`logbroker groups`: list, describe (with lag), delete consumer groups; reset, seek and delete their committed
offsets. Through confluent-kafka's AdminClient (which finds coordinators and retries while they move), except
OffsetDelete, which only kafka-python's admin client offers."""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass
from datetime import datetime
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
    error_text,
    kafka_failure,
    utf8_name,
    wide_console,
)

if TYPE_CHECKING:
    from logbroker._kafka.settings import KafkaSettings

TP = tuple[str, int]
JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON (keys below) instead of tables.")
_GROUP = click.argument("group", callback=utf8_name("group"))
# confluent-kafka's ConsumerGroupState -> Kafka's names (as its tools and ListGroups print them).
_STATES = {0: "Unknown", 1: "PreparingRebalance", 2: "CompletingRebalance", 3: "Stable", 4: "Dead", 5: "Empty"}
_TYPES = {0: None, 1: "consumer", 2: "classic"}
_INACTIVE = frozenset({"Empty", "Dead"})  # no member holds partitions: offsets may be rewritten (Kafka's rule)
GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP = 69, 68


def _state(value: Any) -> str:
    return _STATES.get(int(getattr(value, "value", -1)), str(value)) if value is not None else "Unknown"


def _type(value: Any) -> str | None:
    return _TYPES.get(int(getattr(value, "value", 0))) if value is not None else None


@click.group(cls=AdminGroup)
def groups() -> None:
    """List, describe and delete consumer groups; reset, seek and delete their committed offsets."""


# ------------------------------------------------------------------------------------------------ list


@groups.command("list")
@BOOTSTRAP
@SECURITY
@JSON
def groups_list(bootstrap: str, security: KafkaSettings | None, as_json: bool) -> None:
    """Every group of every broker, with its state and type.

    \b
    --json: a list of {"group_id", "state", "protocol_type", "group_type"}; protocol_type is "consumer", or ""
    for a group that only has committed offsets (no member ever joined).
    """
    from rich.table import Table

    with admin(bootstrap, security) as a:
        listed = a.list_groups()
    if listed.errors:
        raise click.ClickException(f"list groups: {error_text(listed.errors[0])}")
    rows = [
        {
            "group_id": g.group_id,
            "state": _state(g.state),
            "protocol_type": "" if g.is_simple_consumer_group else "consumer",
            "group_type": _type(g.type),
        }
        for g in sorted(listed.valid, key=lambda g: g.group_id)
    ]
    if as_json:
        echo_json(rows)
        return
    table = Table("group", "state", "protocol type", "group type")
    for r in rows:
        table.add_row(cell(r["group_id"]), r["state"], r["protocol_type"] or "-", r["group_type"] or "-")
    wide_console().print(table if rows else "no consumer groups")


# ------------------------------------------------------------------------------------------------ describe


@dataclass
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    assignment: list[TP]

    def assignment_text(self) -> str:
        by_topic: dict[str, list[int]] = {}
        for t, p in self.assignment:
            by_topic.setdefault(t, []).append(p)
        return " ".join(f"{t}:{','.join(map(str, ps))}" for t, ps in by_topic.items())


@dataclass
class Group:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    group_type: str | None
    members: list[Member]
    coordinator: tuple[int, str, int] | None

    @property
    def inactive(self) -> bool:
        return self.state in _INACTIVE and not self.members


def _group(a: Admin, group: str) -> Group:
    """The group's description; an unknown group is state Dead without members (as DescribeGroups says)."""
    from confluent_kafka import KafkaException

    fut = a.call(a.client.describe_consumer_groups, [group], what=f"describe group {group}")[group]
    a.wait([fut], f"describe group {group}")
    try:
        d = fut.result()
    except KafkaException as exc:
        if exc.args[0].code() == GROUP_ID_NOT_FOUND:
            return Group(group, "Dead", "", "", None, [], None)
        raise kafka_failure(exc, f"describe group {group}") from None
    members = [
        Member(m.member_id, m.group_instance_id, m.client_id, m.host,
               sorted((tp.topic, tp.partition) for tp in (m.assignment.topic_partitions if m.assignment else [])))
        for m in d.members
    ]  # fmt: skip
    members.sort(key=lambda m: (m.assignment[:1] or [("~", 0)], m.member_id))
    c = d.coordinator
    state = _state(d.state)
    simple = d.is_simple_consumer_group and not members
    return Group(group, state, "" if simple else "consumer", d.partition_assignor or "", _type(d.type), members,
                 (c.id, c.host, c.port) if c is not None else None)  # fmt: skip


def _committed(a: Admin, group: str) -> dict[TP, int]:
    """Every committed offset of the group (partitions without one are left out)."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    what = f"fetch offsets of group {group}"
    futures = a.call(a.client.list_consumer_group_offsets, [ConsumerGroupTopicPartitions(group)], what=what)
    got = a.result(futures[group], what)
    return {(tp.topic, tp.partition): tp.offset for tp in got.topic_partitions or [] if tp.offset >= 0 and not tp.error}


def _offsets(a: Admin, tps: list[TP], spec: Any, strict: bool = True) -> dict[TP, int]:
    """ListOffsets of `tps` at `spec` (earliest, latest, a timestamp: -1 when no record is that recent)."""
    from confluent_kafka import TopicPartition

    if not tps:
        return {}
    what = "list offsets"
    out: dict[TP, int] = {}
    for tp, outcome in a.list_offsets({TopicPartition(t, p): spec for t, p in tps}, what).items():
        if isinstance(outcome, BaseException):
            if strict:
                raise kafka_failure(outcome, f"list offsets of {tp.topic}-{tp.partition}")
            continue
        out[(tp.topic, tp.partition)] = outcome.offset
    return out


@groups.command("describe")
@BOOTSTRAP
@SECURITY
@_GROUP
@JSON
def groups_describe(bootstrap: str, security: KafkaSettings | None, group: str, as_json: bool) -> None:
    """State, members and their partitions, and committed offset / log end / lag per partition.

    \b
    --json: {"group", "state", "protocol_type", "protocol", "group_type",
             "coordinator": {"node_id", "host", "port"},
             "members": [{"member_id", "instance_id", "client_id", "host", "assignment": [{"topic", "partition"}]}],
             "offsets": [{"topic", "partition", "committed", "log_end", "lag", "member_id", "client_id", "host"}],
             "totals": {"partitions", "members", "committed_partitions", "log_end", "lag"}}
    """
    from confluent_kafka.admin import OffsetSpec
    from rich.table import Table

    with admin(bootstrap, security) as a:
        desc = _group(a, group)
        committed = _committed(a, group)
        owners = {tp: m for m in desc.members for tp in m.assignment}
        tps = sorted(set(committed) | set(owners))
        ends = _offsets(a, tps, OffsetSpec.latest(), strict=False)
    if desc.state == "Dead" and not desc.members and not committed:
        raise click.ClickException(f"consumer group {group!r} does not exist")
    rows = []
    for tp in tps:
        c, end, m = committed.get(tp), ends.get(tp), owners.get(tp)
        rows.append({"topic": tp[0], "partition": tp[1], "committed": c, "log_end": end,
                     "lag": None if c is None or end is None else end - c,
                     "member_id": m.member_id if m else None, "client_id": m.client_id if m else None,
                     "host": m.host if m else None})  # fmt: skip
    lags = [r["lag"] for r in rows if r["lag"] is not None]
    node = desc.coordinator
    report = {
        "group": group,
        "state": desc.state,
        "protocol_type": desc.protocol_type,
        "protocol": desc.protocol,
        "group_type": desc.group_type,
        "coordinator": None if node is None else {"node_id": node[0], "host": node[1], "port": node[2]},
        "members": [
            {
                "member_id": m.member_id,
                "instance_id": m.instance_id,
                "client_id": m.client_id,
                "host": m.host,
                "assignment": [{"topic": t, "partition": p} for t, p in m.assignment],
            }
            for m in desc.members
        ],
        "offsets": rows,
        "totals": {
            "partitions": len(rows),
            "members": len(desc.members),
            "committed_partitions": sum(1 for r in rows if r["committed"] is not None),
            "log_end": sum(r["log_end"] for r in rows if r["log_end"] is not None),
            "lag": sum(lags) if lags else None,
        },
    }
    if as_json:
        echo_json(report)
        return
    console = wide_console()
    protocol = f"{desc.protocol_type or '-'}/{desc.protocol or '-'}"
    where = "-" if node is None else f"{node[0]} ({node[1]}:{node[2]})"
    console.print(
        f"[bold]{cell(group)}[/bold]  state={desc.state}  type={desc.group_type or '-'}  protocol={cell(protocol)}  "
        f"members={len(desc.members)}  coordinator={where}",
        highlight=False,
    )
    if desc.members:
        mt = Table("member id", "instance id", "client id", "host", "partitions", title="members")
        for m in desc.members:
            mt.add_row(cell(m.member_id), cell(m.instance_id), cell(m.client_id), cell(m.host),
                       cell(m.assignment_text() or "-"))  # fmt: skip
        console.print(mt)
    ot = Table("topic", "partition", "committed", "log end", "lag", "member id", "host", title="offsets")
    for col in ot.columns[1:5]:
        col.justify = "right"
    for r in rows:
        ot.add_row(cell(r["topic"]), str(r["partition"]), cell(r["committed"]), cell(r["log_end"]), cell(r["lag"]),
                   cell(r["member_id"]), cell(r["host"]))  # fmt: skip
    totals = report["totals"]
    ot.add_section()
    ot.add_row("[bold]total[/]", str(totals["partitions"]), str(totals["committed_partitions"]),
               str(totals["log_end"]), cell(totals["lag"]), "", "")  # fmt: skip
    console.print(ot)


# ------------------------------------------------------------------------------------------------ delete


@groups.command("delete")
@BOOTSTRAP
@SECURITY
@click.argument("group_ids", metavar="GROUP...", nargs=-1, required=True, callback=utf8_name("group"))
def groups_delete(bootstrap: str, security: KafkaSettings | None, group_ids: tuple[str, ...]) -> None:
    """Delete groups and their committed offsets (only groups without active members)."""
    from logbroker._kafka.errors import kafka_error_of

    names = list(dict.fromkeys(group_ids))
    with admin(bootstrap, security) as a:
        results = a.results(a.call(a.client.delete_consumer_groups, names, what="delete groups"), "delete groups")
    failed = 0
    for g in names:
        outcome = results.get(g)
        if not isinstance(outcome, BaseException):
            click.echo(f"deleted group {g}")
            continue
        failed += 1
        ke = kafka_error_of(outcome)
        code = ke.code() if ke is not None else None
        if code == NON_EMPTY_GROUP:
            msg = "it has active members; stop its consumers first (NON_EMPTY_GROUP)"
        elif code == GROUP_ID_NOT_FOUND:
            msg = "no such group (GROUP_ID_NOT_FOUND)"
        else:
            msg = error_text(outcome)
        click.echo(f"Error: cannot delete group {g}: {msg}", err=True)
    if failed:
        sys.exit(1)


# ------------------------------------------------------------------------------------------------ reset / seek


def _parse_topic_spec(spec: str) -> tuple[str, list[int] | None]:
    name, sep, parts = spec.partition(":")
    if not name:
        raise BadInput(f"--topic {spec!r}: empty topic name")
    utf8_name("topic")(None, None, name)  # type: ignore[arg-type]
    if not sep:
        return name, None
    try:
        ids = sorted({int(p) for p in parts.split(",") if p.strip()})
    except ValueError:
        raise BadInput(f"--topic {spec!r} is not TOPIC or TOPIC:P[,P...]") from None
    if not ids or ids[0] < 0:
        raise BadInput(f"--topic {spec!r} names no valid partition")
    return name, ids


def _parse_datetime_ms(text: str, option: str = "--to-datetime") -> int:
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise BadInput(
            f"{option} {text!r} is not ISO 8601 (e.g. 2024-05-01T12:00:00, 2024-05-01T12:00:00.000+02:00, ...Z)"
        ) from None
    if when.tzinfo is None:
        when = when.astimezone()  # local time, as Kafka's tool
    return int(when.timestamp() * 1000)


@dataclass(frozen=True)
class Strategy:
    """One of Kafka's reset scenarios: earliest, latest, datetime (value: ms), offset, shift."""

    kind: str
    value: int = 0

    def describe(self) -> str:
        if self.kind == "datetime":
            return f"to-datetime {datetime.fromtimestamp(self.value / 1000).astimezone().isoformat()}"
        if self.kind == "offset":
            return f"to-offset {self.value}"
        if self.kind == "shift":
            return f"shift-by {self.value:+d}"
        return f"to-{self.kind}"


@dataclass
class Entry:
    topic: str
    partition: int
    current: int | None
    target: int
    requested: int  # before clamping to [log start, log end]
    error: str | None = None  # set when committing this partition failed

    @property
    def clamped(self) -> bool:
        return self.requested != self.target


def _partitions(a: Admin, topics: list[tuple[str, list[int] | None]]) -> list[TP]:
    """The listed partitions (None: every partition of the topic); unknown ones refused naming what exists."""
    from confluent_kafka import TopicCollection

    names = sorted({t for t, _ in topics})
    futures = a.call(a.client.describe_topics, TopicCollection(names), what="describe topics")
    known: dict[str, list[int]] = {}
    for name, outcome in a.results(futures, "describe topics").items():
        if isinstance(outcome, BaseException):
            raise kafka_failure(outcome, f"topic {name}")
        known[name] = sorted(p.id for p in outcome.partitions)
    out: set[TP] = set()
    for t, parts in topics:
        if parts is None:
            out.update((t, p) for p in known[t])
            continue
        if missing := sorted(set(parts) - set(known[t])):
            has = f"partitions {known[t][0]}..{known[t][-1]}" if known[t] else "no partitions"
            raise click.ClickException(
                f"UNKNOWN_TOPIC_OR_PARTITION: {t} partition(s) {','.join(map(str, missing))} (topic {t} has {has})"
            )
        out.update((t, p) for p in parts)
    return sorted(out)


def _plan(a: Admin, group: str, partitions: list[TP], strategy: Strategy) -> list[Entry]:
    """New offsets for `partitions`, clamped to [log start, log end] as Kafka's tool does."""
    from confluent_kafka.admin import OffsetSpec

    current = {tp: o for tp, o in _committed(a, group).items() if tp in set(partitions)}
    if strategy.kind == "shift" and (missing := [tp for tp in partitions if tp not in current]):
        names = ", ".join(f"{t}-{p}" for t, p in missing[:10]) + (" ..." if len(missing) > 10 else "")
        raise click.ClickException(f"--shift-by needs a committed offset to shift from; none for {names}")
    starts = _offsets(a, partitions, OffsetSpec.earliest())
    ends = _offsets(a, partitions, OffsetSpec.latest())
    found = _offsets(a, partitions, OffsetSpec.for_timestamp(strategy.value)) if strategy.kind == "datetime" else {}
    plan = []
    for tp in partitions:
        if strategy.kind == "earliest":
            want = starts[tp]
        elif strategy.kind == "latest":
            want = ends[tp]
        elif strategy.kind == "offset":
            want = strategy.value
        elif strategy.kind == "shift":
            want = current[tp] + strategy.value
        else:  # datetime: no record that recent means the end of the log
            want = found[tp] if found.get(tp, -1) >= 0 else ends[tp]
        plan.append(Entry(tp[0], tp[1], current.get(tp), min(max(want, starts[tp]), ends[tp]), want))
    return plan


def _execute(a: Admin, group: str, plan: list[Entry]) -> None:
    """Commit the plan as an admin (the coordinator accepts it only for a group without members); a
    partition's failure is recorded on its entry."""
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition

    request = ConsumerGroupTopicPartitions(group, [TopicPartition(e.topic, e.partition, e.target) for e in plan])
    what = f"commit offsets of group {group}"
    fut = a.call(a.client.alter_consumer_group_offsets, [request], what=what)[group]
    a.wait([fut], what)
    try:
        got = fut.result()
    except KafkaException as exc:
        for e in plan:
            e.error = error_text(exc)
        return
    errors = {(tp.topic, tp.partition): tp.error for tp in got.topic_partitions or []}
    for e in plan:
        if err := errors.get((e.topic, e.partition)):
            e.error = error_text(err)


def _reset(
    bootstrap: str,
    security: KafkaSettings | None,
    group: str,
    topics: list[tuple[str, list[int] | None]],
    all_topics: bool,
    strategy: Strategy,
    execute: bool,
    as_json: bool,
) -> None:
    from rich.table import Table

    with admin(bootstrap, security) as a:
        desc = _group(a, group)
        if not desc.inactive:
            raise click.ClickException(
                f"cannot reset offsets of group {group!r}: it is {desc.state} with {len(desc.members)} member(s). "
                "Offsets can only be reset while the group is inactive (Empty); stop its consumers first."
            )
        partitions = sorted(_committed(a, group)) if all_topics else _partitions(a, topics)
        plan = _plan(a, group, partitions, strategy)
        if execute and plan:
            _execute(a, group, plan)
    failed = [e for e in plan if e.error]
    if as_json:
        echo_json({"group": group, "strategy": strategy.describe(), "executed": execute,
                   "partitions": [{**asdict(e), "clamped": e.clamped} for e in plan]})  # fmt: skip
        if failed:
            sys.exit(1)
        return
    console = wide_console()
    if not plan:
        console.print(f"nothing to reset: group {cell(group)} has no committed offsets" if all_topics
                      else "no partitions")  # fmt: skip
        return
    title = f"group {cell(group)}: reset {strategy.describe()}" + ("" if execute else " (dry run)")
    table = Table("group", "topic", "partition", "current offset", "new offset", "note", title=title)
    for col in table.columns[2:5]:
        col.justify = "right"
    for e in plan:
        notes = []
        if e.clamped:
            notes.append(f"clamped from {e.requested}")
        if e.error:
            notes.append(f"[red]failed: {cell(e.error)}[/]")
        table.add_row(cell(group), cell(e.topic), str(e.partition), cell(e.current), str(e.target), "; ".join(notes))
    console.print(table)
    if not execute:
        console.print("dry run: nothing was committed; add --execute to apply this plan")
    elif failed:
        console.print(f"[red]{len(failed)} of {len(plan)} partition(s) failed[/]")
        sys.exit(1)
    else:
        console.print(f"committed new offsets for {len(plan)} partition(s) of group {cell(group)}")


_RESET_JSON = (
    '\b\n--json: {"group", "strategy", "executed",\n'
    '         "partitions": [{"topic", "partition", "current", "target", "requested", "error", "clamped"}]}\n'
)


@groups.command("reset-offsets")
@BOOTSTRAP
@SECURITY
@_GROUP
@click.option("--topic", "topic_specs", multiple=True, metavar="TOPIC[:P,...]",
              help="Topic, or some of its partitions (repeatable).")  # fmt: skip
@click.option("--all-topics", is_flag=True, help="Every partition the group has committed offsets for.")
@click.option("--to-earliest", is_flag=True, help="Log start offset.")
@click.option("--to-latest", is_flag=True, help="Log end offset.")
@click.option("--to-datetime", metavar="ISO8601", help="First offset stamped at or after this time (no zone: local).")
@click.option("--to-offset", type=int, metavar="N", help="Offset N.")
@click.option("--shift-by", type=int, metavar="N", help="Committed offset plus N (N may be negative).")
@click.option("--execute", is_flag=True, help="Commit the new offsets (default: only print the plan).")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON (keys below).")
def groups_reset_offsets(
    bootstrap: str,
    security: KafkaSettings | None,
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
        raise BadInput("give exactly one of --to-earliest, --to-latest, --to-datetime, --to-offset, --shift-by")
    if bool(topic_specs) == all_topics:
        raise BadInput("give --topic (repeatable) or --all-topics")
    kind, value = chosen[0]
    if kind == "datetime":
        value = _parse_datetime_ms(str(value))
    elif kind == "offset" and int(value or 0) < 0:
        raise BadInput("--to-offset must be >= 0")
    topics = [_parse_topic_spec(s) for s in topic_specs]
    _reset(bootstrap, security, group, topics, all_topics, Strategy(kind, int(value or 0)), execute, as_json)


groups_reset_offsets.help = (
    "Reset committed offsets of an inactive group. A dry run printing the plan unless --execute.\n\n"
    "New offsets are clamped to [log start, log end] of each partition. The group must have no active members "
    "(state Empty, or Dead/unknown, in which case --execute creates its offsets).\n\n" + _RESET_JSON
)


@groups.command("seek")
@BOOTSTRAP
@SECURITY
@_GROUP
@click.option("--to", "to", required=True, metavar="start|end|OFFSET|ISO8601",
              help="Log start, log end, an offset, or the first record stamped at or after a time.")  # fmt: skip
@click.option("--topic", "topic_specs", multiple=True, metavar="TOPIC[:P,...]",
              help="Repeatable; default: every partition the group has committed offsets for.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON (keys below).")
def groups_seek(
    bootstrap: str, security: KafkaSettings | None, group: str, to: str, topic_specs: tuple[str, ...], as_json: bool
) -> None:
    to = to.strip()
    if to.lower() in ("start", "earliest", "beginning"):
        strategy = Strategy("earliest")
    elif to.lower() in ("end", "latest"):
        strategy = Strategy("latest")
    elif to.isdigit():
        strategy = Strategy("offset", int(to))
    else:
        strategy = Strategy("datetime", _parse_datetime_ms(to, "--to"))
    topics = [_parse_topic_spec(s) for s in topic_specs]
    _reset(bootstrap, security, group, topics, not topics, strategy, True, as_json)


groups_seek.help = (
    "Move an inactive group's committed offsets now (rpk group seek): reset-offsets --execute in one word.\n\n"
    + _RESET_JSON
)


# ------------------------------------------------------------------------------------------------ delete-offsets


@groups.command("delete-offsets")
@BOOTSTRAP
@SECURITY
@_GROUP
@click.option("--topic", "topic_specs", multiple=True, required=True, metavar="TOPIC[:P,...]",
              help="Topic, or some of its partitions (repeatable).")  # fmt: skip
def groups_delete_offsets(
    bootstrap: str, security: KafkaSettings | None, group: str, topic_specs: tuple[str, ...]
) -> None:
    """Delete the group's committed offsets of some topics (OffsetDelete, as kafka-consumer-groups
    --delete-offsets); refused for topics the group's members are subscribed to."""
    from logbroker.cli.wire_admin import delete_group_offsets, wire_admin
    from logbroker.protocol.errors import ErrorCode

    topics = [_parse_topic_spec(s) for s in topic_specs]
    with admin(bootstrap, security) as a:
        partitions = _partitions(a, topics)
        if not _group_exists(a, group):
            raise click.ClickException(f"cannot delete offsets of group {group}: no such group (GROUP_ID_NOT_FOUND)")
    # OffsetDelete: confluent-kafka has no call for it (cli/wire_admin.py), same security settings.
    with wire_admin(bootstrap, security) as w:
        codes = delete_group_offsets(w, group, partitions)
    failed = 0
    for (topic, part), code in sorted(codes.items()):
        if code == 0:
            click.echo(f"deleted offset of group {group} for {topic}-{part}")
            continue
        failed += 1
        name = ErrorCode(code).name if code in ErrorCode._value2member_map_ else f"error {code}"
        click.echo(f"Error: cannot delete offset of group {group} for {topic}-{part}: {name}", err=True)
    if failed:
        sys.exit(1)


def _group_exists(a: Admin, group: str) -> bool:
    g = _group(a, group)
    return g.state != "Dead" or bool(g.members) or bool(_committed(a, group))
