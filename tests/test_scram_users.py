"""SCRAM users managed with AlterUserScramCredentials / DescribeUserScramCredentials, on logbroker and
Apache Kafka 4.4: the admin client's calls, Kafka's refusals (raw requests, as the admin client checks
some itself) and, on logbroker, credentials that survive kill -9. Logging in with them over SASL comes with
the listeners of the security issue; the exchange itself is pinned in test_sasl_mechanisms.py."""

from __future__ import annotations

import shutil
import subprocess
import sys
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
from kafka.net.sasl.scram import ScramClient as KafkaPythonScram

from logbroker.broker.auth.sasl import ScramServer
from logbroker.broker.auth.users import UserStore
from logbroker.protocol import ApiKey, api
from logbroker.protocol.errors import ErrorCode
from logbroker_devtools.client.connection import Connection, parse_bootstrap
from logbroker_devtools.testing.process import BrokerProcess
from support import assert_equal, both_targets, eventually, target_bootstrap

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

    def shows(want: dict[str, list[tuple[ScramMechanism, int]]]) -> None:
        # Kafka answers an alteration once its controller committed it; a broker's describe reads its own
        # metadata image, which may lag by a moment (seen once in CI): visible soon, not necessarily at once.
        eventually(lambda: assert_equal(described(admin, list(want)), want), timeout=10)

    shows({alice: [(SHA256, 8192)], bob: [(SHA512, 4096)]})
    # A second mechanism for alice, then a deletion of her first one.
    admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(alice, ScramCredentialInfo(SHA512, 10000), b"pw2")]
    )[alice].result(30)
    shows({alice: [(SHA256, 8192), (SHA512, 10000)]})
    admin.alter_user_scram_credentials([UserScramCredentialDeletion(alice, SHA256)])[alice].result(30)
    shows({alice: [(SHA512, 10000)]})
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


CLI = [sys.executable, "-m", "logbroker"]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60)


def test_logbroker_users_cli(bootstrap: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    user = name()
    r = cli("users", "add", user, "--password", "s3cret-pass", "-b", bootstrap)
    assert r.returncode == 0, r.stderr
    listed = cli("users", "list", user, "-b", bootstrap)
    assert listed.returncode == 0, listed.stderr
    assert "SCRAM-SHA-256" in listed.stdout and "SCRAM-SHA-512" in listed.stdout and "8192" in listed.stdout
    if request.node.callspec.params["bootstrap"] == "logbroker":
        # The broker turned the CLI's salted password into keys a real SCRAM client logs in with.
        copy = tmp_path / "copy"
        shutil.copytree(request.getfixturevalue("broker").data_dir / "__users", copy / "__users")
        store = UserStore(copy, clean_shutdown=False)
        for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            server = ScramServer(mech, lambda u, m=mech: store.credential(u, m))
            client = KafkaPythonScram(user, "s3cret-pass", mech)
            client.process_server_first_message(server.step(client.first_message()))
            client.process_server_final_message(server.step(client.final_message()))
            assert server.user == user
        store.close()
    r = cli("users", "delete", user, "-b", bootstrap)
    assert r.returncode == 0, r.stderr
    gone = cli("users", "list", user, "-b", bootstrap)
    assert gone.returncode == 1 and "RESOURCE_NOT_FOUND" in gone.stderr
    bad = cli("users", "add", user, "--password", "x", "--iterations", "100", "-b", bootstrap)
    assert bad.returncode == 2 and "4096" in bad.stderr  # refused before anything is sent
