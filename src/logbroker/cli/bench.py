"""`logbroker bench`. The benchmark is tooling (`logbroker_devtools.bench`), loaded only when the command runs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from logbroker.cli.common import SECURITY

if TYPE_CHECKING:
    from logbroker._kafka.settings import KafkaSettings


@click.command()
@click.option(
    "--targets",
    default=None,
    help="Comma list of brokers to start and run: logbroker, tansu, kafka. Default: all three, or none with "
    "--bootstrap.",
)
@click.option(
    "-b",
    "--bootstrap",
    default=None,
    help="Also benchmark a running cluster at HOST:PORT (target 'cluster'), with the security options below.",
)
@SECURITY
@click.option(
    "--workloads",
    default="throughput,latency,groups,transactions",
    show_default=True,
    help="Comma list: throughput (produce/consume), latency (acks=all), groups (assignment and rebalance times), "
    "transactions (committed transactions/s and their read_committed read-back); on request: native (Kafka's "
    "perf tools and a franz-go generator load the broker: rates with broker CPU per GB and per request), scale "
    "(memory, readiness and produce rate against partitions and connections), faces (mq, notify and persistent "
    "streams, each next to raw confluent-kafka on the same broker).",
)
@click.option("--quick", is_flag=True, help="About 10x fewer records; scale curves stop at 1,000.")
@click.option("--rounds", type=click.IntRange(min=1), default=1, show_default=True,
              help="Run the targets this many times, alternating; report the median (best in the JSON).")  # fmt: skip
@click.option(
    "--native-records",
    type=int,
    help="1 KB records per native produce workload and scale point (default 500,000 and 200,000).",
)
@click.option("--records-100b", type=int, help="100-byte records to produce and consume.")
@click.option("--records-1kb", type=int, help="1 KB records to produce and consume.")
@click.option("--latency-samples", type=int, help="Sequential acks=all produces.")
@click.option("--transactions", type=int, help="Committed transactions of 10 x 1 KB records to time (0 skips).")
@click.option("--out", default="bench-results", show_default=True, type=click.Path(path_type=Path))
@click.option("--fsync", type=click.Choice(["always", "interval", "never"]), default="always", show_default=True)
@click.option("--profile", is_flag=True, help="Run the logbroker server under cProfile and print where time goes.")
@click.option("--kafka-jar-dir", type=click.Path(path_type=Path), help="Apache Kafka jars (default .ci/cache/jars).")
@click.option("--no-chart", is_flag=True)
def bench(
    targets: str | None,
    bootstrap: str | None,
    security: KafkaSettings | None,
    workloads: str,
    quick: bool,
    records_100b: int | None,
    records_1kb: int | None,
    latency_samples: int | None,
    transactions: int | None,
    rounds: int,
    native_records: int | None,
    out: Path,
    fsync: str,
    profile: bool,
    kafka_jar_dir: Path | None,
    no_chart: bool,
) -> None:
    """Throughput, acks=all latency, consumer groups, transactions and native-client load with the broker's CPU
    cost, logbroker and its peers side by side."""
    try:
        from logbroker_devtools.bench import cluster_target, parse_targets, parse_workloads, run_bench
    except ImportError:
        raise click.ClickException(
            "the benchmark is tooling, not installed with the broker: pip install 'logbroker[bench]' "
            "(from a checkout: pip install -e ./devtools)"
        ) from None

    if security is not None and bootstrap is None:
        raise click.UsageError("security options apply to --bootstrap (a running cluster); the started brokers "
                               "are plain")  # fmt: skip
    names: list[Any] = []
    if targets is not None or bootstrap is None:
        try:
            names = parse_targets(targets or "logbroker,tansu,kafka")
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--targets") from None
    if bootstrap is not None:
        names.append(cluster_target(bootstrap, security))
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
        transactions=transactions,
        out_dir=out,
        fsync=fsync,
        profile=profile,
        kafka_jar_dir=kafka_jar_dir,
        chart=not no_chart,
        workloads=selected,
        rounds=rounds,
        native_records=native_records,
    )
    if any(r["status"] not in ("ok", "skipped") for r in results["targets"].values()):
        sys.exit(1)
