"""One demo run: prerequisites, the outputs it owns, the embedded broker, publishing, the Spark stages."""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from logbroker.demo.generator import DEFAULT_MINUTES, DEFAULT_NOTIFICATIONS, DEFAULT_SEED, TOPIC, generate
from logbroker.demo.report import DemoResult, analyse, write_chart

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from rich.console import Console


# What a run creates under OUT and therefore may delete on the next run; nothing else is removed.
# Checkpoints sit in OUT/checkpoints rather than inside the datasets, so the data dirs hold only data
# (the archive's Parquet files, the rollup's Delta table).
MARKER = ".logbroker-demo"
OWNED = ("broker", "archive", "rollup", "checkpoints", "rollup.png", "summary.json")
# What older versions wrote next to the rollup while swapping in a new version of it.
OWNED_GLOBS = ("rollup.tmp-*", "rollup.old")
INSTALL_HINT = "pip install 'logbroker[demo]'"


class DemoError(RuntimeError):
    """A failure the demo explains in one message (missing tool, pipeline failure, bad output dir)."""


class _SimClock:
    """The Notifier's clock: returns the event time of the notification being published."""

    def __init__(self) -> None:
        self.now = dt.datetime.now(dt.UTC)

    def __call__(self) -> dt.datetime:
        return self.now


def check_prerequisites() -> None:
    """Fail before anything starts when a piece is missing, with what to install."""
    missing = [m for m in ("pyspark", "matplotlib") if importlib.util.find_spec(m) is None]
    if missing:
        raise DemoError(f"the demo needs {' and '.join(missing)}: {INSTALL_HINT}")
    from logbroker.spark import SparkSetupError
    from logbroker.spark.session import _check_java  # session()'s own message, but before anything starts

    try:
        _check_java()
    except SparkSetupError as exc:
        raise DemoError(str(exc)) from None


def reset_outputs(out: Path) -> None:
    """Remove what an earlier run wrote (only the OWNED paths), refusing a directory the demo
    did not create when one of those names already exists there."""
    out.mkdir(parents=True, exist_ok=True)
    marker = out / MARKER
    present = [name for name in OWNED if (out / name).exists() or (out / name).is_symlink()]
    present += sorted(p.name for pattern in OWNED_GLOBS for p in out.glob(pattern))
    if present and not marker.exists():
        raise DemoError(
            f"{out} already holds {', '.join(present)} not written by logbroker demo "
            f"(no {MARKER} marker); choose another --out or remove them"
        )
    for name in present:
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    marker.write_text("written by `logbroker demo`; a new run replaces: " + ", ".join(OWNED) + "\n")


class _Stage:
    """A running stage: `update` shows live detail next to the spinner, `done` ends its ✓ line."""

    def __init__(self, status: Any, text: str) -> None:
        self.status, self.text, self.done = status, text, ""

    def update(self, detail: str) -> None:
        self.status.update(f"{self.text} [dim]{detail}[/]")


@contextmanager
def _stage(result: DemoResult, name: str, console: Console, text: str) -> Iterator[_Stage]:
    """Time a stage under a spinner and print one ✓ line with its duration when it succeeds."""
    started = time.monotonic()
    with console.status(text, spinner="dots") as status:
        stage = _Stage(status, text)
        yield stage
    result.seconds[name] = round(time.monotonic() - started, 2)
    done = f", {stage.done}" if stage.done else ""
    console.print(f"[green]✓[/] {text}{done} [dim]({result.seconds[name]:.1f}s)[/]", highlight=False)


def _publish(
    bootstrap: str, count: int, minutes: int, seed: int, console: Console
) -> tuple[Counter[str], Counter[str], int, dt.datetime, dt.datetime]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from logbroker.notify import Notifier

    clock = _SimClock()
    base = Notifier(
        f"kafka://{bootstrap}",
        topics=[TOPIC],
        confirm=False,
        clock=clock,
        # Batches of many small JSON records: what a busy cloud's notifier would configure.
        driver_options={"producer_batch_timeout": 0.02, "producer_batch_size": 10_000, "send_timeout": 60.0},
    )
    by_priority: Counter[str] = Counter()
    by_event_type: Counter[str] = Counter()
    late = 0
    first = last = None
    notifiers: dict[str, Notifier] = {}
    try:
        with Progress(
            TextColumn("publishing"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[sim]}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            disable=not console.is_terminal,  # logs get the summary line below, not bar redraws
        ) as progress:
            task = progress.add_task("publish", total=count, sim="")
            for i, event in enumerate(generate(count, minutes, seed), 1):
                notifier = notifiers.get(event.publisher_id)
                if notifier is None:
                    notifier = notifiers[event.publisher_id] = base.prepare(publisher_id=event.publisher_id)
                clock.now = event.when
                getattr(notifier, event.priority.lower())(event.context, event.event_type, event.payload)
                by_priority[event.priority] += 1
                by_event_type[event.event_type] += 1
                late += event.late
                first = event.when if first is None or event.when < first else first
                last = event.when if last is None or event.when > last else last
                if i % 500 == 0 or i == count:
                    progress.update(task, completed=i, sim=f"event time {event.when:%H:%M:%S}")
            base.flush()
    finally:
        base.close()
    assert first is not None and last is not None
    return by_priority, by_event_type, late, first, last


