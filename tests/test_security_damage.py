"""Damaged security state fails closed (issue 32): a damaged record in the ACL store (a DENY) or in the users
store (a deletion) used to be dropped with a warning, so the denied principal read the topic and the deleted
user logged in again (Kafka, whose metadata log has replicas to repair from, does the same). Now the store is
distrusted: ERROR naming the file and offsets, /health "degraded" and a metric, every non-super-user request
it decides denied, until `logbroker storage accept` (or a repaired file). logbroker only, by design."""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from logbroker.cli import main
from logbroker.protocol.records import HEADER_SIZE, parse_header
from logbroker_devtools.testing.net import free_ports
from logbroker_devtools.testing.process import BrokerProcess
from support import PLAIN_LOGIN_MODULE, STANDARD_AUTHORIZER, eventually, unique

pytestmark = pytest.mark.timeout(300)

PASSWORDS = {"admin": "admin-pw", "alice": "alice-pw"}


class Secured:
    def __init__(self, data: Path) -> None:
        plain, sasl, metrics = free_ports(3)
        self.sasl = f"127.0.0.1:{sasl}"
        self.metrics = f"127.0.0.1:{metrics}"
        logins = " ".join(f'user_{u}="{p}"' for u, p in PASSWORDS.items())
        self.proc = BrokerProcess(data, port=plain, env={
            "LOGBROKER_LISTENERS": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
            "LOGBROKER_SASL_ENABLED_MECHANISMS": "PLAIN,SCRAM-SHA-512",
            "LOGBROKER_SASL_PLAIN_JAAS_CONFIG": f"{PLAIN_LOGIN_MODULE} required {logins};",
            "LOGBROKER_AUTHORIZER_CLASS_NAME": STANDARD_AUTHORIZER,
            "LOGBROKER_SUPER_USERS": "User:admin",
            "LOGBROKER_METRICS_LISTEN": self.metrics,
        })  # fmt: skip

    def as_(self, user: str, password: str | None = None, mechanism: str = "PLAIN") -> tuple[str, ...]:
        return ("-b", self.sasl, "--security-protocol", "SASL_PLAINTEXT", "--sasl-mechanism", mechanism,
                "--sasl-username", user, "--sasl-password", password or PASSWORDS[user])  # fmt: skip

    def get(self, path: str) -> str:
        with urllib.request.urlopen(f"http://{self.metrics}{path}", timeout=10) as r:
            return str(r.read().decode())


