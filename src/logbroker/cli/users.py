"""`logbroker users`: SCRAM users of any Kafka-compatible broker (what `kafka-configs --alter --add-config
'SCRAM-SHA-256=[password=...]' --entity-type users` does), through confluent-kafka's AdminClient. librdkafka
salts and iterates the password, as Kafka's admin client does: only the salted password travels, and the
broker keeps neither."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from logbroker.cli.common import (
    BOOTSTRAP,
    SECURITY,
    AdminGroup,
    admin,
    cell,
    echo_json,
    error_text,
    utf8_name,
    wide_console,
)

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")

if TYPE_CHECKING:
    from logbroker._kafka.settings import KafkaSettings


def _mechanism(name: str) -> Any:
    from confluent_kafka.admin import ScramMechanism

    return getattr(ScramMechanism, name.replace("-", "_"))


def _mechanisms(help: str) -> Any:
    return click.option("-m", "--mechanism", "mechanisms", type=click.Choice(MECHANISMS), multiple=True, help=help)


@click.group(cls=AdminGroup)
def users() -> None:
    """Add, list and delete SCRAM users."""


@users.command("add")
@BOOTSTRAP
@SECURITY
@click.argument("name", callback=utf8_name("user"))
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
    from confluent_kafka.admin import ScramCredentialInfo, UserScramCredentialUpsertion

    chosen = list(dict.fromkeys(mechanisms or MECHANISMS))
    try:
        secret = password.encode("utf-8")
    except UnicodeEncodeError:
        raise click.BadParameter("not valid UTF-8", param_hint="--password") from None
    with admin(bootstrap, security) as a:
        # One request per mechanism: Kafka refuses one user named twice in a request.
        for mech in chosen:
            up = UserScramCredentialUpsertion(name, ScramCredentialInfo(_mechanism(mech), iterations), secret)
            futures = a.call(a.client.alter_user_scram_credentials, [up], what=f"add user {name}")
            a.result(futures[name], f"add {mech} credentials of user {name}")
    click.echo(f"user {name}: {', '.join(chosen)} ({iterations} iterations)")


@users.command("list")
@BOOTSTRAP
@SECURITY
@click.argument("names", nargs=-1, callback=utf8_name("user"))
@click.option("--json", "as_json", is_flag=True, help="Print JSON (keys below) instead of a table.")
def users_list(bootstrap: str, security: KafkaSettings | None, names: tuple[str, ...], as_json: bool) -> None:
    """Users and their mechanisms (all users when no NAMES).

    \b
    --json: a list of {"user", "mechanism", "iterations"}, one per user and mechanism.
    """
    from rich.table import Table

    from logbroker.cli.wire_admin import scram_users, wire_admin

    with admin(bootstrap, security):
        pass  # the connection and the login proven, or one line on why not
    with wire_admin(bootstrap, security) as w:
        found = scram_users(w, list(dict.fromkeys(names)) if names else None)
    for user in names:
        if (error := found.get(user, (None, []))[0]) is not None:
            raise click.ClickException(f"describe user {user}: {error}")
    rows = [
        {"user": user, "mechanism": mechanism, "iterations": iterations}
        for user in sorted(found)
        for mechanism, iterations in found[user][1]
    ]
    if as_json:
        echo_json(rows)
        return
    table = Table("user", "mechanism", "iterations")
    for r in rows:
        table.add_row(cell(r["user"]), r["mechanism"], str(r["iterations"]))
    wide_console().print(table if rows else "no SCRAM users")


@users.command("delete")
@BOOTSTRAP
@SECURITY
@click.argument("name", callback=utf8_name("user"))
@_mechanisms("Repeatable; default every mechanism the user has.")
def users_delete(bootstrap: str, security: KafkaSettings | None, name: str, mechanisms: tuple[str, ...]) -> None:
    """Delete NAME's credentials."""
    from confluent_kafka.admin import UserScramCredentialDeletion

    from logbroker.cli.wire_admin import scram_users, wire_admin

    with admin(bootstrap, security) as a:
        chosen = list(dict.fromkeys(mechanisms))
        if not chosen:
            with wire_admin(bootstrap, security) as w:
                error, infos = scram_users(w, [name]).get(name, (None, []))
            if error is not None:
                raise click.ClickException(f"describe user {name}: {error}")
            chosen = [mechanism for mechanism, _ in infos]
        failed = []
        for mech in chosen:
            gone = UserScramCredentialDeletion(name, _mechanism(mech))
            futures = a.call(a.client.alter_user_scram_credentials, [gone], what=f"delete user {name}")
            a.wait(futures.values(), f"delete user {name}")
            if (exc := futures[name].exception()) is not None:
                failed.append(f"{mech}: {error_text(exc)}")
    if failed:
        click.echo(f"Error: cannot delete user {name}: {'; '.join(failed)}", err=True)
        sys.exit(1)
    click.echo(f"deleted {', '.join(chosen)} of user {name}")
