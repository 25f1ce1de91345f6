"""What the client commands share: the --bootstrap option, the security options, connecting, errors, a
wide console."""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

if TYPE_CHECKING:
    from rich.console import Console

    from logbroker._kafka.settings import KafkaSettings
    from logbroker.client import KafkaClient

__all__ = ["BOOTSTRAP", "SECURITY", "client", "fail", "security_settings", "wide_console"]

F = TypeVar("F", bound=Callable[..., Any])

BOOTSTRAP = click.option(
    "-b",
    "--bootstrap",
    default="127.0.0.1:9092",
    envvar="LOGBROKER_BOOTSTRAP",
    show_default=True,
    help="Broker HOST:PORT (any Kafka-compatible broker).",
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


def security_settings(bootstrap: str, **given: Any) -> KafkaSettings | None:
    """The options of `SECURITY` as shared-layer settings; None when none was given (plain PLAINTEXT)."""
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
    if settings.uses_sasl and settings.sasl_username is None:
        raise click.UsageError(f"{settings.security_protocol} needs --sasl-username (or sasl.jaas.config)")
    if settings.uses_sasl and settings.sasl_password is None:
        if not sys.stdin.isatty():
            raise click.UsageError("no SASL password: give --sasl-password or LOGBROKER_SASL_PASSWORD")
        password = click.prompt(f"SASL password of {settings.sasl_username}", hide_input=True)
        from dataclasses import replace

        settings = replace(settings, sasl_password=password)
    return settings


def SECURITY(f: F) -> F:
    """The security options (Kafka's ``--command-config`` and flags), passed on as ``security``
    (`KafkaSettings` or None)."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        given = {name: kwargs.pop(name) for name in _SECURITY_NAMES}
        kwargs["security"] = security_settings(kwargs.get("bootstrap") or "127.0.0.1:9092", **given)
        return f(*args, **kwargs)

    for option in reversed(_SECURITY_OPTIONS):
        wrapper = option(wrapper)
    return wrapper  # type: ignore[return-value]


@contextlib.contextmanager
def client(bootstrap: str, security: KafkaSettings | None = None) -> Iterator[KafkaClient]:
    """A client connected (and logged in) to ``bootstrap`` for a ``with`` block; failing to connect, log in or
    keep the connection (a broker that closes it: a listener wanting TLS or SASL) is a one-line error."""
    from logbroker.client import KafkaClient
    from logbroker.client.connection import AuthenticationFailed, TlsError

    try:
        c = KafkaClient(bootstrap, security=security)
    except AuthenticationFailed as exc:
        raise click.ClickException(f"authentication with {bootstrap} failed: {exc}") from None
    except TlsError as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:
        raise click.ClickException(f"cannot reach {bootstrap}: {exc}") from None
    try:
        yield c
    except (AuthenticationFailed, TlsError) as exc:  # a second broker (a partition leader, a coordinator)
        raise click.ClickException(str(exc)) from None
    except OSError as exc:
        raise click.ClickException(f"lost {bootstrap}: {exc}") from None
    finally:
        c.close()


def fail(exc: Exception) -> NoReturn:
    raise click.ClickException(str(exc)) from None


def wide_console() -> Console:
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 160)  # pipes and logs: keep member ids on one line
    return console
