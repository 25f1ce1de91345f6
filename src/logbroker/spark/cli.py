"""`logbroker pipeline ...`: run a spec file, or one of the built-in pipelines, from the shell.

A bad spec is a usage error: one line naming the field, exit status 2 (what click uses for bad
arguments), before any JVM starts.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from logbroker.cli.common import SECURITY
from logbroker.spark.spec import ISOLATION_LEVEL_HELP

__all__ = ["pipeline"]


def _fail(message: str, code: int = 1) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def _show(result: Any) -> None:
    lag = "" if result.lag is None else f" lag={result.lag}"
    click.echo(f"{result.name}: rows={result.rows_in} batches={result.batches} seconds={result.seconds:.1f}"
               f"{lag} stopped={result.stopped} sinks={', '.join(result.sinks)}")  # fmt: skip


def _properties(security: Any) -> dict[str, Any] | None:
    """The CLI's security options (`KafkaSettings`) as the properties a spec's `security` holds."""
    from logbroker.spark.spec import producer_security

    return producer_security(security) or None


def _run(fn: Any, *args: Any, **kwargs: Any) -> None:
    from logbroker.spark.pipeline import PipelineError
    from logbroker.spark.session import SparkSetupError
    from logbroker.spark.spec import SpecError

    try:
        _show(fn(*args, **kwargs))
    except SpecError as exc:
        _fail(str(exc), 2)
    except (PipelineError, SparkSetupError) as exc:
        _fail(str(exc))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def pipeline() -> None:
    """PySpark pipelines over topics: run a SPEC, archive, rollup, replay."""


@pipeline.command("run")
@click.argument("spec_path", metavar="SPEC.yaml", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--timeout", type=float, default=None, help="Stop after this many seconds (processingTime specs).")
@click.option("--quiet", "-q", is_flag=True, help="No progress line.")
@click.option(
    "--master", default=None, help="Spark master URL, e.g. spark://HOST:7077 (default: the spec's master, local[*])."
)
@SECURITY
def run_cmd(spec_path: Path, timeout: float | None, quiet: bool, master: str | None, security: Any) -> None:
    """Run the pipeline described by SPEC.yaml until drained (availableNow) or Ctrl-C/--timeout.

    Security options, when given, replace the source's `security` (and so that of topic sinks writing back
    to the source's cluster). On a cluster master every path of the spec must be a URL all workers reach."""
    from logbroker.spark.spec import KafkaSource, SpecError, load_spec

    try:
        spec = load_spec(spec_path)
        if security is not None:
            if not isinstance(spec.source, KafkaSource):
                _fail("security options apply to a kafka source; this spec reads parquet", 2)
            data = spec.model_dump(exclude_unset=True)
            data["source"]["security"] = _properties(security)
            spec = load_spec(data)
        if master is not None:
            spec = spec.model_copy(update={"master": master})
    except SpecError as exc:
        _fail(str(exc), 2)
    from logbroker.spark.pipeline import run

    _run(run, spec, progress=not quiet, timeout=timeout)


def _source_options(f: Any) -> Any:
    opts = [
        click.option("--bootstrap", "-b", required=True, help="Broker bootstrap address, host:port."),
        click.option("--topic", "-t", "topics", multiple=True, help="Topic to read (repeatable)."),
        click.option("--pattern", default=None, help="Topic regex instead of --topic."),
        click.option("--checkpoint", default=None, help="Checkpoint directory (default OUT/_checkpoint)."),
        click.option("--starting-offsets", default="earliest", type=click.Choice(["earliest", "latest"])),
        click.option("--max-offsets-per-trigger", type=int, default=None, help="Rate limit per micro-batch."),
        click.option(
            "--isolation-level",
            type=click.Choice(["read_committed", "read_uncommitted"]),
            default="read_committed",
            show_default=True,
            help=ISOLATION_LEVEL_HELP,
        ),
        click.option("--processing-time", default=None, help="Run continuously, a batch every INTERVAL."),
        click.option("--timeout", type=float, default=None, help="Stop after this many seconds."),
        click.option("--master", default="local[*]", show_default=True, help="Spark master URL."),
        click.option("--quiet", "-q", is_flag=True, help="No progress line."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return SECURITY(f)


def _common(topics: tuple[str, ...], pattern: str | None, **kw: Any) -> dict[str, Any]:
    if bool(topics) == (pattern is not None):
        _fail("source: give exactly one of --topic or --pattern", 2)
    quiet = kw.pop("quiet")
    kw["security"] = _properties(kw.pop("security"))
    return {"topics": list(topics) or None, "pattern": pattern, "progress": not quiet,
            "trigger": kw.pop("processing_time"), **kw}  # fmt: skip


@pipeline.command("archive")
@click.argument("out")
@_source_options
@click.option("--format", "table_format", type=click.Choice(["parquet", "delta"]), default="parquet",
              show_default=True, help="Parquet files (Spark's file sink) or a Delta table (time travel).")  # fmt: skip
def archive_cmd(out: str, topics: tuple[str, ...], pattern: str | None, **kw: Any) -> None:
    """Archive topics into a dataset at OUT (partitioned by topic and date), exactly once."""
    from logbroker.spark.builtins import archive

    _run(archive, kw.pop("bootstrap"), out, **_common(topics, pattern, **kw))


@pipeline.command("rollup")
@click.argument("out")
@_source_options
@click.option("--window", default="1 minute", show_default=True, help="Window length.")
@click.option("--watermark", default="5 minutes", show_default=True, help="How late an event may arrive.")
def rollup_cmd(out: str, topics: tuple[str, ...], pattern: str | None, **kw: Any) -> None:
    """Count notifications and bytes per event type, priority and window into a Delta table at OUT."""
    from logbroker.spark.builtins import rollup

    _run(rollup, kw.pop("bootstrap"), out, **_common(topics, pattern, **kw))


@pipeline.command("replay")
@click.argument("archive_path")
@click.option("--bootstrap", "-b", required=True, help="Broker bootstrap address, host:port.")
@click.option("--topic", "-t", required=True, help="Target topic.")
@click.option("--where", default=None, help="SQL filter on archive columns, e.g. \"topic = 'a'\".")
@click.option("--keep-partition", is_flag=True, help="Send source partition p to partition p.")
@click.option("--master", default="local[*]", show_default=True, help="Spark master URL.")
@click.option(
    "--transactional-id",
    default=None,
    help="Exactly once for read_committed readers, across task retries and re-runs under the same id.",
)
@SECURITY
def replay_cmd(archive_path: str, bootstrap: str, topic: str, where: str | None, keep_partition: bool,
               master: str, transactional_id: str | None, security: Any) -> None:  # fmt: skip
    """Produce an archive's records into TOPIC, keeping key, headers and timestamp."""
    from logbroker.spark.replay import replay
    from logbroker.spark.session import SparkSetupError, session

    try:
        spark = session(master=master, app_name="replay")
    except SparkSetupError as exc:
        _fail(str(exc))
    try:
        n = replay(
            archive_path,
            bootstrap,
            topic,
            spark=spark,
            where=where,
            keep_partition=keep_partition,
            security=_properties(security),
            transactional_id=transactional_id,
        )
    except Exception as exc:  # ReplayError and Spark's own; one line, not a JVM trace
        _fail(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
    click.echo(f"replay: {n} records -> {topic}")
