"""`logbroker cluster info|health`: what a cluster is made of, and whether it can serve every partition (for
scripts and supervisors: `health` exits non-zero when not), through confluent-kafka's AdminClient."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from logbroker.cli.common import BOOTSTRAP, SECURITY, Admin, AdminGroup, admin, cell, echo_json, wide_console

if TYPE_CHECKING:
    from logbroker._kafka.settings import KafkaSettings

JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON (keys below) instead of text.")


@click.group(cls=AdminGroup)
def cluster() -> None:
    """Cluster id, controller, brokers and topic counts; health (exit 1 when a partition has no leader)."""


def _survey(a: Admin) -> tuple[Any, Any, list[dict[str, Any]], dict[str, Any]]:
    """DescribeCluster, the metadata of every topic, the brokers, and counts: (cluster, metadata, brokers,
    counts). Internal topics come from DescribeTopics (metadata alone does not say)."""
    from confluent_kafka import TopicCollection

    desc = a.cluster()
    md = a.metadata()
    internal: set[str] = set()
    if md.topics:
        futures = a.call(a.client.describe_topics, TopicCollection(sorted(md.topics)), what="describe topics")
        for name, outcome in a.results(futures, "describe topics").items():
            if not isinstance(outcome, BaseException) and outcome.is_internal:
                internal.add(name)
    controller = desc.controller.id if desc.controller is not None else None
    brokers = [
        {"node_id": n.id, "host": n.host, "port": n.port, "rack": n.rack, "controller": n.id == controller}
        for n in sorted(desc.nodes, key=lambda n: n.id)
    ]
    counts = {
        "topics": len([t for t in md.topics if t not in internal]),
        "internal_topics": len(internal),
        "partitions": sum(len(t.partitions) for t in md.topics.values()),
    }
    return desc, md, brokers, counts


@cluster.command("info")
@BOOTSTRAP
@SECURITY
@JSON
def cluster_info(bootstrap: str, security: KafkaSettings | None, as_json: bool) -> None:
    """Cluster id, controller, brokers (the listener this client reaches them on) and topic/partition counts.

    \b
    --json: {"cluster_id", "controller_id", "brokers": [{"node_id", "host", "port", "rack", "controller"}],
             "topics", "internal_topics", "partitions"}
    """
    from rich.table import Table

    with admin(bootstrap, security) as a:
        desc, _md, brokers, counts = _survey(a)
    controller = desc.controller.id if desc.controller is not None else None
    report = {"cluster_id": desc.cluster_id, "controller_id": controller, "brokers": brokers, **counts}
    if as_json:
        echo_json(report)
        return
    console = wide_console()
    console.print(
        f"cluster {cell(desc.cluster_id)}  controller={cell(controller)}  brokers={len(brokers)}  "
        f"topics={counts['topics']} (+{counts['internal_topics']} internal)  partitions={counts['partitions']}",
        highlight=False,
    )
    table = Table("node id", "host", "port", "rack", "controller")
    for b in brokers:
        table.add_row(
            str(b["node_id"]), cell(b["host"]), str(b["port"]), cell(b["rack"]), "yes" if b["controller"] else ""
        )
    console.print(table)


@cluster.command("health")
@BOOTSTRAP
@SECURITY
@JSON
def cluster_health(bootstrap: str, security: KafkaSettings | None, as_json: bool) -> None:
    """Can the cluster be reached, and does every partition have a leader? Exit 0 when healthy, 1 when not
    (or when no broker answers).

    \b
    --json: {"healthy", "cluster_id", "controller_id", "brokers", "topics", "partitions",
             "leaderless_partitions": [{"topic", "partition", "error"}],
             "under_replicated_partitions": [{"topic", "partition", "replicas", "isr"}]}
    Under-replicated partitions are reported, not counted as unhealthy (a leader still serves them).
    """
    from logbroker.cli.common import error_text

    with admin(bootstrap, security) as a:
        desc, md, brokers, counts = _survey(a)
    live = {b["node_id"] for b in brokers}
    leaderless, under = [], []
    for name, t in sorted(md.topics.items()):
        if t.error is not None and not t.partitions:
            leaderless.append({"topic": name, "partition": None, "error": error_text(t.error)})
        for pid, p in sorted(t.partitions.items()):
            if p.leader < 0 or p.leader not in live or p.error is not None:
                err = error_text(p.error) if p.error is not None else f"leader {p.leader}"
                leaderless.append({"topic": name, "partition": pid, "error": err})
            elif len(p.isrs) < len(p.replicas):
                under.append({"topic": name, "partition": pid, "replicas": list(p.replicas), "isr": list(p.isrs)})
    healthy = not leaderless and bool(brokers)
    report = {
        "healthy": healthy,
        "cluster_id": desc.cluster_id,
        "controller_id": desc.controller.id if desc.controller is not None else None,
        "brokers": len(brokers),
        "topics": counts["topics"] + counts["internal_topics"],
        "partitions": counts["partitions"],
        "leaderless_partitions": leaderless,
        "under_replicated_partitions": under,
    }
    if as_json:
        echo_json(report)
    else:
        state = "healthy" if healthy else "UNHEALTHY"
        click.echo(f"{state}: cluster {desc.cluster_id}, {len(brokers)} broker(s), {report['topics']} topic(s), "
                   f"{counts['partitions']} partition(s), {len(leaderless)} without a leader, "
                   f"{len(under)} under-replicated")  # fmt: skip
        for p in leaderless:
            where = p["topic"] if p["partition"] is None else f"{p['topic']}-{p['partition']}"
            click.echo(f"  no leader: {where} ({p['error']})")
    if not healthy:
        sys.exit(1)