def _progress(stage: _Stage) -> Callable[[dict[str, Any]], None]:
    """Adapt a pipeline's progress reports (rows, rows/s, lag) to a one-line spinner detail."""

    def report(p: dict[str, Any]) -> None:
        lag = p.get("lag")
        stage.update(
            f"{int(p.get('rows') or 0):,} rows, {float(p.get('rows_per_second') or 0):,.0f} rows/s, "
            f"lag {'?' if lag is None else f'{lag:,}'}"
        )

    return report


def _check_run(run: Any) -> int:
    """A pipeline that stopped early is a failure of the demo, and Ctrl-C inside it (which the
    pipeline runner turns into a clean stop) must still end the demo."""
    if run.stopped == "interrupted":
        raise KeyboardInterrupt
    if run.stopped != "finished":
        raise DemoError(f"the {run.name} pipeline stopped early ({run.stopped}) after {run.rows_in:,} rows")
    return int(run.rows_in)


# Spark's default log4j profile prints WARN lines (native Hadoop, profile in use) meant for
# operators, not for someone watching a demo; errors still get through.
@contextmanager
def _spark_session(master: str) -> Iterator[SparkSession]:
    """A session for the run; the JVM it launched is shut down afterwards, so a caller of
    run_demo() keeps no Java process (one already running in this process is left alone)."""
    from pyspark import SparkContext

    from logbroker.spark import session

    had_gateway = SparkContext._gateway is not None
    spark = session(master=master, app_name="logbroker-demo")  # its logging: warnings and errors only
    try:
        spark.sparkContext.setLogLevel("ERROR")
        yield spark
    finally:
        spark.stop()
        if not had_gateway:
            _shutdown_gateway()


