"""SCRAM users: credentials kept durably in `<data>/__users`, managed as Kafka's controller manages them
(ScramControlManager for AlterUserScramCredentials, ScramImage for DescribeUserScramCredentials).

A credential is (salt, stored key, server key, iterations) per user and mechanism: the password never
reaches the broker (the admin client sends a salted password, which is turned into the two keys here
and dropped). An alteration is validated whole, then written as one batch and made durable before it
is answered, so an acknowledged user survives kill -9.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from logbroker.protocol.errors import ErrorCode as E
from logbroker.storage.internal import InternalLog, Record

from .sasl import MAX_ITERATIONS, MIN_ITERATIONS, ScramCredential

STORE_DIR = "__users"
# Kafka's ScramMechanism type codes on the wire.
MECHANISM_CODES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
CODE_OF = {name: code for code, name in MECHANISM_CODES.items()}


@dataclass(frozen=True, slots=True)
class Outcome:
    """One user's answer: Kafka's error (NONE) and message."""

    error: E = E.NONE
    message: str | None = None


@dataclass(frozen=True, slots=True)
class Upsertion:
    user: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes


class UserStore(InternalLog):
    """User -> mechanism -> credential, in memory and in its internal log."""

    def __init__(self, data_dir: Path, clean_shutdown: bool, super_users: frozenset[str] = frozenset()) -> None:
        # A damaged record may have been a deletion (a removed user would log in again): kept, and the store
        # distrusted: only super users log in with SCRAM until an operator repairs it or accepts the loss.
        super().__init__(data_dir / STORE_DIR, clean_shutdown, keep_damage=True)
        self.super_users = super_users
        self.users: dict[str, dict[str, ScramCredential]] = {}
        for key, value in self.load().items():
            if key[0] == "u":
                self.users.setdefault(key[1], {})[key[2]] = ScramCredential.from_json(value)

    def credential(self, user: str, mechanism: str) -> ScramCredential | None:
        if self.untrusted and f"User:{user}" not in self.super_users:
            return None
        return self.users.get(user, {}).get(mechanism)

    def describe(self, names: list[str] | None) -> list[tuple[str, Outcome, list[tuple[int, int]]]]:
        """(user, outcome, [(mechanism code, iterations)]) for `names` (None or empty: every user)."""
        if not names:
            wanted = dict.fromkeys(sorted(self.users), False)
        else:
            wanted = {}
            for n in names:
                wanted[n] = n in wanted
        out = []
        for name, twice in wanted.items():
            if twice:
                out.append(
                    (
                        name,
                        Outcome(
                            E.DUPLICATE_RESOURCE,
                            f"Cannot describe SCRAM credentials for the same user twice in a single request: {name}",
                        ),
                        [],
                    )
                )
                continue
            creds = self.users.get(name)
            if not creds:
                out.append(
                    (
                        name,
                        Outcome(
                            E.RESOURCE_NOT_FOUND, f"Attempt to describe a user credential that does not exist: {name}"
                        ),
                        [],
                    )
                )
                continue
            infos = sorted((CODE_OF[m], c.iterations) for m, c in creds.items())
            out.append((name, Outcome(), infos))
        return out

    def plan(
        self, deletions: list[tuple[str, int]], upsertions: list[Upsertion]
    ) -> tuple[dict[str, Outcome], list[Record]]:
        """Kafka's validation of an AlterUserScramCredentials: per user an outcome, and the records that
        carry out the accepted changes (nothing is changed yet). A user named twice in one request fails
        (DUPLICATE_RESOURCE), whichever operations name it."""
        errors: dict[str, Outcome] = {}
        dels: dict[str, tuple[str, int]] = {}
        ups: dict[str, Upsertion] = {}
        for name, mech in deletions:
            if name in errors:
                continue
            if dels.pop(name, None) is not None:
                errors[name] = _twice()
            elif (bad := _check_name_and_mechanism(name, mech)) is not None:
                errors[name] = bad
            elif self.users.get(name, {}).get(MECHANISM_CODES[mech]) is None:
                errors[name] = Outcome(E.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
            else:
                dels[name] = (name, mech)
        for u in upsertions:
            if u.user in errors:
                continue
            if dels.pop(u.user, None) is not None or ups.pop(u.user, None) is not None:
                errors[u.user] = _twice()
            elif (bad := _check_name_and_mechanism(u.user, u.mechanism)) is not None:
                errors[u.user] = bad
            elif u.iterations < MIN_ITERATIONS:
                errors[u.user] = Outcome(E.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
            elif u.iterations > MAX_ITERATIONS:
                errors[u.user] = Outcome(E.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
            else:
                ups[u.user] = u
        records: list[Record] = []
        outcomes: dict[str, Outcome] = {}
        for name, mech in dels.values():
            records.append((("u", name, MECHANISM_CODES[mech]), None))
            outcomes[name] = Outcome()
        for u in ups.values():
            mech_name = MECHANISM_CODES[u.mechanism]
            cred = ScramCredential.from_salted_password(mech_name, u.salt, u.salted_password, u.iterations)
            records.append((("u", u.user, mech_name), cred.to_json()))
            outcomes[u.user] = Outcome()
        outcomes.update(errors)
        return outcomes, records

    def apply(self, records: list[Record]) -> None:
        """Make written records the state (after they are durable)."""
        for (_kind, name, mech), value in records:
            if value is None:
                creds = self.users.get(name, {})
                creds.pop(mech, None)
                if not creds:
                    self.users.pop(name, None)
            else:
                self.users.setdefault(name, {})[mech] = ScramCredential.from_json(value)


def _twice() -> Outcome:
    return Outcome(E.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")


def _check_name_and_mechanism(name: str, mechanism: int) -> Outcome | None:
    if not name:
        return Outcome(E.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
    if mechanism not in MECHANISM_CODES:
        return Outcome(E.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
    return None
