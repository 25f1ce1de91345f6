"""``run_bench``: each target in turn, every selected workload, results written as they come."""

from __future__ import annotations

import dataclasses
import gc
import json
import logging
import statistics
import time
import traceback
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from logbroker_devtools.bench.clients import (
    _CLIENT_LOGGER,
    consumer_config,
    create_topic,
    group_consumer_config,
    latency_producer_config,
    producer_config,
    rebalance_consumer_config,
    txn_consumer_config,
    txn_producer_config,
    wait_ready,
)
from logbroker_devtools.bench.model import (
    ALL_TARGETS,
    CONSUME_BATCH,
    DEFAULT_FACES_MESSAGES,
    DEFAULT_GROUP_SAMPLES,
    DEFAULT_LATENCY_SAMPLES,
    DEFAULT_NATIVE_RECORDS_1KB,
    DEFAULT_ONE_PER_REQUEST,
    DEFAULT_RECORDS_1KB,
    DEFAULT_RECORDS_100B,
    DEFAULT_SCALE_RECORDS,
    DEFAULT_TRANSACTIONS,
    LATENCY_WARMUP,
    MB,
    METRICS,
    NATIVE_CONNECTIONS,
    NATIVE_PRODUCERS,
    NATIVE_WORKLOADS,
    QUICK_DIVISOR,
    QUICK_GROUP_SAMPLES,
    QUICK_LATENCY_SAMPLES,
    QUICK_SCALE_CONNECTIONS,
    QUICK_SCALE_PARTITIONS,
    REBALANCE_MEMBERS,
    REBALANCE_PARTITIONS,
    RECORD_RATE_WORKLOADS,
    RECORD_SIZES,
    SCALE_CONNECTIONS,
    SCALE_PARTITIONS,
    TXN_MAX_SECONDS,
    TXN_RECORD_SIZE,
    TXN_RECORDS,
    Target,
    _Unavailable,
    parse_targets,
    parse_workloads,
)
from logbroker_devtools.bench.native import BATCH_PROPS, ONE_PER_REQUEST_PROPS, NativeSizes, run_native, run_scale
from logbroker_devtools.bench.report import _profile_report, _ratios, machine_info, render_table, versions, write_chart
from logbroker_devtools.bench.targets import kafka_target, logbroker_target, tansu_target
from logbroker_devtools.bench.workloads import (
    ProgressFn,
    TransactionsUnsupported,
    consume_read_committed,
    consume_throughput,
    first_assignment,
    initial_rebalance_delay,
    produce_latency,
    produce_throughput,
    produce_transactions,
    rebalance_join,
)


def _write_json(results: dict[str, Any], path: Path) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(results, indent=2, default=str) + "\n")
    tmp.replace(path)


