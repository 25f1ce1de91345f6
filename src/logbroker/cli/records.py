"""`logbroker produce` and `logbroker consume`: kcat -P / -C on confluent-kafka.

librdkafka does the work kcat relies on it for: the Java client's partitioner for keys (``murmur2_random``),
batching and compression, waiting for a topic that is being created and for leaders, fetching from every
partition at once and telling when each reaches its end (partition EOF events: no per-partition waits).
This module reads and writes bytes (values are never decoded) and turns every failure into one line.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import IO, TYPE_CHECKING, Any, NoReturn

import click

from logbroker.cli.common import (
    BOOTSTRAP,
    SECURITY,
    AdminCommand,
    BadInput,
    admin,
    error_text,
    kafka_client,
    utf8_name,
)
from logbroker.cli.formats import (
    OFFSET_END,
    parse_offsets,
    parse_properties,
    record_formatter,
    split_input,
    unescape,
)

if TYPE_CHECKING:
    from confluent_kafka import KafkaError

    from logbroker._kafka.settings import KafkaSettings

_COMPRESSION = ["none", "gzip", "snappy", "lz4", "zstd"]


class _Errors:
    """librdkafka's client-level errors (``error_cb``) once `admin` proved the connection and the login: a
    failed re-login or TLS ends the command, losing every broker is worth a line (librdkafka reconnects)."""

    def __init__(self, quiet: bool, ignore_group_auth: bool = False) -> None:
        self.quiet = quiet
        self.ignore_group_auth = ignore_group_auth
        self.fatal: str | None = None
        self.live = False  # warnings only while records flow (not while connecting or closing)
        self._warned: set[str] = set()

    def __call__(self, err: KafkaError) -> None:
        from confluent_kafka import KafkaError

        from logbroker._kafka.errors import Kind, classify

        code = err.code()
        if code == KafkaError.GROUP_AUTHORIZATION_FAILED and self.ignore_group_auth:
            return  # assign() without a group: librdkafka still looks the (unused) group's coordinator up
        if err.fatal() or classify(err).kind is Kind.AUTH or code == KafkaError._SSL:
            self.fatal = self.fatal or error_text(err)
        elif code == KafkaError._ALL_BROKERS_DOWN:
            self.warn(f"lost the brokers, retrying: {error_text(err)}")

    def warn(self, text: str) -> None:
        if self.live and not self.quiet and text not in self._warned:
            self._warned.add(text)
            click.echo(f"warning: {text}", err=True)

    def check(self) -> None:
        if self.fatal is not None:
            raise click.ClickException(self.fatal)


@contextlib.contextmanager
def _interruptible() -> Iterator[None]:
    """Ctrl-C while connecting ends the command without a traceback (exit 130, as a shell reports SIGINT)."""
    try:
        yield
    except KeyboardInterrupt:
        sys.exit(130)


@contextlib.contextmanager
def _quiet_broken_pipe() -> Iterator[None]:
    """A reader that went away (`| head`) ends the command quietly, as for any Unix filter."""
    try:
        yield
    except BrokenPipeError:
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        sys.exit(0)


# --------------------------------------------------------------------------------------------- produce


class _Deliveries:
    """Delivery reports: acknowledged records per partition, failures and the first failure's error."""

    def __init__(self) -> None:
        self.acked: dict[int, int] = {}
        self.failed = 0
        self.first_error: KafkaError | None = None

    def __call__(self, err: KafkaError | None, msg: Any) -> None:
        if err is None:
            p = msg.partition()
            self.acked[p] = self.acked.get(p, 0) + 1
        else:
            self.failed += 1
            if self.first_error is None:
                self.first_error = err


class _Progress:
    """A rich progress bar on stderr (bytes of the input read, records sent); in the default mode, shown only
    on a terminal and once an input has taken half a second (a short input prints no bar)."""

    def __init__(self, enabled: bool, total_bytes: int | None, delay: float) -> None:
        self.enabled = enabled
        self.delay = delay
        self.total = total_bytes
        self.started = time.monotonic()
        self.bar: Any = None
        self.task: Any = None
        self.done_bytes = 0
        self.records = 0

    def advance(self, nbytes: int, nrecords: int) -> None:
        self.done_bytes += nbytes
        self.records += nrecords
        if not self.enabled:
            return
        if self.bar is None:
            if time.monotonic() - self.started < self.delay:
                return
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
                TransferSpeedColumn,
            )

            self.bar = Progress(TextColumn("{task.fields[records]:,} records"), BarColumn(), DownloadColumn(),
                                TransferSpeedColumn(), TimeRemainingColumn(),
                                console=Console(stderr=True), transient=True)  # fmt: skip
            self.bar.start()
            self.task = self.bar.add_task("produce", total=self.total, records=0)
        self.bar.update(self.task, completed=self.done_bytes, records=self.records)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _isatty(stream: Any) -> bool:
    try:
        return os.isatty(stream.fileno())
    except (OSError, ValueError):  # no descriptor (a test runner's stream)
        return False