def _shutdown_gateway() -> None:
    """Stop the py4j gateway JVM that pyspark launched (spark.stop() leaves it running)."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:
        return
    proc = getattr(gateway, "proc", None)
    try:
        gateway.shutdown()
    finally:
        SparkContext._gateway = None
        SparkContext._jvm = None
        if proc is not None:
            if proc.stdin is not None:
                proc.stdin.close()  # the gateway JVM exits when its stdin closes
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)


def run_demo(
    out: Path | str = Path("logbroker-demo"),
    *,
    master: str = "local[2]",
    notifications: int = DEFAULT_NOTIFICATIONS,
    minutes: int = DEFAULT_MINUTES,
    seed: int = DEFAULT_SEED,
    console: Console | None = None,
) -> DemoResult:
    """Run the demo into `out`; raises DemoError with a readable message when something is missing
    or a stage fails (KeyboardInterrupt passes through), always after stopping what it started."""
    from rich.console import Console

    from logbroker.embedded import EmbeddedBroker

    if notifications < 1 or minutes < 1:
        raise DemoError("--notifications and --minutes must be at least 1")
    console = console or Console()
    out = Path(out).absolute()
    check_prerequisites()
    reset_outputs(out)
    started = time.monotonic()
    broker = EmbeddedBroker(out / "broker", num_partitions=3, fsync="interval")
    result: DemoResult | None = None
    stage = "starting the embedded broker"
    try:
        t0 = time.monotonic()
        broker.start()
        bootstrap = broker.bootstrap
        console.print(
            f"[green]✓[/] embedded broker at {bootstrap}, data in {out / 'broker'} "
            f"[dim]({time.monotonic() - t0:.1f}s)[/]"
        )
        stage = "publishing"
        t0 = time.monotonic()
        by_priority, by_type, late, first, last = _publish(bootstrap, notifications, minutes, seed, console)
        result = DemoResult(
            out=out,
            archive=out / "archive",
            rollup=out / "rollup",
            chart=out / "rollup.png",
            summary=out / "summary.json",
            bootstrap=bootstrap,
            published=sum(by_priority.values()),
            by_priority=dict(by_priority),
            by_event_type=dict(by_type),
            late_events=late,
            start=first.isoformat(),
            end=last.isoformat(),
        )
        result.seconds["publish"] = round(time.monotonic() - t0, 2)
        rate = result.published / max(result.seconds["publish"], 1e-9)
        console.print(
            f"[green]✓[/] published {result.published:,} notifications from "
            f"{len({*by_type})} event types ({rate:,.0f}/s) [dim]({result.seconds['publish']:.1f}s)[/]"
        )
        topics = [f"{TOPIC}.{p.lower()}" for p in by_priority]

        stage = "running the Spark pipelines"
        rows = _spark_stages(result, topics, master, console)
        stage = "writing the chart"
        title = (
            f"logbroker demo: {result.published:,} notifications, rollup per minute "
            f"({result.start[:16].replace('T', ' ')} - {result.end[11:16]} UTC)"
        )
        with _stage(result, "chart", console, f"chart written to {result.chart}"):
            write_chart(rows, result.chart, result.incident_minutes, title)
        result.seconds["total"] = round(time.monotonic() - started, 2)
        result.summary.write_text(json.dumps(result.to_json(), indent=2, default=str) + "\n")
    except (KeyboardInterrupt, DemoError):
        raise
    except Exception as exc:
        raise DemoError(f"demo failed while {stage}: {_short(exc)}") from exc
    finally:
        broker.stop()
    return result


class _GentleInterrupt:
    """Ctrl-C while Spark runs: stop the streaming queries and cancel jobs from a helper thread,
    then end the demo as interrupted when the current call returns.

    pyspark's own SIGINT handler makes a py4j call from inside the signal handler, in the middle
    of another py4j call on the same thread; that breaks the connection and prints pages of
    tracebacks. A second Ctrl-C interrupts immediately.
    """

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self.requested = False
        self._previous: Any = None

    def __enter__(self) -> _GentleInterrupt:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)

    def _handle(self, _signum: int, _frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        threading.Thread(target=self._cancel, name="demo-interrupt", daemon=True).start()

    def _cancel(self) -> None:
        try:
            for query in self.spark.streams.active:
                query.stop()
            self.spark.sparkContext.cancelAllJobs()
        except Exception:  # the session may be stopping already; the main thread still ends the run
            pass

    def check(self) -> None:
        if self.requested:
            raise KeyboardInterrupt


def _spark_stages(result: DemoResult, topics: list[str], master: str, console: Console) -> list[dict[str, Any]]:
    """Archive, roll up and read back in one session. Errors are turned into DemoError here, while
    the JVM still runs: pyspark needs it even to format a captured Java exception."""
    stage = "starting Spark"
    interrupt: _GentleInterrupt | None = None
    with ExitStack() as stack:
        try:
            with _stage(result, "spark start", console, f"Spark session started ({master})"):
                spark = stack.enter_context(_spark_session(master))
                interrupt = stack.enter_context(_GentleInterrupt(spark))
            from logbroker.spark import builtins

            stage = "running the archive pipeline"
            with _stage(result, "archive", console, "archive pipeline") as st:
                run = builtins.archive(
                    result.bootstrap, str(result.archive), topics=topics, spark=spark, progress=_progress(st),
                    checkpoint=str(result.out / "checkpoints" / "archive"),
                )  # fmt: skip
                interrupt.check()
                result.pipeline_rows["archive"] = _check_run(run)
                st.done = f"{run.rows_in:,} records -> {result.archive}"
            stage = "running the rollup pipeline"
            with _stage(result, "rollup", console, "rollup pipeline") as st:
                run = builtins.rollup(
                    result.bootstrap, str(result.rollup), topics=topics, spark=spark, progress=_progress(st),
                    checkpoint=str(result.out / "checkpoints" / "rollup"),
                )  # fmt: skip
                interrupt.check()
                result.pipeline_rows["rollup"] = _check_run(run)
                st.done = f"{run.rows_in:,} notifications -> {result.rollup}"
            stage = "reading the outputs back"
            with _stage(result, "read back", console, "archive and rollup read back") as st:
                rows = analyse(spark, result)
                interrupt.check()
                st.done = f"{result.archived_records:,} archived, {result.rollup_total:,} counted in the rollup"
            return rows
        except (KeyboardInterrupt, DemoError):
            raise
        except Exception as exc:
            if interrupt is not None and interrupt.requested:  # a job cancelled by Ctrl-C
                raise KeyboardInterrupt from None
            raise DemoError(f"demo failed while {stage}: {_short(exc)}") from exc
    raise AssertionError("unreachable")


def _short(exc: BaseException) -> str:
    """The first lines of an error: Spark's Java stack traces run to hundreds of lines."""
    from logbroker.spark import SparkSetupError

    try:
        text = str(exc).strip() or type(exc).__name__
    except Exception:  # a captured Java exception cannot be formatted once its JVM is gone
        text = type(exc).__name__
    if isinstance(exc, SparkSetupError):
        return text
    lines = text.splitlines()
    head = "\n".join(lines[:6])
    return f"{type(exc).__name__}: {head}" + ("\n  ..." if len(lines) > 6 else "")
