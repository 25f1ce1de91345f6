"""What a run produced: the summary (read back from the Parquet outputs), the chart and the table."""

from __future__ import annotations

import datetime as dt
import statistics
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from logbroker.demo.generator import PRIORITY_ORDER, TOPIC

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from rich.console import Console


@dataclass
class DemoResult:
    """What a run produced and measured; also written to OUT/summary.json."""

    out: Path
    archive: Path
    rollup: Path
    chart: Path
    summary: Path
    bootstrap: str
    published: int
    by_priority: dict[str, int]
    by_event_type: dict[str, int]
    late_events: int
    start: str
    end: str
    archived_records: int = 0
    archived_bytes: int = 0
    parquet_files: int = 0
    parquet_bytes: int = 0
    rollup_rows: int = 0
    rollup_total: int = 0
    rollup_by_priority: dict[str, int] = field(default_factory=dict)
    top_event_types: list[tuple[str, int]] = field(default_factory=list)
    incident_minutes: list[str] = field(default_factory=list)
    pipeline_rows: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("out", "archive", "rollup", "chart", "summary"):
            data[key] = str(data[key])
        data["top_event_types"] = [list(x) for x in self.top_event_types]
        return data


def analyse(spark: SparkSession, result: DemoResult) -> list[dict[str, Any]]:
    """Read back what the pipelines wrote (the archive through its _spark_metadata log, the rollup
    through Delta's log) and fill in the summary; returns the rollup rows for the chart."""
    from pyspark.sql import functions as F

    from logbroker.spark.builtins import read_archive

    archive = read_archive(str(result.archive), spark)
    row = archive.agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("bytes")).first()
    result.archived_records = int(row["n"] or 0)
    result.archived_bytes = int(row["bytes"] or 0)
    files = [Path(f.removeprefix("file://").removeprefix("file:")) for f in archive.inputFiles()]
    result.parquet_files = len(files)
    result.parquet_bytes = sum(f.stat().st_size for f in files if f.exists())

    rollup = spark.read.format("delta").load(str(result.rollup))
    rows = [
        {**r.asDict(), "priority": r["priority"] or "UNKNOWN"}  # undecodable records have no priority
        for r in rollup.select("window_start", "event_type", "priority", "count", "bytes").collect()
    ]
    result.rollup_rows = len(rows)
    result.rollup_total = sum(int(r["count"]) for r in rows)
    by_priority: Counter[str] = Counter()
    by_type: Counter[str] = Counter()
    for r in rows:
        by_priority[r["priority"]] += int(r["count"])
        by_type[r["event_type"]] += int(r["count"])
    result.rollup_by_priority = dict(by_priority)
    result.top_event_types = by_type.most_common(8)
    result.incident_minutes = _incident_minutes(rows)
    return rows


def _incident_minutes(rows: list[dict[str, Any]]) -> list[str]:
    """Minutes whose WARN/ERROR/CRITICAL count stands out: at least four times the median minute
    and a fifth of the worst one (background failures never qualify, the whole burst does)."""
    bad: Counter[dt.datetime] = Counter()
    minutes: set[dt.datetime] = set()
    for r in rows:
        minutes.add(r["window_start"])
        if r["priority"] != "INFO":
            bad[r["window_start"]] += int(r["count"])
    if not bad:
        return []
    values = [bad.get(m, 0) for m in minutes]
    threshold = max(4 * statistics.median(values), 0.2 * max(values), 1)
    return [f"{m:%Y-%m-%d %H:%M}" for m in sorted(minutes) if bad.get(m, 0) >= threshold]


