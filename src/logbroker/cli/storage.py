"""`logbroker storage`: offline checks and repairs of a stopped broker's data directory.

A security store (the ACLs in `__acls`, the SCRAM users in `__users`) with damaged records is distrusted by the
broker (every non-super-user request denied, or SCRAM logins refused) until an operator either repairs the
file (restores it from a copy: the next start finds it whole) or accepts the loss with `storage accept`,
which rewrites the store from its intact records. The broker must be stopped: the data directory's lock
says whether it is."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

STORES = ("acls", "users")


@contextlib.contextmanager
def _stopped(data_dir: Path) -> Iterator[None]:
    """Hold the data directory's lock (the one a running broker holds) for the command."""
    if not data_dir.is_dir():
        raise click.ClickException(f"{data_dir} is not a data directory")
    fd = os.open(data_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise click.ClickException(f"a broker is running on {data_dir}: stop it first") from None
        yield
    finally:
        os.close(fd)


def _open(data_dir: Path, name: str) -> Any:
    from logbroker.broker.auth.acls import AclStore
    from logbroker.broker.auth.users import UserStore
    from logbroker.storage.manager import CLEAN_MARKER

    clean = (data_dir / CLEAN_MARKER).exists()
    if name == "acls":
        store = AclStore(data_dir, clean)
        store.load()
        return store
    return UserStore(data_dir, clean)  # loads on construction


def _describe(store: Any) -> list[str]:
    return [d.describe() for d in store.damage]


_DATA_DIR = click.option(
    "--data-dir",
    required=True,
    envvar="LOGBROKER_DATA_DIR",
    show_envvar=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The stopped broker's data directory.",
)


@click.group()
def storage() -> None:
    """Offline checks and repairs of a stopped broker's data directory."""


@storage.command("check")
@_DATA_DIR
def storage_check(data_dir: Path) -> None:
    """Say whether the security stores are whole (exit 1 when one has damaged records)."""
    damaged = False
    with _stopped(data_dir):
        for name in STORES:
            store = _open(data_dir, name)
            try:
                if store.damage:
                    damaged = True
                    click.echo(f"{name}: {len(store.damage)} damaged batches, distrusted by the broker")
                    for line in _describe(store):
                        click.echo(f"  {line}")
                else:
                    click.echo(f"{name}: whole ({store.records_in_log} records)")
            finally:
                store.close()
    if damaged:
        raise SystemExit(1)


@storage.command("accept")
@_DATA_DIR
@click.option("--store", "stores", multiple=True, type=click.Choice(STORES), help="Repeatable; default both.")
def storage_accept(data_dir: Path, stores: tuple[str, ...]) -> None:
    """Accept the loss of a security store's damaged records: rewrite it from its intact ones, so the broker
    trusts it again. What the damaged records said (an ACL, a DENY, a user's deletion) is gone: check the
    ACLs and users afterwards (`logbroker acls list`, `logbroker users list`)."""
    with _stopped(data_dir):
        for name in dict.fromkeys(stores or STORES):
            store = _open(data_dir, name)
            try:
                lost = _describe(store)
                dropped = store.accept_damage()
            finally:
                store.close()
            if dropped:
                click.echo(f"{name}: dropped {dropped} damaged batches; the store is trusted again")
                for line in lost:
                    click.echo(f"  {line}")
            else:
                click.echo(f"{name}: nothing damaged")