def _run_target(
    target: Target,
    counts: dict[str, int],
    latency_samples: int,
    progress: Progress,
    step_task: Any,
    overall_task: Any,
    group_samples: tuple[int, int] = (0, 0),
    transactions: int = 0,
    native: NativeSizes | None = None,
    native_workloads: Sequence[str] = (),
) -> dict[str, Any]:
    res: dict[str, Any] = {"status": "ok", "notes": target.notes, "metrics": {}, "details": {}}
    metrics: dict[str, float] = res["metrics"]
    details: dict[str, Any] = res["details"]
    run_id = uuid.uuid4().hex[:8]
    started = False

    def step(description: str, total: int) -> ProgressFn:
        progress.reset(step_task, total=total, completed=0, description=f"{target.name}: {description}")
        return lambda done: progress.update(step_task, completed=done)

    t_start = time.monotonic()
    try:
        progress.reset(step_task, total=1, completed=0, description=f"{target.name}: starting")
        with target.start() as bootstrap:
            started = True
            res["bootstrap"] = bootstrap
            wait_ready(bootstrap)
            res["startup_s"] = time.monotonic() - t_start
            for size_name, count in counts.items():
                size = RECORD_SIZES[size_name]
                if count <= 0:
                    progress.advance(overall_task, 2)
                    continue
                topic = f"bench-{size_name.lower()}-{run_id}"
                details[f"topic_{size_name}_created_by"] = create_topic(bootstrap, topic)
                gc.collect()
                prod = produce_throughput(bootstrap, topic, count, size, step(f"produce {size_name}", count))
                details[f"produce_{size_name}"] = prod
                metrics[f"produce_{size_name}_records_per_s"] = prod["records_per_s"]
                metrics[f"produce_{size_name}_MB_per_s"] = prod["MB_per_s"]
                progress.advance(overall_task)
                gc.collect()
                cons = consume_throughput(
                    bootstrap, topic, prod["records"], size, step(f"consume {size_name}", prod["records"])
                )
                details[f"consume_{size_name}"] = cons
                metrics[f"consume_{size_name}_records_per_s"] = cons["records_per_s"]
                metrics[f"consume_{size_name}_MB_per_s"] = cons["MB_per_s"]
                progress.advance(overall_task)
            if latency_samples > 0:
                topic = f"bench-latency-{run_id}"
                details["topic_latency_created_by"] = create_topic(bootstrap, topic)
                gc.collect()
                on_lat = step("latency 1KB", latency_samples)
                lat = produce_latency(bootstrap, topic, latency_samples, RECORD_SIZES["1KB"], on_lat)
                details["latency_1KB"] = lat
                metrics["latency_p50_ms"] = lat["p50_ms"]
                metrics["latency_p99_ms"] = lat["p99_ms"]
            progress.advance(overall_task)
            if any(group_samples):
                _run_groups(target, res, bootstrap, run_id, group_samples, step)
                progress.advance(overall_task)
            if transactions > 0:
                _run_transactions(res, bootstrap, run_id, transactions, step)
                progress.advance(overall_task)
            if native is not None:
                for workload in native_workloads:
                    _run_native_workload(res, workload, bootstrap, run_id, native, step)
                    progress.advance(overall_task)
    except _Unavailable as exc:
        res["status"] = "skipped"
        res["error"] = str(exc)
    except Exception as exc:
        res["status"] = "failed" if started else "failed to start"
        res["error"] = f"{type(exc).__name__}: {exc}"
        res["traceback"] = traceback.format_exc()
    res["wall_s"] = time.monotonic() - t_start
    return res


def _run_native_workload(
    res: dict[str, Any],
    workload: str,
    bootstrap: str,
    run_id: str,
    sizes: NativeSizes,
    step: Callable[[str, int], ProgressFn],
) -> None:
    """``native`` or ``scale`` on one target. A missing JVM/jars/Go skips the workloads that need it,
    with its one-line reason in ``res["workloads"]`` (the target's other numbers stand)."""
    metrics: dict[str, float] = res["metrics"]
    gc.collect()
    if workload == "native":
        details, skipped = run_native(bootstrap, run_id, sizes, step)
        for key in NATIVE_WORKLOADS:
            got = details.get(key)
            if got is None:
                continue
            rate = "records_per_s" if key in RECORD_RATE_WORKLOADS else "MB_per_s"
            metrics[f"native_{key}_{rate}"] = got[rate]
            for field in ("cpu_s_per_GB", "cpu_us_per_request"):
                if got.get(field) is not None:
                    metrics[f"native_{key}_{field}"] = got[field]
    elif workload == "faces":
        from logbroker_devtools.bench.faces import faces_detail, run_faces

        on_step = step("faces (mq, notify, streams)", 1)
        got, skipped = run_faces(bootstrap, sizes.faces_messages)
        metrics.update(got)
        details = faces_detail(got)
        on_step(1)
    else:
        details, skipped = run_scale(bootstrap, run_id, sizes, step)
        metrics["scale_startup_s"] = res["startup_s"]
        if details.get("idle_rss_MB") is not None:
            metrics["scale_idle_rss_MB"] = details["idle_rss_MB"]
        for name, point in details.items():
            if not isinstance(point, dict):
                continue
            # partitions_1000 -> scale_p1000_ready_s ...; connections_100 -> scale_c100_connect_s ...
            curve, size = name.split("_")
            tag, timed = (f"p{size}", "ready") if curve == "partitions" else (f"c{size}", "connect")
            for metric, value in (
                (f"scale_{tag}_{timed}_s", point.get(f"{timed}_s")),
                (f"scale_{tag}_rss_MB", point.get("rss_MB")),
                (f"scale_{tag}_MB_per_s", point["produce"]["MB_per_s"]),
            ):
                if value is not None:
                    metrics[metric] = value
    res["details"][workload] = details
    state: dict[str, Any] = {"status": "ok"}
    if skipped:
        reason = "; ".join(sorted(set(skipped.values())))
        untooled = ("scale_startup_s", "scale_idle_rss_MB")  # read from /proc, no generator needed
        measured_any = any(k.startswith(f"{workload}_") and k not in untooled for k in metrics)
        state = {"status": "partial" if measured_any else "skipped", "reason": reason, "skipped": sorted(skipped)}
        res["notes"] = "; ".join(n for n in (res.get("notes"), f"{workload} {state['status']}: {reason}") if n)
    res.setdefault("workloads", {})[workload] = state