def _input(path: str | None, values: tuple[str, ...]) -> tuple[IO[bytes] | None, int | None]:
    if values:
        if path is not None:
            raise BadInput("give VALUES or --file, not both")
        return None, None
    stream: IO[bytes] = sys.stdin.buffer if path in (None, "-") else open(path, "rb")  # noqa: SIM115
    try:
        st = os.fstat(stream.fileno())
        size = st.st_size if st.st_size and stat.S_ISREG(st.st_mode) else None
    except (OSError, ValueError):
        size = None
    return stream, size


@click.command(cls=AdminCommand)
@BOOTSTRAP
@SECURITY
@click.option("-t", "--topic", required=True, callback=utf8_name("topic"))
@click.option(
    "-p",
    "--partition",
    type=int,
    default=-1,
    help="Partition of every record. Default (-1): keys as the Java client places them (murmur2), records "
    "without a key spread as librdkafka's murmur2_random partitioner (kcat) does.",
)
@click.option("-K", "--key-delimiter", help="Split each record into KEY<delim>VALUE (kcat escapes: \\t, \\xNN ...).")
@click.option("-k", "--key", "fixed_key", help="Key of every record without its own (-K) key.")
@click.option("-D", "--delimiter", default="\\n", show_default=True, help="Separator of records in the input.")
@click.option("-H", "--header", "headers", multiple=True, help="NAME=VALUE header on every record (repeatable).")
@click.option(
    "-l",
    "--file",
    "input_file",
    type=click.Path(exists=True, dir_okay=False, allow_dash=True),
    help="Read FILE, not stdin.",
)
@click.option("-z", "--compression", type=click.Choice(_COMPRESSION), default="none", show_default=True)
@click.option("--acks", type=click.Choice(["-1", "0", "1", "all"]), default="all", show_default=True)
@click.option("--batch-size", type=click.IntRange(1, 1_000_000), help="Records per batch at most (batch.num.messages).")
@click.option("-Z", "--null-empty", is_flag=True, help="Send empty keys and values as null (kcat -Z).")
@click.option("-X", "--property", "properties", multiple=True, help="librdkafka NAME=VALUE (kcat -X; repeatable).")
@click.option(
    "--timeout",
    type=click.FloatRange(0.1),
    default=30.0,
    show_default=True,
    help="Seconds a record may wait for its topic (created meanwhile or auto-created), a leader and its "
    "acknowledgement.",
)
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: when stderr is a terminal).")
@click.option("-q", "--quiet", is_flag=True, help="No summary line.")
@click.argument("values", nargs=-1)
def produce(
    bootstrap: str,
    security: KafkaSettings | None,
    topic: str,
    partition: int,
    key_delimiter: str | None,
    fixed_key: str | None,
    delimiter: str,
    headers: tuple[str, ...],
    input_file: str | None,
    compression: str,
    acks: str,
    batch_size: int | None,
    null_empty: bool,
    properties: tuple[str, ...],
    timeout: float,
    progress: bool | None,
    quiet: bool,
    values: tuple[str, ...],
) -> None:
    """Produce VALUES, or one record per line (per -D delimiter) of standard input or --file (kcat -P).

    Input is bytes: values go out exactly as read. Exits 1 with one line if any record was not delivered."""
    from confluent_kafka import KafkaError, KafkaException

    from logbroker import _kafka

    hdrs = []
    for h in headers:
        name, sep, value = h.partition("=")
        if not sep or not name:
            raise BadInput(f"-H {h!r}: expected NAME=VALUE")
        hdrs.append((name, value.encode("utf-8", "surrogateescape")))
    delim = unescape(delimiter)
    kdelim = unescape(key_delimiter) if key_delimiter is not None else None
    if not delim or kdelim == b"":
        raise BadInput("-D and -K need at least one character")
    if partition < -1:
        raise BadInput(f"-p {partition}: a partition is 0 or more (-1: the partitioner)")
    key0 = fixed_key.encode("utf-8", "surrogateescape") if fixed_key is not None else None
    stream, size = _input(input_file, values)

    deliveries = _Deliveries()
    errors = _Errors(quiet)
    timeout_ms = int(timeout * 1000)
    producer = kafka_client(_kafka.producer, bootstrap, security, **{
        "partitioner": "murmur2_random", "acks": acks, "compression.type": compression, "linger.ms": 5,
        "message.timeout.ms": timeout_ms, "topic.metadata.propagation.max.ms": timeout_ms,
        "queue.buffering.max.messages": 1_000_000, "on_delivery": deliveries, "error_cb": errors,
        **({"batch.num.messages": batch_size} if batch_size else {}),
        **parse_properties(properties),
    })  # fmt: skip
    with (
        _interruptible(),
        admin(bootstrap, security, min(timeout, 10.0)) as a,
    ):  # connection and login proven before any input
        if partition >= 0:
            tmd = a.metadata(topic).topics.get(topic)
            if tmd is not None and tmd.partitions and partition not in tmd.partitions:
                raise BadInput(f"-p {partition}: topic {topic!r} has partitions 0-{len(tmd.partitions) - 1}")

    extra = {"headers": hdrs} if hdrs else {}
    sent = 0
    failed_now: list[BaseException] = []

    def produce_all(records: list[bytes]) -> None:
        nonlocal sent
        for rec in records:
            key = key0
            value: bytes | None = rec
            if kdelim is not None:
                k, sep, v = rec.partition(kdelim)
                if sep:
                    key, value = k, v
            if null_empty:
                key, value = key or None, value or None
            try:
                _kafka.produce(producer, topic, value=value, key=key, partition=partition, **extra)
            except KafkaException as exc:
                ke = exc.args[0] if exc.args else None
                if isinstance(ke, KafkaError) and ke.code() == KafkaError._UNKNOWN_PARTITION:
                    raise BadInput(f"-p {partition}: topic {topic!r} has no such partition") from None
                deliveries.failed += 1
                failed_now.append(exc)
            sent += 1
        producer.poll(0)
        errors.check()

    show = progress if progress is not None else _isatty(sys.stderr) and stream is not None and not _isatty(stream)
    bar = _Progress(bool(show), size, delay=0.5 if progress is None else 0.0)
    interrupted = False
    try:
        if stream is None:
            produce_all([v.encode("utf-8", "surrogateescape") for v in values])
        else:
            for records, nbytes in split_input(stream, delim):
                produce_all(records)
                bar.advance(nbytes, len(records))
    except KeyboardInterrupt:
        interrupted = True
    finally:
        bar.stop()
    try:
        left = producer.flush(timeout + 5)
    except KeyboardInterrupt:
        left, interrupted = len(producer), True
    errors.check()
    acked = sum(deliveries.acked.values())
    if interrupted:
        raise click.ClickException(f"interrupted: {acked} of {sent} record(s) delivered to {topic}")
    if deliveries.failed or left:
        first = deliveries.first_error or (failed_now[0] if failed_now else None)
        if isinstance(first, KafkaError) and first.code() == KafkaError._UNKNOWN_PARTITION:
            raise BadInput(f"-p {partition}: topic {topic!r} has no such partition")
        raise click.ClickException(f"{deliveries.failed + left} of {sent} record(s) not delivered to {topic}: "
                                   f"{_delivery_error(first, topic, timeout)}")  # fmt: skip
    if not quiet:
        parts = sorted(deliveries.acked)
        where = f"{topic}-{parts[0]}" if len(parts) == 1 else f"{topic} partitions {', '.join(map(str, parts))}"
        if len(parts) > 8:
            where = f"{topic} ({len(parts)} partitions)"
        click.echo(f"produced {acked} record(s) to {where if parts else topic}", err=True)


