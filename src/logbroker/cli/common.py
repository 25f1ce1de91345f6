"""What the client commands share: the --bootstrap option, the security options, connecting, errors, a
wide console, and `Admin`: confluent-kafka's AdminClient with one-line errors for the admin verbs."""

from __future__ import annotations

import contextlib
import functools
import json
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from logbroker.addresses import parse_host_port

if TYPE_CHECKING:
    from concurrent.futures import Future

    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient
    from rich.console import Console

    from logbroker._kafka.settings import KafkaSettings

__all__ = [
    "BOOTSTRAP",
    "SECURITY",
    "Admin",
    "AdminCommand",
    "AdminGroup",
    "BadInput",
    "admin",
    "bootstrap_servers",
    "cell",
    "client_settings",
    "echo_json",
    "error_text",
    "fail",
    "kafka_client",
    "kafka_failure",
    "security_settings",
    "utf8_name",
    "wide_console",
]

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


class BadInput(click.UsageError):
    """Bad input (exit 2) shown as one line, without the usage text: scripts and people read one reason."""

    def show(self, file: Any = None) -> None:
        click.echo(f"Error: {self.format_message()}", file=file or sys.stderr)


def _one_line(exc: click.UsageError) -> BadInput:
    if isinstance(exc, BadInput):
        return exc
    one = BadInput(exc.format_message())
    one.exit_code = exc.exit_code
    return one


class AdminCommand(click.Command):
    """A command whose usage errors (bad options, missing arguments, bad values) are one line and exit 2."""

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except click.UsageError as exc:
            raise _one_line(exc) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            raise _one_line(exc) from None


class AdminGroup(click.Group):
    """A command group of `AdminCommand`s (an unknown subcommand is one line too)."""

    command_class = AdminCommand

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as exc:
            raise _one_line(exc) from None


def bootstrap_servers(values: str | Iterable[str]) -> str:
    """``-b`` values (each one HOST:PORT or a comma-separated list, `[v6]:PORT` for IPv6 addresses) as
    librdkafka's ``bootstrap.servers``; `BadInput` naming the first bad entry."""
    items = [values] if isinstance(values, str) else list(values)
    servers: list[str] = []
    for item in items:
        for part in str(item).split(","):
            part = part.strip()
            if not part:
                continue
            try:
                host, _port = parse_host_port(part, "bootstrap server")
            except ValueError:
                port = part.rpartition(":")[2]
                if port.isdigit() and not part.endswith("]"):
                    raise BadInput(f"bootstrap server {part!r}: port {port} is not in 1..65535") from None
                host = ""
            if not host or any(c.isspace() or c in "/[]" for c in host):
                raise BadInput(f"bootstrap server {part!r} is not HOST:PORT (e.g. 127.0.0.1:9092, [::1]:9092)")
            servers.append(part)
    if not servers:
        raise BadInput("no bootstrap server given (-b HOST:PORT)")
    return ",".join(dict.fromkeys(servers))


def _bootstrap_option(_ctx: click.Context, _param: click.Parameter, value: Any) -> str:
    return bootstrap_servers(value or (DEFAULT_BOOTSTRAP,))


BOOTSTRAP = click.option(
    "-b",
    "--bootstrap",
    multiple=True,
    default=(DEFAULT_BOOTSTRAP,),
    envvar="LOGBROKER_BOOTSTRAP",
    show_default=True,
    callback=_bootstrap_option,
    help="Broker HOST:PORT (any Kafka-compatible broker); several: repeat -b or separate them with commas.",
)

_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)
_SECURITY_OPTIONS = (
    click.option(
        "--command-config",
        type=_FILE,
        help="Kafka client properties file (security.protocol, sasl.mechanism, sasl.jaas.config, ssl.truststore.*, "
        "ssl.keystore.* as PEM, ssl.key.password, ...), as Kafka's tools take; the flags below override it.",
    ),
    click.option(
        "--security-protocol",
        type=click.Choice(_PROTOCOLS, case_sensitive=False),
        help="Default: what the other options imply (SASL credentials: SASL_*, a CA or certificate: *SSL).",
    ),
    click.option("--sasl-mechanism", type=click.Choice(_MECHANISMS, case_sensitive=False), help="Default PLAIN."),
    click.option("--sasl-username", help="SASL user (PLAIN or SCRAM)."),
    click.option(
        "--sasl-password",
        envvar="LOGBROKER_SASL_PASSWORD",
        show_envvar=True,
        help="SASL password; prompted for when a username is given without one (on a terminal).",
    ),
    click.option("--ssl-ca", type=_FILE, help="PEM CA bundle that signed the brokers' certificates."),
    click.option("--ssl-cert", type=_FILE, help="PEM client certificate (chain); may hold the key too."),
    click.option("--ssl-key", type=_FILE, help="PEM private key of --ssl-cert (default: in the --ssl-cert file)."),
    click.option(
        "--ssl-key-password", envvar="LOGBROKER_SSL_KEY_PASSWORD", show_envvar=True, help="Of an encrypted key."
    ),
)
_SECURITY_NAMES = ("command_config", "security_protocol", "sasl_mechanism", "sasl_username", "sasl_password",
                   "ssl_ca", "ssl_cert", "ssl_key", "ssl_key_password")  # fmt: skip