def cli(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def damage_last_batch(store: Path) -> None:
    """Flip a byte in the records of the store's last batch (its CRC no longer matches)."""
    seg = sorted(store.glob("*.log"))[-1]
    data = bytearray(seg.read_bytes())
    pos, last = 0, None
    while pos + HEADER_SIZE <= len(data):
        h = parse_header(data, pos)
        if h.magic != 2 or h.size <= HEADER_SIZE or pos + h.size > len(data):
            break
        last = (pos, h.size)
        pos += h.size
    assert last is not None, f"no batch in {seg}"
    at = last[0] + last[1] - 2
    data[at] ^= 0xFF
    seg.write_bytes(bytes(data))


def consume_one(s: Secured, user: str, topic: str) -> Any:
    return cli("consume", "-t", topic, "--from-beginning", "-e", *s.as_(user))


def test_a_damaged_deny_in_the_acl_store_denies_everyone_but_super_users_until_accepted(tmp_path: Path) -> None:
    s = Secured(tmp_path / "data")
    topic = unique("guarded")
    with s.proc:
        assert cli("topics", "create", topic, *s.as_("admin")).exit_code == 0
        eventually(lambda: _ok(cli("produce", "-t", topic, *s.as_("admin"), "secret")))
        for args in (
            ["--allow", "User:alice", "--consumer", "--topic", topic, "--group", "*"],
            ["--deny", "User:alice", "--operation", "READ", "--topic", topic],
        ):  # its own batch, last
            _ok(cli("acls", "add", *args, *s.as_("admin")))
        denied = consume_one(s, "alice", topic)
        assert denied.exit_code != 0 and "AUTHORIZATION" in denied.output.upper(), denied.output
        assert s.get("/health") == "ok\n"
    damage_last_batch(tmp_path / "data" / "__acls")
    with s.proc:
        log = s.proc.log_path.read_text()
        assert " ERROR " in log and "__acls" in log and "not trusted" in log, log[-2000:]
        health = s.get("/health")
        assert health.startswith("degraded\nuntrusted acls store:"), health
        assert 'logbroker_security_store_untrusted{store="acls"} 1.0' in s.get("/metrics")
        # The DENY is unreadable: alice is refused everything, not let through; the super user is served.
        assert consume_one(s, "alice", topic).exit_code != 0
        listed = cli("topics", "list", *s.as_("alice"))
        assert listed.exit_code == 0 and topic not in listed.stdout, listed.output
        got = consume_one(s, "admin", topic)
        assert got.exit_code == 0 and got.stdout.splitlines() == ["secret"], got.output
    data = str(tmp_path / "data")
    checked = cli("storage", "check", "--data-dir", data)
    assert checked.exit_code == 1 and "acls: 1 damaged batches" in checked.output, checked.output
    with s.proc:  # refused while a broker runs on the directory
        running = cli("storage", "accept", "--store", "acls", "--data-dir", data)
        assert running.exit_code == 1 and "stop it first" in running.output, running.output
    accepted = cli("storage", "accept", "--store", "acls", "--data-dir", data)
    assert accepted.exit_code == 0 and "dropped 1 damaged batches" in accepted.output, accepted.output
    assert cli("storage", "check", "--data-dir", data).exit_code == 0
    with s.proc:  # trusted again, without the DENY the operator accepted to lose
        assert s.get("/health") == "ok\n"
        assert 'logbroker_security_store_untrusted{store="acls"} 0.0' in s.get("/metrics")
        got = consume_one(s, "alice", topic)
        assert got.exit_code == 0 and got.stdout.splitlines() == ["secret"], got.output


def test_a_damaged_user_deletion_refuses_non_super_scram_logins_until_accepted(tmp_path: Path) -> None:
    s = Secured(tmp_path / "data")
    with s.proc:
        for user in ("bob", "admin"):  # admin: a super user with a SCRAM credential too
            _ok(cli("users", "add", user, "--password", f"{user}-scram", "-m", "SCRAM-SHA-512", "--iterations", "4096",
                    *s.as_("admin")))  # fmt: skip
        _ok(cli("topics", "list", *s.as_("bob", "bob-scram", "SCRAM-SHA-512")))
        _ok(cli("users", "delete", "bob", *s.as_("admin")))  # the last batch of __users
        assert cli("topics", "list", *s.as_("bob", "bob-scram", "SCRAM-SHA-512")).exit_code != 0
    damage_last_batch(tmp_path / "data" / "__users")
    with s.proc:
        assert s.get("/health").startswith("degraded\nuntrusted users store:")
        refused = cli("topics", "list", *s.as_("bob", "bob-scram", "SCRAM-SHA-512"))
        assert refused.exit_code != 0 and "authentication" in refused.output.lower(), refused.output
        _ok(cli("topics", "list", *s.as_("admin", "admin-scram", "SCRAM-SHA-512")))  # super users log in
    accepted = cli("storage", "accept", "--store", "users", "--data-dir", str(tmp_path / "data"))
    assert accepted.exit_code == 0 and "dropped 1 damaged batches" in accepted.output, accepted.output
    with s.proc:  # the deletion was lost and the loss accepted: bob's credential stands again
        assert s.get("/health") == "ok\n"
        _ok(cli("topics", "list", *s.as_("bob", "bob-scram", "SCRAM-SHA-512")))


def _ok(result: Any) -> None:
    assert result.exit_code == 0, result.output


# ---------------------------------------------------------------------------------------- on the store's files


def _acl(principal: str, permission: str = "ALLOW") -> Any:
    from logbroker.broker.auth.acls import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType

    return AclBinding(ResourceType.TOPIC, "t", PatternType.LITERAL, principal, "*", AclOperation.READ,
                      AclPermissionType[permission])  # fmt: skip


def _batches(store_dir: Path) -> list[tuple[int, int]]:
    seg = sorted(store_dir.glob("*.log"))[-1]
    data = seg.read_bytes()
    out, pos = [], 0
    while pos + HEADER_SIZE <= len(data):
        h = parse_header(data, pos)
        if h.magic != 2 or h.size <= HEADER_SIZE or pos + h.size > len(data):
            break
        out.append((pos, h.size))
        pos += h.size
    return out


@pytest.mark.parametrize("clean", [True, False])
def test_a_deny_whose_framing_rotted_at_the_tail_is_not_cut_silently(tmp_path: Path, clean: bool) -> None:
    """The last batch (the DENY) with a rotted length field: recovery cuts it (nothing intact follows, it looks
    torn). After a clean stop nothing may be cut, and a cut that is no torn tail is damage too: the store is
    distrusted on this start and the next (the cut is written down, its bytes being gone), until accepted."""
    from logbroker.broker.auth.acls import AclStore

    store = AclStore(tmp_path, True)
    store.load_bindings()
    store.put([_acl("User:mallory")])
    store.put([_acl("User:mallory", "DENY")])
    store.close()
    pos, _size = _batches(tmp_path / "__acls")[-1]
    seg = sorted((tmp_path / "__acls").glob("*.log"))[-1]
    data = bytearray(seg.read_bytes())
    data[pos + 8 : pos + 12] = (2**31 - 1).to_bytes(4, "big")  # a length no file holds
    seg.write_bytes(bytes(data))
    for _start in range(2):
        again = AclStore(tmp_path, clean)
        bindings = again.load_bindings()
        assert again.untrusted == clean, again.damage  # unclean: a torn tail is what a crash leaves
        again.close()
    if clean:
        assert bindings == [_acl("User:mallory")]
        fixed = AclStore(tmp_path, True)
        assert fixed.accept_damage() == 1
        fixed.close()
        assert not AclStore(tmp_path, True).untrusted


def test_what_is_appended_after_damage_is_read_back(tmp_path: Path) -> None:
    """Broken framing in the middle of the store (an ACL after it, and a DENY a super user adds while the store
    is distrusted): both are read back on the next start and kept by `storage accept`."""
    from logbroker.broker.auth.acls import AclStore

    store = AclStore(tmp_path, True)
    store.load_bindings()
    for who in ("User:a", "User:b", "User:c"):
        store.put([_acl(who)])
    store.close()
    pos, _size = _batches(tmp_path / "__acls")[1]  # User:b's batch: its magic byte rots
    seg = sorted((tmp_path / "__acls").glob("*.log"))[-1]
    data = bytearray(seg.read_bytes())
    data[pos + 16] = 7
    seg.write_bytes(bytes(data))
    again = AclStore(tmp_path, True)
    assert {b.principal for b in again.load_bindings()} == {"User:a", "User:c"} and again.untrusted
    again.put([_acl("User:c", "DENY")])  # while untrusted: must survive
    again.close()
    third = AclStore(tmp_path, True)
    got = set(third.load_bindings())
    assert third.untrusted and _acl("User:c", "DENY") in got and _acl("User:c") in got
    assert third.accept_damage() == 1
    third.close()
    fourth = AclStore(tmp_path, True)
    assert set(fourth.load_bindings()) == got and not fourth.untrusted
    fourth.close()
