"""`logbroker serve`: run the broker until SIGTERM or Ctrl-C."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

import click

from logbroker.config import ConfigError, load_settings

# Young generation every 50,000 net allocations (CPython: 700); older ones as CPython schedules them.
GC_THRESHOLDS = (50_000, 20, 20)


@click.command()
@click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path),
    help="Settings file: TOML, YAML, or Kafka's server.properties (Kafka's broker property names; "
    "logbroker.<setting> for the rest).",
)
@click.option("--data-dir", type=click.Path(path_type=Path), help="Where partition logs live.")
@click.option("--listen", help="HOST:PORT to accept clients on (default 127.0.0.1:9092).")
@click.option("--advertised-listener", help="HOST:PORT clients should connect to.")
@click.option(
    "--listeners",
    help="Several listeners, Kafka's form: PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9094 (replaces --listen).",
)
@click.option("--advertised-listeners", help="NAME://HOST:PORT,... clients are told to use, per listener.")
@click.option("--listener-security-protocol-map", help="NAME:PROTOCOL,... for listeners not named after a protocol.")
@click.option("--ssl-keystore-location", type=click.Path(path_type=Path), help="PEM: private key + certificate chain.")
@click.option("--ssl-truststore-location", type=click.Path(path_type=Path), help="PEM: CAs client certs chain to.")
@click.option("--ssl-client-auth", type=click.Choice(["none", "requested", "required"]), help="Client certificates.")
@click.option("--sasl-enabled-mechanisms", help="PLAIN,SCRAM-SHA-256,SCRAM-SHA-512 (default: all three).")
@click.option("--sasl-plain-users-file", type=click.Path(path_type=Path), help="PLAIN users: name=password lines.")
@click.option(
    "--authorizer/--no-authorizer",
    "authorizer",
    default=None,
    help="Enforce ACLs (Kafka's StandardAuthorizer; authorizer.class.name in a config file).",
)
@click.option("--super-users", help="Principals allowed everything: User:admin;User:ops.")
@click.option("--fsync", type=click.Choice(["always", "interval", "never"]), help="Durability policy.")
@click.option("--fsync-interval-ms", type=int)
@click.option("--num-partitions", type=int, help="Partitions of auto-created topics.")
@click.option("--auto-create-topics/--no-auto-create-topics", default=None)
@click.option("--message-max-bytes", type=int)
@click.option("--log-level", help="DEBUG, INFO, WARNING, ERROR.")
@click.option(
    "--metrics-listen", help="HOST:PORT for Prometheus /metrics, /health and /ready (off by default; loopback advised)."
)
@click.option(
    "--console",
    "console_listen",
    help="HOST:PORT for the web console (off by default; e.g. 127.0.0.1:9080). It reads this broker's own "
    "metrics and share-partition locks; on a SASL-only broker each browser logs in.",
)
@click.option("--console-tls-cert", type=click.Path(path_type=Path), help="PEM certificate: the console over HTTPS.")
@click.option("--console-tls-key", type=click.Path(path_type=Path), help="PEM private key of --console-tls-cert.")
@click.option("--log-format", type=click.Choice(["text", "json"]), help="text (default), or one JSON object per line.")
def serve(config_file: Path | None, **flags: object) -> None:
    """Run the embedded broker until SIGTERM or Ctrl-C.

    Only the common settings have flags here. Every setting can be set in the --config file (its Kafka
    property name, or logbroker.<setting>) or as a LOGBROKER_<SETTING> environment variable: run
    `logbroker config list` to see them all with their names, types and defaults.
    """
    notes: list[str] = []
    authorizer = flags.pop("authorizer")
    if authorizer is not None:
        from logbroker.config import STANDARD_AUTHORIZER

        flags["authorizer_class_name"] = STANDARD_AUTHORIZER if authorizer else ""
    try:
        settings = load_settings(config_file, notes=notes, **flags)
    except ConfigError as exc:
        click.echo(str(exc), err=True)
        sys.exit(2)
    from logbroker.broker.loggers import setup as setup_logging
    from logbroker.cli.config_cmd import cli_envvars
    from logbroker.config import unknown_environment

    setup_logging(settings.log_level, settings.log_format)
    unknown = unknown_environment(os.environ, cli_envvars(click.get_current_context().find_root().command))
    if unknown:
        notes.append(f"ignoring unknown LOGBROKER_ environment variables (see `logbroker config list`): "
                     f"{', '.join(unknown)}")  # fmt: skip
    for note in notes:
        logging.getLogger("logbroker.config").warning("%s", note)
    from logbroker.broker import Broker

    async def run() -> None:
        # Before the listeners open: a stop asked for as soon as the port answers (a supervisor, a test) is
        # a graceful one, not SIGTERM's default death (run 43 caught that window).
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        broker = Broker(settings)
        try:
            await broker.start()
        except (OSError, RuntimeError, ValueError) as exc:
            click.echo(f"logbroker: cannot start: {exc}", err=True)
            sys.exit(1)
        # The broker allocates dozens of short-lived objects per request. CPython's default collects the
        # young generation every 700 allocations, and now and then an older one that walks every loaded
        # index and group: ~7% of the loop on pipelined one-record produces (perf). What start-up loaded
        # is never garbage: frozen, no collection walks it. Only this process: the embedded broker leaves
        # its host's collector alone.
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)
        console = None
        if settings.console_listen:
            try:
                console = await asyncio.to_thread(start_console, broker, settings)
            except (OSError, ValueError) as exc:
                click.echo(f"logbroker: cannot start the console: {exc}", err=True)
                await broker.stop()
                sys.exit(1)
        await stop.wait()
        logging.getLogger("logbroker").info("shutting down")
        if console is not None:
            await asyncio.to_thread(console.stop)
        await broker.stop()

    asyncio.run(run())


def start_console(broker: Any, settings: Any) -> Any:
    """The web console beside the broker, on a thread of its own, connected to one of its listeners over the
    wire like any client (PLAINTEXT preferred, else SASL_PLAINTEXT with a login per browser), and reading
    the broker's metrics and share-partition locks in process."""
    from logbroker._kafka.settings import KafkaSettings
    from logbroker.broker.inspect import BrokerInspector
    from logbroker.console.options import ConsoleOptions
    from logbroker.console.server import ConsoleServer

    by_protocol = {rt.spec.protocol: rt for rt in reversed(broker.listeners)}
    rt = by_protocol.get("PLAINTEXT") or by_protocol.get("SASL_PLAINTEXT")
    if rt is None:
        raise ValueError("the console connects to the broker over PLAINTEXT or SASL_PLAINTEXT; this broker has only "
                         "TLS listeners: add a loopback one (listeners=...,PLAINTEXT://127.0.0.1:9092), or run "
                         "`logbroker console --command-config ...` against it")  # fmt: skip
    host, port = broker.context.endpoints[rt.spec.name]
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    security = None
    if rt.spec.protocol == "SASL_PLAINTEXT":
        mechanism = next((m for m in ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN") if m in rt.mechanisms), "PLAIN")
        security = KafkaSettings(f"{host}:{port}", "SASL_PLAINTEXT", mechanism)
    options = ConsoleOptions(f"{host}:{port}", security, settings.console_listen,
                             str(settings.console_tls_cert) if settings.console_tls_cert else None,
                             str(settings.console_tls_key) if settings.console_tls_key else None,
                             local=BrokerInspector(broker.context))  # fmt: skip
    server = ConsoleServer(options)
    server.start()
    return server