def write_chart(rows: list[dict[str, Any]], path: Path, incident: list[str], title: str) -> Path:
    """Stacked notifications per minute by priority, payload bytes on a second axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    minutes = sorted({r["window_start"] for r in rows})
    counts = {p: dict.fromkeys(minutes, 0) for p in PRIORITY_ORDER}
    others = sorted({r["priority"] for r in rows} - set(PRIORITY_ORDER))
    for p in others:
        counts[p] = dict.fromkeys(minutes, 0)
    volume = dict.fromkeys(minutes, 0)
    for r in rows:
        counts[r["priority"]][r["window_start"]] += int(r["count"])
        volume[r["window_start"]] += int(r["bytes"])
    colors = {"INFO": "#4c8bd6", "WARN": "#f2a93b", "ERROR": "#d9453d", "CRITICAL": "#7a1f1f"}
    fig, ax = plt.subplots(figsize=(11, 5.5))
    bottom = [0] * len(minutes)
    width = 1 / 24 / 60 * 0.85  # days, as matplotlib's date axis counts
    for p in (*PRIORITY_ORDER, *others):
        values = [counts[p][m] for m in minutes]
        if not any(values):
            continue
        ax.bar(minutes, values, width, bottom=bottom, label=p, color=colors.get(p), align="edge")
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    top = max(bottom or [1]) * 1.18
    for label in incident:
        start = dt.datetime.strptime(label, "%Y-%m-%d %H:%M")
        ax.axvspan(start, start + dt.timedelta(minutes=1), color="#d9453d", alpha=0.08, lw=0, zorder=0)
    if incident:
        first = dt.datetime.strptime(incident[0], "%Y-%m-%d %H:%M")
        ax.annotate("incident", (first, top * 0.86), color="#a02a25", fontsize=9, ha="right",
                    xytext=(-4, 0), textcoords="offset points")  # fmt: skip
    ax.set_ylabel("notifications per minute")
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M"))
    ax.set_xlabel("event time (UTC)")
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax2 = ax.twinx()
    ax2.plot(
        [m + dt.timedelta(seconds=30) for m in minutes],
        [volume[m] / 1e6 for m in minutes],
        color="#333333",
        lw=1.5,
        marker=".",
        label="MB of notifications",
    )
    ax2.set_ylabel("MB per minute")
    ax2.set_ylim(bottom=0)
    handles, labels = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(handles + h2, labels + l2, loc="upper left", fontsize=9, ncol=5, framealpha=0.95)
    ax.set_ylim(top=top)
    ax.set_title(title, fontsize=11, loc="left")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _fmt_bytes(n: float) -> str:
    """Decimal units, as the chart's MB axis."""
    for unit in ("B", "KB", "MB"):
        if n < 1000:
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n:,.1f} GB"


def print_summary(result: DemoResult, console: Console) -> None:
    from rich.table import Table

    table = Table(title="logbroker demo", show_header=True, header_style="bold", title_justify="left")
    table.add_column("", no_wrap=True)
    table.add_column("value", justify="right", no_wrap=True)
    table.add_column("", style="dim")
    table.add_row("notifications published", f"{result.published:,}", f"{result.late_events} late, out of order")
    for p in (*PRIORITY_ORDER, *sorted(set(result.by_priority) - set(PRIORITY_ORDER))):
        if p in result.by_priority:
            table.add_row(f"  {p}", f"{result.by_priority[p]:,}", f"topic {TOPIC}.{p.lower()}")
    table.add_row("event time", f"{result.start[11:16]} - {result.end[11:16]}", "UTC, simulated")
    table.add_row("archived records", f"{result.archived_records:,}", _fmt_bytes(result.archived_bytes) + " of values")
    table.add_row("Parquet files", f"{result.parquet_files:,}", _fmt_bytes(result.parquet_bytes))
    table.add_row("rollup rows", f"{result.rollup_rows:,}", f"{result.rollup_total:,} notifications counted")
    for name, n in result.top_event_types[:5]:
        table.add_row(f"  top: {name}", f"{n:,}", "")
    table.add_row("incident minute(s)", ", ".join(m[11:] for m in result.incident_minutes) or "-", "WARN/ERROR burst")
    for stage, secs in result.seconds.items():
        table.add_row(f"time: {stage}", f"{secs:.1f}s", "")
    console.print(table)