def _delivery_error(err: BaseException | KafkaError | None, topic: str, timeout: float) -> str:
    from logbroker._kafka.errors import Kind, classify

    if err is None:
        return "no acknowledgement"
    if classify(err).kind is Kind.UNKNOWN_TOPIC:
        return f"topic {topic!r} does not exist (not created within {timeout:g}s; auto-create off?)"
    return error_text(err)


# --------------------------------------------------------------------------------------------- consume


@click.command(cls=AdminCommand)
@BOOTSTRAP
@SECURITY
@click.option("-t", "--topic", required=True, callback=utf8_name("topic"))
@click.option("-p", "--partition", "partitions", type=click.IntRange(0), multiple=True, help="Partition(s); all.")
@click.option("-G", "--group", help="Read as a member of GROUP (subscribe) and commit what was printed.")
@click.option(
    "-o",
    "--offset",
    "offsets",
    multiple=True,
    help="Start: beginning | end (default) | stored | N | -N (N before the end) | s@MS or @MS (first record at "
    "or after that time, ms since the epoch); and/or e@MS to stop before a time (and at the end). With "
    "--group, beginning/end apply where the group has no committed offset; N, -N and @MS move every assigned "
    "partition.",
)
@click.option("--from-beginning", is_flag=True, help="Same as -o beginning.")
@click.option("-c", "--count", type=click.IntRange(1), help="Stop after this many records.")
@click.option("-e", "--exit-at-end", is_flag=True, help="Stop once every partition has been read to its end.")
@click.option(
    "-f",
    "--format",
    "fmt",
    help="value (default), kv (key TAB value), json, or a kcat format string: %s value, %k key, %S/%K their "
    "lengths, %t topic, %p partition, %o offset, %T timestamp, %h headers, %R value length as int32, \\n ...",
)
@click.option("-J", "--json", "as_json", is_flag=True, help="JSON lines (same as -f json).")
@click.option("-K", "--key-delimiter", help="Print the key, this delimiter, then the value (kcat -K).")
@click.option("-D", "--delimiter", default="\\n", show_default=True, help="After each record (value, -K, json).")
@click.option("-Z", "--null", "print_null", is_flag=True, help='Print null keys and values as "NULL" (kcat -Z).')
@click.option("--idle-timeout", type=click.FloatRange(0.0, min_open=True), help="Stop after this many idle seconds.")
@click.option(
    "--isolation",
    type=click.Choice(["read_committed", "read_uncommitted"]),
    default="read_committed",
    show_default=True,
    help="read_committed skips records of aborted transactions and stops at open ones (kcat's default); "
    "read_uncommitted prints every record.",
)
@click.option("-X", "--property", "properties", multiple=True, help="librdkafka NAME=VALUE (kcat -X; repeatable).")
@click.option("--timeout", type=click.FloatRange(0.1), default=10.0, show_default=True,
              help="Seconds to wait for the cluster's first answer.")  # fmt: skip