def security_settings(bootstrap: str, credentials_required: bool = True, **given: Any) -> KafkaSettings | None:
    """The options of `SECURITY` as shared-layer settings; None when none was given (plain PLAINTEXT).
    ``credentials_required=False`` (the console, whose users log in themselves): SASL without a user."""
    from logbroker._kafka.settings import SecurityConfigError, from_properties, read_properties

    config = given.pop("command_config", None)
    if config is None and not any(v is not None for v in given.values()):
        return None
    try:
        props = read_properties(config) if config is not None else {}
    except (OSError, ValueError) as exc:
        raise click.BadParameter(f"cannot read {config}: {exc}", param_hint="--command-config") from None
    for key in ("security_protocol", "sasl_mechanism"):
        if given.get(key):
            given[key] = given[key].upper()
    if given.get("ssl_cert") and not given.get("ssl_key"):
        given["ssl_key"] = given["ssl_cert"]
    for key in ("ssl_ca", "ssl_cert", "ssl_key"):
        if given.get(key) is not None:
            given[key] = str(given[key])
    try:
        settings = from_properties(props, bootstrap, **given)
    except SecurityConfigError as exc:
        hint = "--command-config" if config is not None else "security options"
        raise click.BadParameter(str(exc), param_hint=hint) from None
    if not credentials_required:
        return settings
    if settings.uses_sasl and settings.sasl_username is None:
        raise click.UsageError(f"{settings.security_protocol} needs --sasl-username (or sasl.jaas.config)")
    if settings.uses_sasl and settings.sasl_password is None:
        if not sys.stdin.isatty():
            raise click.UsageError("no SASL password: give --sasl-password or LOGBROKER_SASL_PASSWORD")
        password = click.prompt(f"SASL password of {settings.sasl_username}", hide_input=True)
        from dataclasses import replace

        settings = replace(settings, sasl_password=password)
    return settings


