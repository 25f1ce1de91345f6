"""`logbroker serve`: run the broker until SIGTERM or Ctrl-C."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path

import click

from logbroker.config import ConfigError, load_settings


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
@click.option("--fsync", type=click.Choice(["always", "interval", "never"]), help="Durability policy.")
@click.option("--fsync-interval-ms", type=int)
@click.option("--num-partitions", type=int, help="Partitions of auto-created topics.")
@click.option("--auto-create-topics/--no-auto-create-topics", default=None)
@click.option("--message-max-bytes", type=int)
@click.option("--log-level", help="DEBUG, INFO, WARNING, ERROR.")
def serve(config_file: Path | None, **flags: object) -> None:
    """Run the embedded broker until SIGTERM or Ctrl-C."""
    notes: list[str] = []
    try:
        settings = load_settings(config_file, notes=notes, **flags)
    except ConfigError as exc:
        click.echo(str(exc), err=True)
        sys.exit(2)
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    for note in notes:
        logging.getLogger("logbroker.config").warning("%s", note)
    from logbroker.broker import Broker

    async def run() -> None:
        broker = Broker(settings)
        try:
            await broker.start()
        except (OSError, RuntimeError) as exc:
            click.echo(f"logbroker: cannot start: {exc}", err=True)
            sys.exit(1)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        logging.getLogger("logbroker").info("shutting down")
        await broker.stop()

    asyncio.run(run())
