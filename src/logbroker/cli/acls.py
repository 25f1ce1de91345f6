"""`logbroker acls`: ACLs of any Kafka-compatible broker with an authorizer (what `kafka-acls --add/--list/
--remove` do), through confluent-kafka's AdminClient (CreateAcls, DescribeAcls, DeleteAcls).

The secured set-up `logbroker certs init` writes enforces ACLs, so its certificate users can do nothing until
granted: `logbroker acls add --allow User:alice --producer --topic orders` (as a super user)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from logbroker.cli.common import BOOTSTRAP, SECURITY, AdminGroup, admin, cell, echo_json, utf8_name, wide_console

if TYPE_CHECKING:
    from logbroker._kafka.settings import KafkaSettings

OPERATIONS = ("ALL", "READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "CLUSTER_ACTION",
              "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE")  # fmt: skip
# kafka-acls's conveniences: what a producer or a consumer needs on each kind of resource.
PRODUCER = {"TOPIC": ("WRITE", "DESCRIBE", "CREATE"), "TRANSACTIONAL_ID": ("WRITE", "DESCRIBE")}
CONSUMER = {"TOPIC": ("READ", "DESCRIBE"), "GROUP": ("READ",)}


def _resource_options(f: Any) -> Any:
    for option in reversed([
        click.option("--topic", "topics", multiple=True, callback=utf8_name("topic"), help="Topic (repeatable)."),
        click.option("--group", "groups", multiple=True, callback=utf8_name("group"), help="Group (repeatable)."),
        click.option("--transactional-id", "txn_ids", multiple=True, callback=utf8_name("transactional id"),
                     help="Transactional id (repeatable)."),
        click.option("--cluster", is_flag=True, help="The cluster resource."),
        click.option("--prefixed", is_flag=True, help="Names are prefixes (PREFIXED patterns), not literal names."),
    ]):  # fmt: skip
        f = option(f)
    return f


def _resources(topics: tuple[str, ...], groups: tuple[str, ...], txn_ids: tuple[str, ...],
               cluster: bool) -> list[tuple[str, str]]:  # fmt: skip
    out = [("TOPIC", n) for n in topics] + [("GROUP", n) for n in groups]
    out += [("TRANSACTIONAL_ID", n) for n in txn_ids]
    if cluster:
        out.append(("BROKER", "kafka-cluster"))  # confluent-kafka's name for Kafka's CLUSTER resource
    return out


def _principal(value: str) -> str:
    kind, sep, name = value.partition(":")
    if not sep or not kind or not name:
        raise click.BadParameter(f"expected TYPE:NAME (User:alice), got {value!r}", param_hint="principal")
    return value


def _enum(kind: str, name: str) -> Any:
    from confluent_kafka import admin as ka

    return getattr(getattr(ka, kind), name)


def _binding(restype: str, name: str, prefixed: bool, principal: str, host: str, op: str, allow: bool) -> Any:
    from confluent_kafka.admin import AclBinding

    return AclBinding(_enum("ResourceType", restype), name,
                      _enum("ResourcePatternType", "PREFIXED" if prefixed else "LITERAL"), principal, host,
                      _enum("AclOperation", op), _enum("AclPermissionType", "ALLOW" if allow else "DENY"))  # fmt: skip


def _row(b: Any) -> dict[str, str]:
    restype = b.restype.name
    return {
        "resource_type": "CLUSTER" if restype == "BROKER" else restype,
        "name": b.name,
        "pattern_type": b.resource_pattern_type.name,
        "principal": b.principal,
        "host": b.host,
        "operation": b.operation.name,
        "permission": b.permission_type.name,
    }


@click.group(cls=AdminGroup)
def acls() -> None:
    """Add, list and remove ACLs (the broker must run with an authorizer)."""


@acls.command("add")
@BOOTSTRAP
@SECURITY
@click.option("--allow", "allow", multiple=True, callback=lambda _c, _p, v: tuple(_principal(x) for x in v),
              help="Principal allowed (User:NAME; repeatable).")  # fmt: skip
@click.option("--deny", "deny", multiple=True, callback=lambda _c, _p, v: tuple(_principal(x) for x in v),
              help="Principal denied (repeatable; a DENY wins over any ALLOW).")  # fmt: skip
@click.option("--operation", "operations", multiple=True, type=click.Choice(OPERATIONS, case_sensitive=False),
              help="Operation (repeatable).")  # fmt: skip
@click.option("--producer", is_flag=True, help="WRITE, DESCRIBE, CREATE on topics (WRITE, DESCRIBE on txn ids).")
@click.option("--consumer", is_flag=True, help="READ, DESCRIBE on topics, READ on groups.")
@click.option("--host", default="*", show_default=True, help="Client host the ACLs apply to.")
@_resource_options
def acls_add(bootstrap: str, security: KafkaSettings | None, allow: tuple[str, ...], deny: tuple[str, ...],
             operations: tuple[str, ...], producer: bool, consumer: bool, host: str, topics: tuple[str, ...],
             groups: tuple[str, ...], txn_ids: tuple[str, ...], cluster: bool, prefixed: bool) -> None:  # fmt: skip
    """Grant (--allow) or refuse (--deny) operations on resources."""
    if not allow and not deny:
        raise click.UsageError("name a principal: --allow User:NAME or --deny User:NAME")
    resources = _resources(topics, groups, txn_ids, cluster)
    if not resources:
        raise click.UsageError("name a resource: --topic, --group, --transactional-id or --cluster")
    if not (operations or producer or consumer):
        raise click.UsageError("name what is granted: --operation, --producer or --consumer")
    bindings = []
    for restype, name in resources:
        ops = [o.upper() for o in operations]
        ops += PRODUCER.get(restype, ()) if producer else ()
        ops += CONSUMER.get(restype, ()) if consumer else ()
        for op in dict.fromkeys(ops):
            for principal, is_allow in [(p, True) for p in allow] + [(p, False) for p in deny]:
                bindings.append(_binding(restype, name, prefixed, principal, host, op, is_allow))
    if not bindings:
        raise click.UsageError("--producer and --consumer grant nothing on the resources named")
    with admin(bootstrap, security) as a:
        futures = a.call(a.client.create_acls, bindings, what="create ACLs")
        for b, fut in futures.items():
            a.result(fut, f"create ACL {_describe(b)}")
    for b in bindings:
        click.echo(f"added {_describe(b)}")


def _describe(b: Any) -> str:
    r = _row(b)
    return (f"{r['permission']} {r['principal']} {r['operation']} on {r['resource_type']} {r['name']}"
            f"{' (prefix)' if r['pattern_type'] == 'PREFIXED' else ''} from {r['host']}")  # fmt: skip


def _filters(principal: str | None, topics: tuple[str, ...], groups: tuple[str, ...], txn_ids: tuple[str, ...],
             cluster: bool, prefixed: bool, operation: str | None = None) -> list[Any]:  # fmt: skip
    from confluent_kafka.admin import AclBindingFilter

    resources: list[tuple[str, str | None]] = list(_resources(topics, groups, txn_ids, cluster))
    pattern = "PREFIXED" if prefixed else ("LITERAL" if resources else "ANY")
    return [
        AclBindingFilter(_enum("ResourceType", restype), name, _enum("ResourcePatternType", pattern), principal,
                         None, _enum("AclOperation", operation or "ANY"), _enum("AclPermissionType", "ANY"))
        for restype, name in (resources or [("ANY", None)])
    ]  # fmt: skip


@acls.command("list")
@BOOTSTRAP
@SECURITY
@click.option("--principal", callback=lambda _c, _p, v: v and _principal(v), help="Only this principal's ACLs.")
@_resource_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON (keys below) instead of a table.")
def acls_list(bootstrap: str, security: KafkaSettings | None, principal: str | None, topics: tuple[str, ...],
              groups: tuple[str, ...], txn_ids: tuple[str, ...], cluster: bool, prefixed: bool,
              as_json: bool) -> None:  # fmt: skip
    """ACLs on the resources named (every ACL when none is).

    \b
    --json: a list of {"resource_type", "name", "pattern_type", "principal", "host", "operation", "permission"}.
    """
    rows: list[dict[str, str]] = []
    with admin(bootstrap, security) as a:
        for f in _filters(principal, topics, groups, txn_ids, cluster, prefixed):
            rows += [_row(b) for b in a.result(a.call(a.client.describe_acls, f, what="describe ACLs"), "list ACLs")]
    rows.sort(key=lambda r: tuple(r.values()))
    if as_json:
        echo_json(rows)
        return
    from rich.table import Table

    table = Table(*rows[0]) if rows else None
    for r in rows:
        assert table is not None
        table.add_row(*(cell(v) for v in r.values()))
    wide_console().print(table if table is not None else "no ACLs")


@acls.command("remove")
@BOOTSTRAP
@SECURITY
@click.option("--principal", callback=lambda _c, _p, v: v and _principal(v), help="Only this principal's ACLs.")
@click.option("--operation", type=click.Choice(OPERATIONS, case_sensitive=False), help="Only this operation.")
@_resource_options
def acls_remove(bootstrap: str, security: KafkaSettings | None, principal: str | None, operation: str | None,
                topics: tuple[str, ...], groups: tuple[str, ...], txn_ids: tuple[str, ...], cluster: bool,
                prefixed: bool) -> None:  # fmt: skip
    """Remove the ACLs matching a principal and/or resources (one of them is required)."""
    if principal is None and not _resources(topics, groups, txn_ids, cluster):
        raise click.UsageError("name a principal (--principal) or a resource: removing every ACL is not offered")
    filters = _filters(principal, topics, groups, txn_ids, cluster, prefixed, operation and operation.upper())
    removed = 0
    with admin(bootstrap, security) as a:
        futures = a.call(a.client.delete_acls, filters, what="delete ACLs")
        for f in filters:
            for b in a.result(futures[f], "remove ACLs"):
                click.echo(f"removed {_describe(b)}")
                removed += 1
    if not removed:
        click.echo("no ACL matched")
