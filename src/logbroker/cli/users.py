"""`logbroker users`: SCRAM users of any Kafka-compatible broker (what `kafka-configs --alter
--add-config 'SCRAM-SHA-256=[password=...]' --entity-type users` does). The password is salted and iterated
here, as Kafka's admin client does: only the salted password travels, and the broker keeps neither."""

from __future__ import annotations

import hashlib
import os
from typing import TYPE_CHECKING, Any

import click

from logbroker.cli.common import BOOTSTRAP, SECURITY, client, fail

MECHANISMS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
NAMES = {code: name for name, code in MECHANISMS.items()}

if TYPE_CHECKING:
    from logbroker._kafka.settings import KafkaSettings


def _mechanisms(help: str) -> Any:
    choice = click.Choice(list(MECHANISMS))
    return click.option("-m", "--mechanism", "mechanisms", type=choice, multiple=True, help=help)


@click.group()
def users() -> None:
    """Add, list and delete SCRAM users."""


@users.command("add")
@BOOTSTRAP
@SECURITY
@click.argument("name")
@click.option("--password", prompt=True, hide_input=True, confirmation_prompt=True, help="Prompted for if absent.")
@_mechanisms("Repeatable; default both.")
@click.option("--iterations", default=8192, show_default=True, type=click.IntRange(4096, 16384))
def users_add(
    bootstrap: str,
    security: KafkaSettings | None,
    name: str,
    password: str,
    mechanisms: tuple[str, ...],
    iterations: int,
) -> None:
    """Add NAME (or replace its password)."""
    from logbroker.client import BrokerError

    ups = []
    for mech in mechanisms or tuple(MECHANISMS):
        salt = os.urandom(32)
        hashname = "sha256" if mech == "SCRAM-SHA-256" else "sha512"
        salted = hashlib.pbkdf2_hmac(hashname, password.encode(), salt, iterations)
        ups.append((name, MECHANISMS[mech], iterations, salt, salted))
    with client(bootstrap, security) as c:
        try:
            # One request per mechanism: Kafka refuses one user named twice in a request.
            for up in ups:
                c.alter_scram_users(upsertions=[up])
        except BrokerError as exc:
            fail(exc)
    click.echo(f"user {name}: {', '.join(NAMES[u[1]] for u in ups)} ({iterations} iterations)")


@users.command("list")
@BOOTSTRAP
@SECURITY
@click.argument("names", nargs=-1)
def users_list(bootstrap: str, security: KafkaSettings | None, names: tuple[str, ...]) -> None:
    """Users and their mechanisms (all users when no NAMES)."""
    from rich.console import Console
    from rich.table import Table

    from logbroker.client import BrokerError

    with client(bootstrap, security) as c:
        try:
            found = c.scram_users(list(names) or None)
        except BrokerError as exc:
            fail(exc)
    table = Table("user", "mechanism", "iterations")
    for user in sorted(found):
        for code, iterations in found[user]:
            table.add_row(user, NAMES.get(code, str(code)), str(iterations))
    Console().print(table)


@users.command("delete")
@BOOTSTRAP
@SECURITY
@click.argument("name")
@_mechanisms("Repeatable; default every mechanism the user has.")
def users_delete(bootstrap: str, security: KafkaSettings | None, name: str, mechanisms: tuple[str, ...]) -> None:
    """Delete NAME's credentials."""
    from logbroker.client import BrokerError

    with client(bootstrap, security) as c:
        try:
            codes = [MECHANISMS[m] for m in mechanisms] or [code for code, _ in c.scram_users([name])[name]]
            for code in codes:
                c.alter_scram_users(deletions=[(name, code)])
        except BrokerError as exc:
            fail(exc)
    click.echo(f"deleted {', '.join(NAMES[c] for c in codes)} of user {name}")
