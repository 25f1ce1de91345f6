"""`logbroker demo` (loaded on use: the demo needs the `demo` extra, pyspark and matplotlib)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from logbroker.demo import (
    DEFAULT_MINUTES,
    DEFAULT_NOTIFICATIONS,
    DEFAULT_SEED,
    DemoError,
    print_summary,
    run_demo,
)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--out",
    default="logbroker-demo",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory for the broker data, Parquet archive, rollup and chart.",
)
@click.option("--master", default="local[2]", show_default=True, help="Spark master URL.")
@click.option(
    "-n", "--notifications", default=DEFAULT_NOTIFICATIONS, show_default=True, type=click.IntRange(min=1),
    help="Notifications to publish.",
)  # fmt: skip
@click.option(
    "--minutes", default=DEFAULT_MINUTES, show_default=True, type=click.IntRange(1, 24 * 60),
    help="Simulated event time the stream spans.",
)  # fmt: skip
@click.option("--seed", default=DEFAULT_SEED, show_default=True, type=int, help="Same seed, same stream.")
def demo(out: Path, master: str, notifications: int, minutes: int, seed: int) -> None:
    """Publish notifications to the embedded broker, archive and roll them up with Spark, chart them."""
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 120)  # pipes and logs: keep table rows and paths on one line
    console.print(
        f"[bold]logbroker demo[/]: {notifications:,} notifications over {minutes} simulated minutes "
        f"-> embedded broker -> Spark archive + rollup ({master}) -> {out}/"
    )
    try:
        result = run_demo(out, master=master, notifications=notifications, minutes=minutes, seed=seed, console=console)
    except DemoError as exc:
        console.print(f"[bold red]error:[/] {exc}", highlight=False)
        sys.exit(1)
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/]: broker and Spark stopped")
        sys.exit(130)
    print_summary(result, console)
    console.print(f"archive (Parquet, by topic/date): {result.archive}", highlight=False, soft_wrap=True)
    console.print(f"rollup (Delta, per minute):       {result.rollup}", highlight=False, soft_wrap=True)
    console.print(f"chart (PNG):                      {result.chart}", highlight=False, soft_wrap=True)
    console.print(f"summary (JSON):                   {result.summary}", highlight=False, soft_wrap=True)
