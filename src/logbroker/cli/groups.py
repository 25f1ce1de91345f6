"""`logbroker groups`: list, describe (with lag) and delete consumer groups; reset their offsets."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from logbroker.cli.common import BOOTSTRAP, SECURITY, client, fail, wide_console

if TYPE_CHECKING:
    from logbroker._kafka.settings import KafkaSettings


def _group_admin(c):
    from logbroker.client import GroupAdmin

    return GroupAdmin(c)


@click.group()
def groups() -> None:
    """List, describe and delete consumer groups; reset their committed offsets."""


@groups.command("list")
@BOOTSTRAP
@SECURITY
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def groups_list(bootstrap: str, security: KafkaSettings | None, as_json: bool) -> None:
    """Every group of every broker, with its state and type."""
    import json

    from rich.table import Table

    from logbroker.client import BrokerError

    with client(bootstrap, security) as c:
        try:
            listed = _group_admin(c).list_groups()
        except (BrokerError, OSError) as exc:
            fail(exc)
    if as_json:
        click.echo(json.dumps([vars(g) for g in listed], indent=2))
        return
    table = Table("group", "state", "protocol type", "group type")
    for g in listed:
        table.add_row(g.group_id, g.state or "-", g.protocol_type or "-", g.group_type or "-")
    console = wide_console()
    console.print(table if listed else "no consumer groups")


@groups.command("describe")
@BOOTSTRAP
@SECURITY
@click.argument("group")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def groups_describe(bootstrap: str, security: KafkaSettings | None, group: str, as_json: bool) -> None:
    """State, members and their partitions, and committed offset / log end / lag per partition."""
    import json

    from rich.table import Table

    from logbroker.client import BrokerError
    from logbroker.client.groups import lag_report

    with client(bootstrap, security) as c:
        admin = _group_admin(c)
        try:
            desc = admin.describe_group(group)
            rows = admin.lag(desc)
        except (BrokerError, OSError) as exc:
            fail(exc)
    if desc.state == "Dead" and not desc.members and not rows:
        raise click.ClickException(f"consumer group {group!r} does not exist")
    report = lag_report(desc, rows)
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    console = wide_console()
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
@SECURITY
@click.argument("group_ids", metavar="GROUP...", nargs=-1, required=True)
def groups_delete(bootstrap: str, security: KafkaSettings | None, group_ids: tuple[str, ...]) -> None:
    """Delete groups and their committed offsets (only groups without active members)."""
    from logbroker.client import BrokerError
    from logbroker.protocol.errors import ErrorCode

    with client(bootstrap, security) as c:
        try:
            codes = _group_admin(c).delete_groups(group_ids)
        except (BrokerError, OSError) as exc:
            fail(exc)
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
@SECURITY
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

    with client(bootstrap, security) as c:
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
            fail(exc)
    failed = [e for e in plan if e.error]
    if as_json:
        click.echo(json.dumps(reset_report(group, strategy, plan, execute), indent=2))
        if failed:
            sys.exit(1)
        return
    console = wide_console()
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