def _run_groups(
    target: Target,
    res: dict[str, Any],
    bootstrap: str,
    run_id: str,
    group_samples: tuple[int, int],
    step: Callable[[str, int], ProgressFn],
) -> None:
    """The consumer-group workloads of one target, each on a fresh topic with fresh groups."""
    metrics: dict[str, float] = res["metrics"]
    details: dict[str, Any] = res["details"]
    first_n, rebalance_n = group_samples
    delay = initial_rebalance_delay(bootstrap)
    source = "reported by the broker"
    if delay is None and target.name == "logbroker":
        # The server of the built-in target sees our environment and no config file.
        from logbroker.config import BrokerSettings

        try:
            delay = str(BrokerSettings().group_initial_rebalance_delay_ms)
        except Exception:
            delay = str(BrokerSettings.model_fields["group_initial_rebalance_delay_ms"].default)
        source = "logbroker setting; its DescribeConfigs does not report it"
    details["group_initial_rebalance_delay_ms"] = {"value": delay, "source": source if delay else "not reported"}
    if target.name == "kafka" and delay is not None:
        source += "; Kafka's default is 3000"
    shown = f"{delay} ms ({source})" if delay is not None else "not reported by the broker"
    res["notes"] = "; ".join(n for n in (res.get("notes"), f"group.initial.rebalance.delay.ms: {shown}") if n)
    if first_n > 0:
        topic = f"bench-group-first-{run_id}"
        details["topic_group_first_created_by"] = create_topic(bootstrap, topic)
        first = first_assignment(bootstrap, topic, first_n, step("group first assignment", first_n))
        details["group_first_assignment"] = first
        metrics["group_first_assignment_ms"] = first["median_ms"]
    if rebalance_n > 0:
        topic = f"bench-group-rebalance-{run_id}"
        details["topic_group_rebalance_created_by"] = create_topic(bootstrap, topic, partitions=REBALANCE_PARTITIONS)
        reb = rebalance_join(bootstrap, topic, rebalance_n, step("group rebalance 3+1", rebalance_n))
        details["group_rebalance"] = reb
        metrics["group_rebalance_ms"] = reb["median_ms"]


def _run_transactions(
    res: dict[str, Any], bootstrap: str, run_id: str, count: int, step: Callable[[str, int], ProgressFn]
) -> None:
    """Committed transactions per second, then a read_committed consumer reading them back. A broker
    without transactions is noted and left out of these rows (the target's other numbers stand)."""
    metrics: dict[str, float] = res["metrics"]
    details: dict[str, Any] = res["details"]
    topic = f"bench-txn-{run_id}"
    details["topic_transactions_created_by"] = create_topic(bootstrap, topic)
    gc.collect()
    try:
        prod = produce_transactions(bootstrap, topic, count, TXN_RECORDS, TXN_RECORD_SIZE, TXN_MAX_SECONDS,
                                    step(f"transactions x{TXN_RECORDS} 1KB", count))  # fmt: skip
    except TransactionsUnsupported as exc:
        details["transactions"] = {"skipped": str(exc)}
        res["notes"] = "; ".join(n for n in (res.get("notes"), f"transactions skipped: {exc}") if n)
        return
    details["transactions"] = prod
    metrics["txn_commits_per_s"] = prod["transactions_per_s"]
    gc.collect()
    n = prod["committed_records"]
    cons = consume_read_committed(bootstrap, topic, n, TXN_RECORD_SIZE, step("read_committed consume", n))
    details["transactions_consume"] = cons
    metrics["txn_consume_records_per_s"] = cons["records_per_s"]
    metrics["txn_consume_MB_per_s"] = cons["MB_per_s"]