@click.option("-q", "--quiet", is_flag=True, help="No summary line.")
def consume(
    bootstrap: str,
    security: KafkaSettings | None,
    topic: str,
    partitions: tuple[int, ...],
    group: str | None,
    offsets: tuple[str, ...],
    from_beginning: bool,
    count: int | None,
    exit_at_end: bool,
    fmt: str | None,
    as_json: bool,
    key_delimiter: str | None,
    delimiter: str,
    print_null: bool,
    idle_timeout: float | None,
    isolation: str,
    properties: tuple[str, ...],
    timeout: float,
    quiet: bool,
) -> None:
    """Print the records of a topic to standard output, as bytes (kcat -C): every partition (or -p) from
    -o, or as a member of --group; a live tail until Ctrl-C unless -e, -c or --idle-timeout stops it."""
    from confluent_kafka import KafkaException, TopicPartition

    from logbroker import _kafka

    if from_beginning:
        if offsets:
            raise BadInput("--from-beginning and -o: give one")
        offsets = ("beginning",)
    where = parse_offsets(offsets or ("end",))
    if group and partitions:
        raise BadInput("-p and --group: a group member reads the partitions the group assigns it")
    exit_at_end = exit_at_end or where.stop_ms is not None  # kcat's e@: a partition without later records ends
    if where.label == "stored" and not group:
        raise BadInput("-o stored needs --group (a group's committed offsets)")
    if as_json:
        if fmt not in (None, "json"):
            raise BadInput("-J and -f: give one")
        fmt = "json"
    delim = unescape(delimiter)
    formatter = record_formatter(fmt, delim, unescape(key_delimiter) if key_delimiter else None,
                                 b"NULL" if print_null else b"")  # fmt: skip
    raw_values = fmt in (None, "value") and key_delimiter is None and not print_null

    errors = _Errors(quiet, ignore_group_auth=not group)
    reset = "earliest" if group and where.label == "beginning" else "latest"
    consumer = kafka_client(_kafka.consumer, bootstrap, security, **{
        "group.id": group or f"logbroker-consume-{uuid.uuid4().hex[:12]}",
        "enable.auto.commit": bool(group), "enable.auto.offset.store": False, "enable.partition.eof": True,
        "auto.offset.reset": reset, "isolation.level": isolation, "error_cb": errors,
        # librdkafka pauses fetching for fetch.queue.backoff.ms (1 s) whenever its queue holds queued.min.messages
        # (all partitions together): a reader slower than the network then stalls for whole seconds
        "queued.min.messages": 1_000_000, "fetch.queue.backoff.ms": 20,
        # -e: a partition's end is reported with an empty fetch answer, which a broker holds up to this long
        **({"fetch.wait.max.ms": 20} if exit_at_end else {}),
        **parse_properties(properties),
    })  # fmt: skip
    try:
        with admin(bootstrap, security, timeout):
            pass  # the connection and the login proven, or one line on why not
        tmd = _topic(consumer, topic, timeout)  # the consumer's own metadata: assign() then starts at once
        known = sorted(tmd.partitions)
        missing = sorted(set(partitions) - set(known))
        if missing:
            raise BadInput(f"-p {missing[0]}: topic {topic!r} has partitions 0-{len(known) - 1}")

        def start_offsets(parts: list[int]) -> list[TopicPartition]:
            if where.start_ms is None:
                return [TopicPartition(topic, p, where.librdkafka()) for p in parts]
            asked = [TopicPartition(topic, p, where.start_ms) for p in parts]
            try:
                found = consumer.offsets_for_times(asked, timeout=timeout)
            except KafkaException as exc:
                raise click.ClickException(f"offsets for time {where.start_ms}: {error_text(exc)}") from None
            for tp in found:
                if tp.error is not None:
                    raise click.ClickException(f"offset for time in partition {tp.partition}: {error_text(tp.error)}")
            return [TopicPartition(topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_END) for tp in found]

        assigned: set[int] = set()
        if group:
            move = (where.start is not None and where.label not in ("beginning", "end")) or where.start_ms is not None

            def on_assign(c: Any, tps: list[TopicPartition]) -> None:
                if move:
                    tps = start_offsets([tp.partition for tp in tps])
                    c.assign(tps)
                assigned.update(tp.partition for tp in tps)

            def on_revoke(_c: Any, tps: list[TopicPartition]) -> None:
                assigned.difference_update(tp.partition for tp in tps)

            consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        else:
            parts = list(partitions) or known
            consumer.assign(start_offsets(parts))
            assigned.update(parts)

        with _quiet_broken_pipe():
            printed = _read(consumer, topic, assigned, formatter, raw_values, delim, count, exit_at_end,
                            where.stop_ms, idle_timeout, bool(group), errors)  # fmt: skip
    except KafkaException as exc:
        raise click.ClickException(error_text(exc)) from None
    except KeyboardInterrupt:  # before reading began (while connecting, joining the group)
        sys.exit(130)
    finally:
        with contextlib.suppress(KafkaException, RuntimeError):
            consumer.close()
    if not quiet:
        click.echo(f"consumed {printed} record(s)", err=True)