def SECURITY(f: F, credentials_required: bool = True) -> F:
    """The security options (Kafka's ``--command-config`` and flags), passed on as ``security``
    (`KafkaSettings` or None)."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        given = {name: kwargs.pop(name) for name in _SECURITY_NAMES}
        kwargs["security"] = security_settings(kwargs.get("bootstrap") or "127.0.0.1:9092", credentials_required,
                                               **given)  # fmt: skip
        return f(*args, **kwargs)

    for option in reversed(_SECURITY_OPTIONS):
        wrapper = option(wrapper)
    return wrapper  # type: ignore[return-value]


def fail(exc: Exception) -> NoReturn:
    raise click.ClickException(str(exc)) from None


def wide_console() -> Console:
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 10_000)  # pipes and logs: never cut or wrap a line at 80 columns
    return console


def cell(value: object) -> str:
    """A table cell or printed value as it is: a name holding rich markup (``[bold]``) is not markup."""
    from rich.markup import escape

    return "-" if value is None else escape(str(value))


def echo_json(value: object) -> None:
    """``--json`` output: indented, keys in the documented order, non-ASCII as it is."""
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


def utf8_name(kind: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """An option/argument callback refusing names that are not valid UTF-8 (Kafka's strings are UTF-8; a
    non-UTF-8 command line arrives as lone surrogates, which no client can send)."""

    def check(_ctx: click.Context, _param: click.Parameter, value: Any) -> Any:
        for v in value if isinstance(value, (tuple, list)) else [value]:
            if isinstance(v, str):
                try:
                    v.encode("utf-8")
                except UnicodeEncodeError:
                    shown = v.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
                    raise BadInput(f"{kind} '{shown}' is not valid UTF-8") from None
        return value

    return check


# ------------------------------------------------------------------------------------ confluent-kafka admin


def client_settings(bootstrap: str, security: KafkaSettings | None) -> KafkaSettings:
    """The shared-layer settings of the command line: `security` (whose servers are `bootstrap`) or plain."""
    from dataclasses import replace

    from logbroker._kafka.settings import KafkaSettings

    if security is None:
        return KafkaSettings(bootstrap)
    return replace(security, bootstrap_servers=bootstrap)


def kafka_client(build: Callable[..., T], bootstrap: str, security: KafkaSettings | None, **overrides: Any) -> T:
    """A command's client from the shared layer (``build``: `_kafka.producer`, `consumer` or `admin`): the
    security settings, a client id, and librdkafka's own log lines kept off the terminal (its errors reach
    `Admin` through ``error_cb`` instead). A property librdkafka refuses (``-X``) is bad input."""
    import logging

    settings = client_settings(bootstrap, security)
    quiet = logging.getLogger("logbroker.cli.librdkafka")
    quiet.propagate = False
    quiet.addHandler(logging.NullHandler())
    base: dict[str, Any] = {"logger": quiet}
    if settings.client_id is None:
        base["client.id"] = "logbroker-cli"
    return build(settings, refused=lambda message: BadInput(f"the client settings were refused: {message}"),
                 **{**base, **overrides})  # fmt: skip


# Broker error codes that mean the request itself was wrong (a bad value given on the command line): exit 2.
_BAD_INPUT_CODES = frozenset({17, 37, 38, 40, 42, 43})  # INVALID_TOPIC, _PARTITIONS, _REPLICATION, _CONFIG, ...
_LOCAL_BAD_INPUT = ("_INVALID_ARG", "_UNKNOWN_PARTITION", "_UNKNOWN_TOPIC")
_AFTER = re.compile(r"\s*\(after \d+ms[^)]*\)\s*$")
_SERVER_PREFIX = re.compile(r"^(?:\[thrd:[^\]]*\]: )?\S+:\d+/(?:bootstrap|\d+): ")


def error_text(err: KafkaError | BaseException | None) -> str:
    """A librdkafka error as one line in Kafka's vocabulary: the broker's code name (UNKNOWN_TOPIC_OR_PARTITION,
    as Kafka's tools print it) and the message; client-side errors by librdkafka's name."""
    from logbroker._kafka.errors import kafka_error_of
    from logbroker.protocol.errors import ErrorCode

    ke = kafka_error_of(err)
    if ke is None:
        return str(err) or type(err).__name__
    code = ke.code()
    try:
        name = ErrorCode(code).name if code >= 0 else ke.name()
    except ValueError:
        name = ke.name()
    text = _AFTER.sub("", _SERVER_PREFIX.sub("", ke.str() or "")).strip()
    generic = text.removeprefix("Broker: ").replace(" ", "_").upper()
    return name if not text or generic == name or generic.rstrip(".") == name else f"{name} ({text})"


def kafka_failure(err: KafkaError | BaseException, what: str = "") -> click.ClickException:
    """A failed admin call as a one-line error: exit 2 when the broker or client says the input was bad,
    exit 1 for everything else."""
    from logbroker._kafka.errors import kafka_error_of

    ke = kafka_error_of(err)
    text = f"{what}: {error_text(err)}" if what else error_text(err)
    if ke is not None and (ke.code() in _BAD_INPUT_CODES or ke.name() in _LOCAL_BAD_INPUT):
        return BadInput(text)
    if isinstance(err, (ValueError, TypeError)):
        return BadInput(text)
    return click.ClickException(text)


# A partition's leader is being (re)installed: LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER,
# FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH.
_LEADER_MOVING = frozenset({5, 6, 74, 75})
# A group coordinator is loading or moving: COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR.
_COORDINATOR_MOVING = frozenset({14, 15, 16})


def leader_moving(outcome: Any) -> bool:
    """Whether a partition's failed admin outcome is worth asking again. By code: librdkafka does not mark a
    partition's error in an admin result retriable (KafkaError(6).retriable() is False)."""
    from logbroker._kafka.errors import kafka_error_of

    ke = kafka_error_of(outcome) if isinstance(outcome, BaseException) else None
    return ke is not None and (ke.code() in _LEADER_MOVING or ke.retriable())


class Admin:
    """confluent-kafka's AdminClient for one command: several bootstrap servers, TLS/SASL from the shared
    settings, librdkafka's retries. Each wait also serves librdkafka's error callback, so a refused login, a
    TLS failure or no reachable broker ends the command at once as one line, not after the timeout."""

    def __init__(self, bootstrap: str, security: KafkaSettings | None, timeout: float = 30.0) -> None:
        from logbroker import _kafka

        self.bootstrap, self.security, self.timeout = bootstrap, security, timeout
        self._errors: list[KafkaError] = []
        self._transport: str | None = None
        given = security.extra if security is not None else {}
        defaults = {"socket.connection.setup.timeout.ms": int(timeout * 1000),
                    "allow.auto.create.topics": False}  # a topic's metadata must not create it  # fmt: skip
        self.client: AdminClient = kafka_client(
            _kafka.admin,
            bootstrap,
            security,
            error_cb=self._errors.append,
            logger=self._logger(),
            **{k: v for k, v in defaults.items() if k not in given},
        )

    def _logger(self) -> Any:
        """A logger that keeps librdkafka's lines off the terminal but remembers the last connection failure
        (FAIL: "Disconnected ...", "Connect to ... failed"), which librdkafka logs without an error callback."""
        import logging

        admin = self

        class LastFailure(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                args = record.args if isinstance(record.args, tuple) else ()
                if len(args) == 3 and args[0] == "FAIL":
                    admin._transport = _AFTER.sub("", str(args[2])).strip()

        log = logging.getLogger(f"logbroker.cli.librdkafka.{id(self)}")
        log.propagate = False
        log.setLevel(logging.INFO)  # librdkafka logs FAIL at INFO
        log.handlers[:] = [LastFailure()]
        return log

    # -- waiting

    def _check(self) -> None:
        from confluent_kafka import KafkaError

        self.client.poll(0)
        errors, self._errors[:] = list(self._errors), []
        errors.sort(key=lambda e: e.code() == KafkaError._ALL_BROKERS_DOWN)  # the cause first
        for e in errors:
            code, text = e.code(), _AFTER.sub("", e.str() or "").strip()
            if code == KafkaError._AUTHENTICATION:
                raise click.ClickException(self._auth_failed(text))
            if code == KafkaError._SSL or (code == KafkaError._TRANSPORT and "SSL" in text and "handshake" in text):
                raise click.ClickException(self._tls_failed(text))
            if code in (KafkaError._TRANSPORT, KafkaError._RESOLVE):
                self._transport = text
            if code == KafkaError._ALL_BROKERS_DOWN:
                raise click.ClickException(self._unreachable())

    def _auth_failed(self, text: str) -> str:
        s = self.security
        text = _SERVER_PREFIX.sub("", text).removeprefix("SASL authentication error: ")
        who = f"SASL {s.sasl_mechanism} login as {s.sasl_username}" if s is not None and s.uses_sasl else "login"
        return f"authentication with {self.bootstrap} failed: {who}: SASL_AUTHENTICATION_FAILED ({text})"

    def _tls_failed(self, text: str) -> str:
        text = _SERVER_PREFIX.sub("", text)
        lowered = text.lower()
        hint = ""
        if "certificate verify failed" in lowered:
            hint = " (the broker's certificate was not accepted: ssl.truststore.location / --ssl-ca)"
        elif "bad certificate" in lowered or "certificate required" in lowered:
            hint = " (the broker requires a client certificate: ssl.keystore.location / --ssl-cert, --ssl-key)"
        elif ("disconnected" in lowered or "reset" in lowered) and not (self.security and self.security.ssl_cert):
            hint = " (does it want a client certificate? ssl.keystore.location / --ssl-cert, --ssl-key)"
        return f"TLS with {self.bootstrap} failed: {text}{hint}"

    def _unreachable(self) -> str:
        last = _SERVER_PREFIX.sub("", self._transport or "no broker answered")
        if "SSL" in last or "certificate" in last:  # a TLS alert (Kafka: bad_certificate without one)
            return self._tls_failed(last)
        if "Disconnected" in last or "Connection reset" in last:
            s = self.security
            missing = [] if s is not None and s.uses_ssl else ["TLS"]
            if s is None or not s.uses_sasl:
                missing.append("SASL")
            if s is not None and s.uses_ssl and not s.ssl_cert:
                missing.append("a client certificate")
            hint = f" (does it need {' or '.join(missing)}? see --command-config)" if missing else ""
            return f"{self.bootstrap} closed the connection{hint}: {last}"
        return f"cannot reach {self.bootstrap}: {last}"

    def wait(self, futures: Iterable[Future[Any]], what: str = "") -> None:
        """Until every future is done; a connection-level failure or the timeout ends the command."""
        from concurrent.futures import wait

        pending = set(futures)
        deadline = time.monotonic() + self.timeout + 5
        while pending:
            _done, pending = wait(pending, timeout=0.05)
            self._check()
            if pending and time.monotonic() > deadline:
                last = f" (last error: {self._transport})" if self._transport else ""
                raise click.ClickException(f"timed out after {self.timeout:g}s {what or 'waiting'} on "
                                           f"{self.bootstrap}{last}")  # fmt: skip

    def result(self, future: Future[Any], what: str = "") -> Any:
        """One future's result, its failure as a one-line error (`kafka_failure`)."""
        from confluent_kafka import KafkaException

        self.wait([future], what)
        try:
            return future.result()
        except (KafkaException, ValueError, TypeError) as exc:
            raise kafka_failure(exc, what) from None

    def results(self, futures: Mapping[Any, Future[Any]], what: str = "") -> dict[Any, Any]:
        """Each future's result or exception, keyed as given (for commands that report per item)."""
        self.wait(futures.values(), what)
        out: dict[Any, Any] = {}
        for key, fut in futures.items():
            exc = fut.exception()
            out[key] = exc if exc is not None else fut.result()
        return out

    def list_offsets(self, specs: Mapping[Any, Any], what: str = "list offsets") -> dict[Any, Any]:
        """ListOffsets of each TopicPartition at its OffsetSpec: the ListOffsetsResultInfo or the exception.
        Partitions whose leader is moving (NOT_LEADER_OR_FOLLOWER while Kafka still installs a new leader it
        already shows in Metadata) are asked again until the command's timeout; a topic that is gone is not."""
        out: dict[Any, Any] = {}
        pending = dict(specs)
        deadline = time.monotonic() + self.timeout
        while pending:
            futures = self.call(self.client.list_offsets, pending, what=what)
            outcomes = self.results({tp: futures[tp] for tp in futures}, what)
            retry = {}
            for tp, outcome in outcomes.items():
                if leader_moving(outcome) and time.monotonic() < deadline:
                    retry[tp] = pending[tp]
                else:
                    out[tp] = outcome
            pending = retry
            if pending:
                time.sleep(0.1)
        return out

    def list_groups(self, what: str = "list groups") -> Any:
        """ListGroups of every broker, asked again while a broker answers that its coordinator is loading or
        moving (as Kafka's own admin client does until its timeout): a broker just started says
        COORDINATOR_LOAD_IN_PROGRESS for a moment, and the listing would otherwise fail or miss its groups."""
        from logbroker._kafka.errors import kafka_error_of

        deadline = time.monotonic() + self.timeout
        while True:
            listed = self.result(self.call(self.client.list_consumer_groups, what=what), what)
            errors = [kafka_error_of(e) for e in listed.errors]
            moving = bool(errors) and all(ke is not None and ke.code() in _COORDINATOR_MOVING for ke in errors)
            if not moving or time.monotonic() > deadline:
                return listed
            time.sleep(0.2)

    def call(self, fn: Callable[..., Any], *args: Any, what: str = "", **kwargs: Any) -> Any:
        """Start an admin call (bad arguments refused by confluent-kafka are bad input, exit 2)."""
        from confluent_kafka import KafkaException

        try:
            return fn(*args, request_timeout=self.timeout, **kwargs)
        except (KafkaException, ValueError, TypeError) as exc:
            raise kafka_failure(exc, what) from None

    # -- shared calls

    def cluster(self) -> Any:
        """DescribeCluster: the first round trip of every command, so connection failures show up here."""
        return self.result(self.call(self.client.describe_cluster, what="describe the cluster"), "describe the cluster")

    def metadata(self, topic: str | None = None) -> Any:
        """Metadata of every topic (or one), after the connection was proven by `cluster`."""
        from confluent_kafka import KafkaException

        self._check()
        try:
            return self.client.list_topics(topic, timeout=self.timeout)
        except KafkaException as exc:
            self._check()
            raise kafka_failure(exc, "read metadata") from None

    def close(self) -> None:
        """AdminClient has no close(): librdkafka's handle (its sockets and threads) goes when the last
        reference does, so drop ours now rather than at some later garbage collection (an in-process caller,
        such as a test running many commands, would otherwise hold descriptors for each)."""
        with contextlib.suppress(Exception):
            self.client.poll(0)
        self.__dict__.pop("client", None)


@contextlib.contextmanager
def admin(bootstrap: str, security: KafkaSettings | None = None, timeout: float = 30.0) -> Iterator[Admin]:
    """An `Admin` for a ``with`` block whose connection was proven (DescribeCluster answered); names that
    are not valid UTF-8 in answers, a lost broker or a refused login end the command as one line."""
    a = Admin(bootstrap, security, timeout)
    try:
        a.cluster()
        yield a
    except UnicodeError as exc:
        raise click.ClickException(f"the broker sent a name that is not valid UTF-8: {exc}") from None
    finally:
        a.close()
