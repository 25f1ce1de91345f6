"""SCRAM users managed with AlterUserScramCredentials / DescribeUserScramCredentials, on logbroker and
Apache Kafka 4.4: the admin client's calls, Kafka's refusals (raw requests, as the admin client checks
some itself) and, on logbroker, credentials that survive kill -9. Logging in with them over SASL comes with
the listeners of the security issue; the exchange itself is pinned in test_sasl_mechanisms.py."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from logbroker.client.connection import Connection, parse_bootstrap
from logbroker.protocol import ApiKey, api
from logbroker.protocol.errors import ErrorCode
from logbroker.testing.process import BrokerProcess
from support import both_targets, target_bootstrap

pytestmark = pytest.mark.timeout(120)

Alter = api(ApiKey.AlterUserScramCredentials).request
Describe = api(ApiKey.DescribeUserScramCredentials).request
SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512


@pytest.fixture(scope="module", params=both_targets())
def bootstrap(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from target_bootstrap(request)


def name() -> str:
    return f"user-{uuid.uuid4().hex[:8]}"


def described(admin: AdminClient, users: list[str]) -> dict[str, list[tuple[ScramMechanism, int]]]:
    futures = admin.describe_user_scram_credentials(users)
    return {u: sorted((i.mechanism, i.iterations) for i in f.result(30).scram_credential_infos)
            for u, f in futures.items()}  # fmt: skip


def test_users_are_added_described_changed_and_deleted(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    alice, bob = name(), name()
    ups = [
        UserScramCredentialUpsertion(alice, ScramCredentialInfo(SHA256, 8192), b"alice-pw", b"salt-a"),
        UserScramCredentialUpsertion(bob, ScramCredentialInfo(SHA512, 4096), b"bob-pw"),
    ]
    for f in admin.alter_user_scram_credentials(ups).values():
        f.result(30)
    assert described(admin, [alice, bob]) == {alice: [(SHA256, 8192)], bob: [(SHA512, 4096)]}
    # A second mechanism for alice, then a deletion of her first one.
    admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(alice, ScramCredentialInfo(SHA512, 10000), b"pw2")]
    )[alice].result(30)
    assert described(admin, [alice]) == {alice: [(SHA256, 8192), (SHA512, 10000)]}
    admin.alter_user_scram_credentials([UserScramCredentialDeletion(alice, SHA256)])[alice].result(30)
    assert described(admin, [alice]) == {alice: [(SHA512, 10000)]}
    everyone = admin.describe_user_scram_credentials().result(30)  # no list: every user
    assert {alice, bob} <= set(everyone)


def raw(bootstrap: str, req):
    host, port = parse_bootstrap(bootstrap)
    with Connection(host, port, client_id="scram-probe", timeout=30) as conn:
        return conn.do(req, 0)


def outcomes(resp) -> dict[str, tuple[str, str | None]]:
    return {r.user: (ErrorCode(r.error_code).name, r.error_message) for r in resp.results}


def test_kafkas_refusals_of_alterations(bootstrap: str) -> None:
    U, D = Alter.ScramCredentialUpsertion, Alter.ScramCredentialDeletion
    few, many, dup, unknown_mech, ghost, good = (name() for _ in range(6))

    def up(user: str, mech: int = 1, iterations: int = 4096) -> object:
        return U(name=user, mechanism=mech, iterations=iterations, salt=b"s", salted_password=b"x" * 32)

    resp = raw(bootstrap, Alter(
        deletions=[D(name=ghost, mechanism=1), D(name=dup, mechanism=1)],
        upsertions=[up(few, iterations=4095), up(many, iterations=16385), up(dup), up(unknown_mech, mech=9),
                    up(""), up(good)],
    ))  # fmt: skip
    assert outcomes(resp) == {
        ghost: ("RESOURCE_NOT_FOUND", "Attempt to delete a user credential that does not exist"),
        dup: ("RESOURCE_NOT_FOUND", "Attempt to delete a user credential that does not exist"),
        few: ("UNACCEPTABLE_CREDENTIAL", "Too few iterations"),
        many: ("UNACCEPTABLE_CREDENTIAL", "Too many iterations"),
        unknown_mech: ("UNSUPPORTED_SASL_MECHANISM", "Unknown SCRAM mechanism"),
        "": ("UNACCEPTABLE_CREDENTIAL", "Username must not be empty"),
        good: ("NONE", None),
    }
    # One user in two operations of a request: neither is carried out.
    resp = raw(bootstrap, Alter(deletions=[D(name=good, mechanism=1)], upsertions=[up(good, 2)]))
    assert outcomes(resp) == {good: ("DUPLICATE_RESOURCE", "A user credential cannot be altered twice in the same "
                                                           "request")}  # fmt: skip
    resp = raw(bootstrap, Describe(users=[Describe.UserName(name=good)]))
    assert [(r.user, [(i.mechanism, i.iterations) for i in r.credential_infos]) for r in resp.results] == [
        (good, [(1, 4096)])
    ]


def test_kafkas_refusals_of_descriptions(bootstrap: str) -> None:
    ghost, twice = name(), name()
    UN = Describe.UserName
    resp = raw(bootstrap, Describe(users=[UN(name=ghost), UN(name=twice), UN(name=twice)]))
    assert outcomes(resp) == {
        ghost: ("RESOURCE_NOT_FOUND", f"Attempt to describe a user credential that does not exist: {ghost}"),
        twice: ("DUPLICATE_RESOURCE", f"Cannot describe SCRAM credentials for the same user twice in a single "
                                      f"request: {twice}"),
    }  # fmt: skip


def test_credentials_survive_kill_9(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data") as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        user = name()
        admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion(user, ScramCredentialInfo(SHA512, 5000), b"correct-horse-battery")]
        )[user].result(30)
        broker.kill()
        broker.start()
        assert described(AdminClient({"bootstrap.servers": broker.bootstrap}), [user]) == {user: [(SHA512, 5000)]}
        assert b"correct-horse" not in b"".join(p.read_bytes() for p in (tmp_path / "data" / "__users").glob("*.log"))