def _topic(consumer: Any, topic: str, timeout: float) -> Any:
    """The topic's metadata with its partitions, asked by the consumer itself: partitions it knows the leaders
    of start at once (assigned before, they wait for librdkafka's offset-query timer, half a second). A
    topic that does not exist (after a grace second for one that was just created) is a one-line error."""
    from confluent_kafka import KafkaError, KafkaException

    deadline = time.monotonic() + timeout
    unknown_since: float | None = None
    while True:
        try:
            tmd = consumer.list_topics(topic, timeout=max(0.1, deadline - time.monotonic())).topics.get(topic)
        except KafkaException as exc:
            raise click.ClickException(f"metadata of {topic!r}: {error_text(exc)}") from None
        code = tmd.error.code() if tmd is not None and tmd.error is not None else None
        if tmd is not None and tmd.partitions and code in (None, KafkaError.LEADER_NOT_AVAILABLE):
            return tmd
        now = time.monotonic()
        if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, None):
            unknown_since = unknown_since or now
            if now - unknown_since > 1.0:
                raise click.ClickException(f"topic {topic!r} does not exist")
        elif code == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            raise click.ClickException(f"topic {topic!r}: {error_text(tmd.error)}")
        if now > deadline:
            raise click.ClickException(f"topic {topic!r}: no partitions within {timeout:g}s ({error_text(tmd.error)})")
        time.sleep(0.1)