def _combine_rounds(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One target's rounds as one result: the median of each metric over the rounds that measured it
    (``metrics``), the best (``metrics_best``), and every round's numbers (``rounds``)."""
    ok = [r for r in runs if r["status"] == "ok"] or runs
    res = dict(ok[-1])
    better = {m.key: m.higher_is_better for m in METRICS}
    values: dict[str, list[float]] = {}
    for r in ok:
        for key, value in r.get("metrics", {}).items():
            values.setdefault(key, []).append(value)
    res["metrics"] = {k: statistics.median(v) for k, v in values.items()}
    res["metrics_best"] = {k: (max if better.get(k, True) else min)(v) for k, v in values.items()}
    res["rounds"] = [{"status": r["status"], "metrics": r.get("metrics", {}), "error": r.get("error")} for r in runs]
    return res


def run_bench(
    targets: str | Sequence[str | Target] = ALL_TARGETS,
    *,
    quick: bool = False,
    records_100b: int | None = None,
    records_1kb: int | None = None,
    latency_samples: int | None = None,
    out_dir: str | Path = "bench-results",
    fsync: str = "always",
    profile: bool = False,
    kafka_jar_dir: str | Path | None = None,
    chart: bool = True,
    console: Console | None = None,
    workloads: str | Sequence[str] | None = None,
    group_samples: tuple[int, int] | None = None,
    transactions: int | None = None,
    rounds: int = 1,
    native_records: int | None = None,
    native_sizes: NativeSizes | None = None,
) -> dict[str, Any]:
    """Benchmark each target in turn and write ``results.json`` / ``results.png`` to ``out_dir``.

    Args:
        targets: names from ``ALL_TARGETS`` (a list or a comma string such as
            ``"logbroker,tansu"``) and/or ready-made :class:`Target` objects.
        quick: about 10x fewer records (100k x 100B, 20k x 1KB, 300 latency samples).
        records_100b / records_1kb / latency_samples: override the counts (0 skips a workload).
        out_dir: where results.json, results.png, client/server logs and the profile go.
        fsync: value passed to ``logbroker serve --fsync``.
        profile: run the logbroker server under cProfile (``OUT/logbroker.prof``) and print the
            top 25 cumulative entries at the end.
        kafka_jar_dir: jars for the Kafka peer (default ``logbroker.jars.default_jar_dir("kafka")``).
        chart: write the PNG (needs matplotlib).
        console: rich console for progress and tables (tests pass a quiet one).
        workloads: which of ``WORKLOADS`` to run (a list or a comma string; default
            ``DEFAULT_WORKLOADS``: all but ``native`` and ``scale``). Leaving out ``throughput`` or
            ``latency`` sets its counts to 0.
        group_samples: (first-assignment samples, rebalance samples); default (7, 5), quick (3, 2);
            0 skips that measurement.
        transactions: committed transactions (of ``TXN_RECORDS`` 1 KB records) to time; default
            2000, quick 200; at most ``TXN_MAX_SECONDS`` of them; 0 skips the workload.
        rounds: run every target this many times, the targets alternating within a round (drift on a
            shared machine then hits each alike); ``metrics`` holds the median over the rounds,
            ``metrics_best`` the best, ``rounds`` each round's numbers.
        native_records: 1 KB records per ``native`` produce workload (default 500,000, quick 50,000) and
            per ``scale`` point (default 200,000, quick 20,000).
        native_sizes: every size of the ``native`` and ``scale`` workloads at once (tests).

    Returns the results dict that was written to ``results.json``. Unavailable peers are
    skipped with a note; a failing target is recorded as failed and the run goes on.
    """
    if console is None:
        console = Console()
        if not console.is_terminal:
            console.width = max(console.width, 120)  # logs/CI: keep the table on one line per row
    out = Path(out_dir).resolve()  # absolute: the profiled server gets it on its command line
    out.mkdir(parents=True, exist_ok=True)
    div = QUICK_DIVISOR if quick else 1
    n100 = DEFAULT_RECORDS_100B // div if records_100b is None else records_100b
    n1k = DEFAULT_RECORDS_1KB // div if records_1kb is None else records_1kb
    n_lat = QUICK_LATENCY_SAMPLES if quick else DEFAULT_LATENCY_SAMPLES
    if latency_samples is not None:
        n_lat = latency_samples
    selected = parse_workloads(workloads)
    if "throughput" not in selected:
        n100 = n1k = 0
    if "latency" not in selected:
        n_lat = 0
    if "groups" not in selected:
        n_groups = (0, 0)
    elif group_samples is not None:
        n_groups = (max(0, group_samples[0]), max(0, group_samples[1]))
    else:
        n_groups = QUICK_GROUP_SAMPLES if quick else DEFAULT_GROUP_SAMPLES
    n_txn = DEFAULT_TRANSACTIONS // div if transactions is None else max(0, transactions)
    if "transactions" not in selected:
        n_txn = 0
    if native_sizes is None:
        native_sizes = NativeSizes(
            records_1kb=DEFAULT_NATIVE_RECORDS_1KB // div if native_records is None else native_records,
            one_per_request=DEFAULT_ONE_PER_REQUEST // div,
            producers=NATIVE_PRODUCERS,
            connections=NATIVE_CONNECTIONS,
            scale_partitions=QUICK_SCALE_PARTITIONS if quick else SCALE_PARTITIONS,
            scale_connections=QUICK_SCALE_CONNECTIONS if quick else SCALE_CONNECTIONS,
            scale_records=DEFAULT_SCALE_RECORDS // div if native_records is None else native_records,
            faces_messages=DEFAULT_FACES_MESSAGES // (4 if quick else 1),
        )
    # scale first: its idle and per-point memory must not carry what the native workloads left behind
    native_selected = [w for w in ("scale", "native", "faces") if w in selected]
    rounds = max(1, rounds)
    prof_path = out / "logbroker.prof" if profile else None
    if prof_path is not None and prof_path.exists():
        prof_path.unlink()

    # Resolve names into Target objects (a str entry is an unavailable peer's skip reason).
    items = parse_targets(targets) if isinstance(targets, str) else list(targets)
    plan: list[tuple[str, Target | str]] = []
    for item in items:
        if isinstance(item, Target):
            plan.append((item.name, item))
            continue
        name = parse_targets([item])[0]
        if name == "logbroker":
            log_path = out / "logbroker-server.log"
            plan.append((name, logbroker_target(fsync=fsync, profile_path=prof_path, log_path=log_path)))
        elif name == "tansu":
            plan.append((name, tansu_target()))
        else:
            plan.append((name, kafka_target(kafka_jar_dir)))
    resolved = [t for _, t in plan if isinstance(t, Target)]
    if profile and "logbroker" not in [name for name, _ in plan]:
        console.print("[yellow]--profile only applies to the logbroker target, which is not selected[/]")

    results: dict[str, Any] = {
        "schema": 1,
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "versions": versions(),
        "parameters": {
            "quick": quick,
            "records_100B": n100,
            "records_1KB": n1k,
            "record_sizes_bytes": RECORD_SIZES,
            "latency_samples": n_lat,
            "latency_warmup": LATENCY_WARMUP,
            "workloads": selected,
            "group_first_assignment_samples": n_groups[0],
            "group_rebalance_samples": n_groups[1],
            "group_rebalance_members": REBALANCE_MEMBERS,
            "group_rebalance_partitions": REBALANCE_PARTITIONS,
            "group_consumer_config": group_consumer_config("<bootstrap>", "bench-first-<random>"),
            "group_rebalance_consumer_config": rebalance_consumer_config("<bootstrap>", "bench-rebalance-<random>"),
            "transactions": n_txn,
            "transaction_records": TXN_RECORDS,
            "transaction_record_bytes": TXN_RECORD_SIZE,
            "transaction_max_seconds": TXN_MAX_SECONDS,
            "transaction_producer_config": txn_producer_config("<bootstrap>", "bench-txn-<random>"),
            "transaction_consumer_config": {**txn_consumer_config("<bootstrap>"), "group.id": "bench-<random>"},
            "consume_batch": CONSUME_BATCH,
            "partitions": 1,
            "fsync": fsync,
            "profile": profile,
            "targets": [name for name, _ in plan],
            "producer_config": producer_config("<bootstrap>"),
            "latency_producer_config": latency_producer_config("<bootstrap>"),
            "consumer_config": {**consumer_config("<bootstrap>"), "group.id": "bench-<random>"},
            "MB": MB,
            "rounds": rounds,
            "native": {
                **dataclasses.asdict(native_sizes),
                "batch_producer_props": list(BATCH_PROPS),
                "one_per_request_producer_props": list(ONE_PER_REQUEST_PROPS),
            }
            if native_selected
            else None,
        },
        "metric_definitions": [dataclasses.asdict(m) for m in METRICS],
        "targets": {},
    }

    json_path = out / "results.json"
    handler = logging.FileHandler(out / "client.log", mode="w")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    _CLIENT_LOGGER.addHandler(handler)
    _CLIENT_LOGGER.propagate = False
    _CLIENT_LOGGER.setLevel(logging.INFO)
    counts = {"100B": n100, "1KB": n1k}
    steps_per_target = 2 * len(counts) + 1 + (1 if any(n_groups) else 0) + (1 if n_txn else 0) + len(native_selected)
    try:
        with Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        ) as progress:
            overall = progress.add_task("all targets", total=steps_per_target * len(resolved) * rounds)
            step_task = progress.add_task("", total=1)
            done = 0
            runs: dict[str, list[dict[str, Any]]] = {}
            for round_no in range(rounds):
                for name, target in plan:
                    if isinstance(target, str):
                        if round_no == 0:
                            results["targets"][name] = {"status": "skipped", "error": target, "metrics": {}}
                            progress.console.print(f"[yellow]skipping {name}:[/] {target}")
                        continue
                    if done:
                        time.sleep(1.0)  # let the previous broker's exit settle before timing again
                    res = _run_target(target, counts, n_lat, progress, step_task, overall, n_groups, n_txn,
                                      native_sizes, native_selected)  # fmt: skip
                    runs.setdefault(name, []).append(res)
                    results["targets"][name] = _combine_rounds(runs[name]) if rounds > 1 else res
                    done += 1
                    progress.update(overall, completed=steps_per_target * done)
                    if res["status"] == "skipped":
                        progress.console.print(f"[yellow]skipping {name}:[/] {res['error']}")
                    elif res["status"] != "ok":
                        progress.console.print(f"[red]{name} {res['status']}:[/] {res['error']}")
                    for workload, state in res.get("workloads", {}).items():
                        if state["status"] != "ok" and round_no == 0:
                            why = f"{workload} {state['status']}: {state['reason']}"
                            progress.console.print(f"[yellow]{name}:[/] {why}")
                    _write_json(results, json_path)
            progress.update(step_task, visible=False)
    finally:
        _CLIENT_LOGGER.removeHandler(handler)
        handler.close()

    results["finished_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    results["ratios"] = _ratios(results)
    files: dict[str, str] = {"json": str(json_path)}
    if chart:
        try:
            png = write_chart(results, out / "results.png")
        except ImportError as exc:
            console.print(f"[yellow]no chart:[/] {exc}")
        else:
            if png is not None:
                files["chart"] = str(png)
    if prof_path is not None:
        if prof_path.exists():
            report = _profile_report(prof_path)
            (out / "logbroker-profile.txt").write_text(report)
            files["profile"] = str(prof_path)
            files["profile_text"] = str(out / "logbroker-profile.txt")
        else:
            console.print("[yellow]profile requested but the server wrote no profile file[/]")
    results["files"] = files
    _write_json(results, json_path)

    console.print(render_table(results))
    for name, res in results["targets"].items():
        if res.get("notes"):
            console.print(f"[dim]{name}: {res['notes']}[/]")
    if "profile_text" in files:
        console.print("[bold]logbroker server profile, top 25 by cumulative time[/] (main thread only)")
        console.print(Path(files["profile_text"]).read_text(), markup=False, highlight=False)
    console.print(f"results: {json_path}" + (f", chart: {files['chart']}" if "chart" in files else ""))
    return results
