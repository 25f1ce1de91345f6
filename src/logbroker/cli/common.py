"""What the client commands share: the --bootstrap option, connecting, errors, a wide console."""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

import click

if TYPE_CHECKING:
    from rich.console import Console

    from logbroker.client import KafkaClient

__all__ = ["BOOTSTRAP", "client", "fail", "wide_console"]

BOOTSTRAP = click.option(
    "-b",
    "--bootstrap",
    default="127.0.0.1:9092",
    envvar="LOGBROKER_BOOTSTRAP",
    show_default=True,
    help="Broker HOST:PORT (any Kafka-compatible broker).",
)


def client(bootstrap: str) -> KafkaClient:
    """A client connected to ``bootstrap``, or a one-line error naming it."""
    from logbroker.client import KafkaClient

    try:
        return KafkaClient(bootstrap)
    except OSError as exc:
        raise click.ClickException(f"cannot reach {bootstrap}: {exc}") from None


def fail(exc: Exception) -> NoReturn:
    raise click.ClickException(str(exc)) from None


def wide_console() -> Console:
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 160)  # pipes and logs: keep member ids on one line
    return console