def _fail(text: str) -> NoReturn:
    raise click.ClickException(text)


def _read(
    consumer: Any,
    topic: str,
    assigned: set[int],
    formatter: Callable[[Any], bytes],
    raw_values: bool,
    delim: bytes,
    count: int | None,
    exit_at_end: bool,
    stop_ms: int | None,
    idle_timeout: float | None,
    group: bool,
    errors: _Errors,
) -> int:
    """The read loop: what librdkafka has queued is taken in one call and written in one write; a call that
    waits for more returns on the first record or event, so a tail prints records as they come."""
    from confluent_kafka import KafkaError, TopicPartition

    eof_code = KafkaError._PARTITION_EOF
    out = sys.stdout.buffer
    take = consumer.consume
    at_end: set[int] = set()
    stopped: set[int] = set()
    stored: dict[int, int] = {}
    printed = 0
    idle_since = time.monotonic()
    fast = raw_values and count is None and stop_ms is None and not group
    errors.live = True
    try:
        while True:
            msgs = take(10_000, 0)
            if not msgs:
                errors.check()
                if exit_at_end and assigned and assigned <= at_end | stopped:
                    break
                if idle_timeout is not None and time.monotonic() - idle_since > idle_timeout:
                    break
                msgs = take(1, 0.2)
                if not msgs:
                    continue
            idle_since = time.monotonic()
            if fast:
                values = []
                for m in msgs:
                    if m.error() is None:
                        values.append(m.value() or b"")
                    else:
                        _event(m, at_end, eof_code, errors, topic)
                if values:
                    out.write(delim.join(values) + delim)
                    printed += len(values)
            else:
                chunk = []
                for m in msgs:
                    if m.error() is not None:
                        _event(m, at_end, eof_code, errors, topic)
                        continue
                    p = m.partition()
                    if stop_ms is not None:
                        if p in stopped:
                            continue
                        ts_type, ts = m.timestamp()
                        if ts_type and ts >= stop_ms:
                            stopped.add(p)
                            consumer.pause([TopicPartition(topic, p)])
                            continue
                    chunk.append(formatter(m))
                    stored[p] = m.offset() + 1
                    printed += 1
                    if count is not None and printed >= count:
                        break
                if chunk:
                    out.write(b"".join(chunk))
                if group and stored:
                    _store(consumer, topic, stored)
                if count is not None and printed >= count:
                    break
            out.flush()
            errors.check()
            if exit_at_end and assigned and assigned <= at_end | stopped:
                break
    except KeyboardInterrupt:
        pass  # Ctrl-C ends a tail: what was printed is committed below
    finally:
        errors.live = False
    out.flush()
    if group and stored:
        _store(consumer, topic, stored)
        from confluent_kafka import KafkaException

        with contextlib.suppress(KafkaException):
            consumer.commit(asynchronous=False)
    return printed


def _store(consumer: Any, topic: str, stored: dict[int, int]) -> None:
    from confluent_kafka import KafkaException, TopicPartition

    try:
        consumer.store_offsets(offsets=[TopicPartition(topic, p, o) for p, o in stored.items()])
    except KafkaException:
        pass  # a partition revoked meanwhile: its next owner reads those records again (at least once)


def _event(m: Any, at_end: set[int], eof_code: int, errors: _Errors, topic: str) -> None:
    """A consumer event: a partition's end (-e counts them), or an error that ends the command or is shown."""
    err = m.error()
    if err.code() == eof_code:
        at_end.add(m.partition())
        return
    from logbroker._kafka.errors import Kind, classify

    c = classify(err)
    if c.kind is Kind.UNKNOWN_TOPIC:
        _fail(f"topic {topic!r}: {error_text(err)}")
    if err.fatal() or c.kind is Kind.AUTH:
        _fail(error_text(err))
    errors.warn(error_text(err))
