"""`logbroker console`: the web console, pointed at any Kafka-compatible cluster."""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from logbroker.cli.common import BOOTSTRAP, SECURITY

if TYPE_CHECKING:
    from logbroker._kafka.settings import KafkaSettings

_PEM = click.Path(exists=True, dir_okay=False, path_type=Path)


def tls_options(prefix: str = "") -> Any:
    def add(f: Any) -> Any:
        f = click.option(f"--{prefix}tls-key", type=_PEM, help="PEM private key of the console's certificate.")(f)
        return click.option(f"--{prefix}tls-cert", type=_PEM,
                            help="PEM certificate (chain) the console serves HTTPS with.")(f)  # fmt: skip

    return add


@click.command()
@BOOTSTRAP
@functools.partial(SECURITY, credentials_required=False)
@click.option(
    "--listen",
    default="127.0.0.1:9080",
    show_default=True,
    help="HOST:PORT to serve on. Off loopback, give --tls-cert/--tls-key (or it warns: clear text).",
)
@tls_options()
@click.option(
    "--metrics-url",
    help="A logbroker's /metrics (its --metrics-listen) to chart throughput, requests "
    "and fsync latency from; without it the charts come from the admin API (log sizes, end offsets).",
)
@click.option("--log-level", default="INFO", show_default=True)
def console(bootstrap: str, security: KafkaSettings | None, listen: str, tls_cert: Path | None, tls_key: Path | None,
            metrics_url: str | None, log_level: str) -> None:  # fmt: skip
    """A web console for a Kafka cluster (the embedded broker or any other): topics, messages, groups and lag,
    share groups, transactions, ACLs and SCRAM users.

    On a SASL listener every browser logs in and acts as that user; the --sasl-username/password given
    here, if any, are not used for browsers. Run `logbroker serve --console HOST:PORT` to have the broker
    serve it itself, with its own metrics.
    """
    from logbroker.broker.loggers import setup as setup_logging
    from logbroker.console.options import ConsoleOptions
    from logbroker.console.server import ConsoleConfigError, ConsoleServer

    setup_logging(log_level.upper(), "text")
    options = ConsoleOptions(bootstrap, security, listen, str(tls_cert) if tls_cert else None,
                             str(tls_key) if tls_key else None, metrics_url)  # fmt: skip
    try:
        server = ConsoleServer(options)
    except (ConsoleConfigError, ValueError) as exc:
        raise click.UsageError(str(exc)) from None
    try:
        server.run()
    except OSError as exc:
        raise click.ClickException(str(exc)) from None
    logging.getLogger("logbroker.console").info("console stopped")
