"""CreateAcls / DescribeAcls / DeleteAcls on logbroker and on Apache Kafka 4.4 with its StandardAuthorizer.

Both brokers run the authorizer with User:alice as the only super user: PLAINTEXT clients are User:ANONYMOUS
and may do nothing, alice and bob log in with SASL PLAIN. The admin clients (confluent-kafka, Kafka's
kafka-acls) manage ACLs; raw requests pin what the clients hide: codes, messages, per-entry vs whole-request
refusals and the connection closed on codes that do not parse. Without an authorizer both answer
SECURITY_DISABLED. On logbroker, acknowledged ACL changes survive kill -9.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from logbroker.protocol import ApiKey, api
from logbroker.protocol.errors import ErrorCode as E
from support import (
    AUTHZ_USERS,
    assert_equal,
    authz_logbroker,
    authz_target,
    both_targets,
    eventually,
    kafka_tool,
    raw_connection,
    target_bootstrap,
)

pytestmark = pytest.mark.timeout(180)

CA = api(ApiKey.CreateAcls).request
DA = api(ApiKey.DescribeAcls).request
DL = api(ApiKey.DeleteAcls).request
ACL_COMMAND = "org.apache.kafka.tools.AclCommand"  # kafka-acls
ANY, MATCH, LITERAL, PREFIXED = 1, 2, 3, 4  # pattern types
TOPIC, GROUP, CLUSTER = 2, 3, 4
DESCRIBE, READ, WRITE, ALTER, ALL = 8, 3, 4, 7, 2
DENY, ALLOW = 2, 3


@pytest.fixture(scope="module", params=both_targets())
def target(request: pytest.FixtureRequest) -> Iterator[SimpleNamespace]:
    """plain: PLAINTEXT (User:ANONYMOUS); sasl: SASL_PLAINTEXT where alice (super) and bob log in."""
    with authz_target(request.param) as t:
        yield t


@pytest.fixture(scope="module", params=both_targets())
def no_authorizer(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from target_bootstrap(request)


def admin(target: SimpleNamespace, user: str = "alice") -> AdminClient:
    return AdminClient({
        "bootstrap.servers": target.sasl, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
        "sasl.username": user, "sasl.password": AUTHZ_USERS[user],
    })  # fmt: skip


def alice(target: SimpleNamespace) -> Any:
    return raw_connection(target.sasl, "alice", AUTHZ_USERS["alice"])


def creation(rt: int = TOPIC, name: str = "t", pt: int = LITERAL, principal: str = "User:ANONYMOUS",
             host: str = "*", op: int = DESCRIBE, perm: int = ALLOW) -> Any:  # fmt: skip
    return CA.AclCreation(resource_type=rt, resource_name=name, resource_pattern_type=pt, principal=principal,
                          host=host, operation=op, permission_type=perm)  # fmt: skip


def delete_filter(rt: int = ANY, name: str | None = None, pt: int = ANY, principal: str | None = None,
                  host: str | None = None, op: int = ANY, perm: int = ANY) -> Any:  # fmt: skip
    return DL.DeleteAclsFilter(resource_type_filter=rt, resource_name_filter=name, pattern_type_filter=pt,
                               principal_filter=principal, host_filter=host, operation=op,
                               permission_type=perm)  # fmt: skip


def describe_request(rt: int = ANY, name: str | None = None, pt: int = ANY, principal: str | None = None,
                     host: str | None = None, op: int = ANY, perm: int = ANY) -> Any:  # fmt: skip
    return DA(resource_type_filter=rt, resource_name_filter=name, pattern_type_filter=pt, principal_filter=principal,
              host_filter=host, operation=op, permission_type=perm)  # fmt: skip


def bindings(resp: Any) -> set[tuple[Any, ...]]:
    """A DescribeAcls answer as (type, name, pattern, principal, host, op, perm) rows (Kafka's order is a
    hash map's, so answers are compared as sets)."""
    return {(r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation, a.permission_type)
            for r in resp.resources for a in r.acls}  # fmt: skip


def row(c: Any) -> tuple[Any, ...]:
    return (c.resource_type, c.resource_name, c.resource_pattern_type, c.principal, c.host, c.operation,
            c.permission_type)  # fmt: skip


def closes_connection(conn: Any, request: Any, version: int) -> bool:
    try:
        conn.do(request, version)
    except (ConnectionError, OSError):
        return True
    return False


# ------------------------------------------------------------------------------------ no authorizer


@pytest.mark.parametrize("version", [1, 2, 3])
def test_security_disabled_without_an_authorizer(no_authorizer: str, version: int) -> None:
    with raw_connection(no_authorizer) as conn:
        created = conn.do(CA(creations=[creation(), creation(name="u")]), version)
        assert [(r.error_code, r.error_message) for r in created.results] == [
            (E.SECURITY_DISABLED, "No Authorizer is configured.")
        ] * 2
        described = conn.do(describe_request(), version)
        assert (described.error_code, described.error_message, described.resources) == (
            E.SECURITY_DISABLED, "No Authorizer is configured on the broker", [])  # fmt: skip
        deleted = conn.do(DL(filters=[delete_filter()]), version)
        assert [(r.error_code, r.error_message, r.matching_acls) for r in deleted.filter_results] == [
            (E.SECURITY_DISABLED, "No Authorizer is configured.", [])
        ]


def test_admin_client_sees_security_disabled(no_authorizer: str) -> None:
    a = AdminClient({"bootstrap.servers": no_authorizer})
    acl = AclBinding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:bob", "*", AclOperation.READ,
                     AclPermissionType.ALLOW)  # fmt: skip
    with pytest.raises(KafkaException, match="No Authorizer is configured"):
        a.create_acls([acl])[acl].result(30)
    # librdkafka drops DescribeAcls' top-level error: an empty list on both brokers.
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                  AclPermissionType.ANY)  # fmt: skip
    assert a.describe_acls(everything).result(30) == []


# ------------------------------------------------------------------------------------ the admin client


def test_create_describe_delete_with_filters(target: SimpleNamespace) -> None:
    a = admin(target)
    base = f"acl-{uuid.uuid4().hex[:8]}"
    lit = AclBinding(ResourceType.TOPIC, f"{base}-orders", ResourcePatternType.LITERAL, "User:bob", "*",
                     AclOperation.READ, AclPermissionType.ALLOW)  # fmt: skip
    pre = AclBinding(ResourceType.TOPIC, f"{base}-", ResourcePatternType.PREFIXED, "User:bob", "*",
                     AclOperation.WRITE, AclPermissionType.ALLOW)  # fmt: skip
    deny = AclBinding(ResourceType.TOPIC, f"{base}-orders", ResourcePatternType.LITERAL, "User:bob", "10.0.0.1",
                      AclOperation.READ, AclPermissionType.DENY)  # fmt: skip
    group = AclBinding(ResourceType.GROUP, f"{base}-app", ResourcePatternType.LITERAL, "User:bob", "*",
                       AclOperation.READ, AclPermissionType.ALLOW)  # fmt: skip
    for f in a.create_acls([lit, pre, deny, group]).values():
        f.result(30)

    def described(rt: ResourceType, name: str | None, pt: ResourcePatternType, **kw: Any) -> set[AclBinding]:
        flt = AclBindingFilter(rt, name, pt, kw.get("principal"), kw.get("host"), kw.get("op", AclOperation.ANY),
                               kw.get("perm", AclPermissionType.ANY))  # fmt: skip
        return set(a.describe_acls(flt).result(30))

    ours = {lit, pre, deny, group}
    everything = described(ResourceType.ANY, None, ResourcePatternType.ANY)
    assert ours <= everything
    assert described(ResourceType.TOPIC, f"{base}-orders", ResourcePatternType.LITERAL) == {lit, deny}
    assert described(ResourceType.TOPIC, f"{base}-", ResourcePatternType.PREFIXED) == {pre}
    # MATCH: every ACL that applies to a topic of that name, literal and prefixed.
    assert described(ResourceType.TOPIC, f"{base}-orders", ResourcePatternType.MATCH) == {lit, pre, deny}
    assert described(ResourceType.TOPIC, f"{base}-other", ResourcePatternType.MATCH) == {pre}
    assert described(ResourceType.ANY, None, ResourcePatternType.ANY, host="10.0.0.1") & ours == {deny}
    assert described(ResourceType.GROUP, f"{base}-app", ResourcePatternType.ANY) == {group}
    assert described(ResourceType.ANY, None, ResourcePatternType.ANY, perm=AclPermissionType.DENY) & ours == {deny}

    # Delete by a filter on the name (any pattern): the literal ones go, the prefixed stays.
    gone = a.delete_acls([AclBindingFilter(ResourceType.TOPIC, f"{base}-orders", ResourcePatternType.ANY, None,
                                           None, AclOperation.ANY, AclPermissionType.ANY)])  # fmt: skip
    assert set(next(iter(gone.values())).result(30)) == {lit, deny}
    eventually(lambda: described(ResourceType.ANY, None, ResourcePatternType.ANY) & ours == {pre, group})
    exact = [AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation,
                              b.permission_type) for b in (pre, group)]  # fmt: skip
    for f in a.delete_acls(exact).values():
        f.result(30)
    eventually(lambda: not described(ResourceType.ANY, None, ResourcePatternType.ANY) & ours)


# ------------------------------------------------------------------------------------ who may


@pytest.mark.parametrize("version", [1, 2, 3])
def test_anonymous_and_other_users_are_denied(target: SimpleNamespace, version: int) -> None:
    name = f"denied-{uuid.uuid4().hex[:8]}"
    for conn in (raw_connection(target.plain), raw_connection(target.sasl, "bob", AUTHZ_USERS["bob"])):
        with conn:
            created = conn.do(CA(creations=[creation(name=name), creation(name=name, op=READ)]), version)
            assert [r.error_code for r in created.results] == [E.CLUSTER_AUTHORIZATION_FAILED] * 2
            assert all(r.error_message.endswith("needs ALTER permission.") for r in created.results)
            described = conn.do(describe_request(), version)
            assert described.error_code == E.CLUSTER_AUTHORIZATION_FAILED and described.resources == []
            assert described.error_message.endswith("needs DESCRIBE permission.")
            deleted = conn.do(DL(filters=[delete_filter()]), version)
            assert [(r.error_code, r.matching_acls) for r in deleted.filter_results] == [
                (E.CLUSTER_AUTHORIZATION_FAILED, [])
            ]
            assert deleted.filter_results[0].error_message.endswith("needs ALTER permission.")
    with alice(target) as conn:  # nothing was created or deleted
        assert not bindings(conn.do(describe_request(name=name), 3))


def test_grants_deny_overrides_allow_and_super_users_ignore_deny(target: SimpleNamespace) -> None:
    describe_cluster = creation(rt=CLUSTER, name="kafka-cluster", principal="User:bob", op=DESCRIBE)
    deny_bob = creation(rt=CLUSTER, name="kafka-cluster", principal="User:bob", op=DESCRIBE, perm=DENY)
    deny_alice = creation(rt=CLUSTER, name="kafka-cluster", principal="User:alice", op=ALL, perm=DENY)
    bob = raw_connection(target.sasl, "bob", AUTHZ_USERS["bob"])
    try:
        with alice(target) as conn:
            assert [r.error_code for r in conn.do(CA(creations=[describe_cluster]), 3).results] == [0]

        def may_describe() -> None:  # Kafka applies a new ACL a moment after it answers: retried until then
            assert bob.do(describe_request(), 3).error_code == 0

        eventually(may_describe, timeout=15)
        assert row(describe_cluster) in bindings(bob.do(describe_request(), 3))
        # DESCRIBE does not imply ALTER: bob may look, not change.
        assert bob.do(CA(creations=[creation()]), 3).results[0].error_code == E.CLUSTER_AUTHORIZATION_FAILED
        with alice(target) as conn:
            assert [r.error_code for r in conn.do(CA(creations=[deny_bob, deny_alice]), 3).results] == [0, 0]

        def bob_denied() -> None:
            assert bob.do(describe_request(), 3).error_code == E.CLUSTER_AUTHORIZATION_FAILED

        eventually(bob_denied, timeout=15)
        with alice(target) as conn:  # a super user is allowed whatever the ACLs say
            assert conn.do(describe_request(), 3).error_code == 0
            f = delete_filter(rt=CLUSTER, name="kafka-cluster")
            deleted = conn.do(DL(filters=[f]), 3).filter_results[0]
            assert deleted.error_code == 0
            assert {row(c) for c in (describe_cluster, deny_bob, deny_alice)} <= {
                (m.resource_type, m.resource_name, m.pattern_type, m.principal, m.host, m.operation,
                 m.permission_type) for m in deleted.matching_acls}  # fmt: skip
        eventually(lambda: bob.do(describe_request(), 3).error_code == E.CLUSTER_AUTHORIZATION_FAILED
                   or pytest.fail("bob still allowed"), timeout=15)  # fmt: skip
    finally:
        bob.close()


# ------------------------------------------------------------------------------------ refusals


def test_create_refusals(target: SimpleNamespace) -> None:
    name = f"ref-{uuid.uuid4().hex[:8]}"
    ok = creation(name=name)
    per_binding = [
        (creation(rt=CLUSTER, name="other"), "The only valid name for the CLUSTER resource is kafka-cluster"),
        (creation(name=""), "Invalid empty resource name"),
        (creation(rt=99, name=""), "Invalid empty resource name"),  # the broker's check comes first
        (creation(rt=99, name=name), "Invalid resourceType UNKNOWN"),
        (creation(name=name, pt=99), "Invalid patternType UNKNOWN"),
        (creation(name=name, op=99), "Invalid operation UNKNOWN"),
        (creation(name=name, perm=99), "Invalid permissionType UNKNOWN"),
    ]
    with alice(target) as conn:
        for bad, message in per_binding:
            results = conn.do(CA(creations=[bad, ok]), 3).results
            assert [(r.error_code, r.error_message) for r in results] == [
                (E.INVALID_REQUEST, message), (0, "")]  # fmt: skip
        # ANY or MATCH in a creation fails the whole request: nothing is created.
        other = creation(name=f"{name}-whole")
        for bad in (creation(name=name, pt=ANY), creation(name=name, pt=MATCH), creation(name=name, op=1),
                    creation(name=name, perm=1), creation(rt=1, name=name)):  # fmt: skip
            results = conn.do(CA(creations=[other, bad]), 3).results
            assert [(r.error_code, r.error_message) for r in results] == [(E.UNKNOWN_SERVER_ERROR, None)] * 2
        eventually(lambda: assert_equal(bindings(conn.do(describe_request(name=name), 3)), {row(ok)}))
        assert bindings(conn.do(describe_request(name=f"{name}-whole"), 3)) == set()
    for zero in (creation(rt=0), creation(pt=0), creation(op=0), creation(perm=0)):
        with alice(target) as conn:
            assert closes_connection(conn, CA(creations=[ok, zero]), 3)


def test_delete_and_describe_refusals(target: SimpleNamespace) -> None:
    with alice(target) as conn:
        for bad, message in ((delete_filter(rt=99), "Unknown patternFilter."),
                             (delete_filter(pt=99), "Unknown patternFilter."),
                             (delete_filter(op=99), "Unknown entryFilter."),
                             (delete_filter(perm=99), "Unknown entryFilter.")):  # fmt: skip
            results = conn.do(DL(filters=[bad, delete_filter(name="nothing-here")]), 3).filter_results
            assert [(r.error_code, r.error_message, r.matching_acls) for r in results] == [
                (E.INVALID_REQUEST, message, []), (0, None, [])]  # fmt: skip
        # Unknown codes other than 0 parse and match nothing.
        for odd in (describe_request(rt=99), describe_request(pt=99), describe_request(op=99)):
            got = conn.do(odd, 3)
            assert (got.error_code, got.error_message, got.resources) == (0, "", [])
    for zero in (delete_filter(rt=0), delete_filter(pt=0), delete_filter(op=0), delete_filter(perm=0)):
        with alice(target) as conn:
            assert closes_connection(conn, DL(filters=[zero]), 3)
    for zero in (describe_request(rt=0), describe_request(pt=0), describe_request(op=0), describe_request(perm=0)):
        with alice(target) as conn:
            assert closes_connection(conn, zero, 3)


def test_two_filters_matching_one_acl_both_report_it(target: SimpleNamespace) -> None:
    name = f"twice-{uuid.uuid4().hex[:8]}"
    acl = creation(name=name, principal="User:bob")
    with alice(target) as conn:
        assert conn.do(CA(creations=[acl, acl]), 3).results[0].error_code == 0  # a duplicate is no error
        f1, f2 = delete_filter(name=name), delete_filter(principal="User:bob", rt=TOPIC, name=name, pt=LITERAL)
        results = conn.do(DL(filters=[f1, f2]), 3).filter_results
        for r in results:
            assert [(m.error_code, m.error_message, m.resource_name, m.principal) for m in r.matching_acls] == [
                (0, None, name, "User:bob")]  # fmt: skip
        eventually(lambda: assert_equal(bindings(conn.do(describe_request(name=name), 3)), set()))


@pytest.mark.parametrize("version", [1, 2, 3])
def test_every_version_answers_the_same_acls(target: SimpleNamespace, version: int) -> None:
    name = f"v-{uuid.uuid4().hex[:8]}"
    acls = [creation(name=name), creation(name=name, pt=PREFIXED, op=READ, perm=DENY, host="127.0.0.1"),
            creation(rt=7, name=f"User:{name}", op=13)]  # USER resource, CREATE_TOKENS  # fmt: skip
    with alice(target) as conn:
        assert [r.error_code for r in conn.do(CA(creations=acls), version).results] == [0, 0, 0]

        def described() -> None:  # Kafka's broker applies the controller's ACLs a moment after the answer
            got = set()
            for rt in (TOPIC, 7):
                got |= bindings(conn.do(describe_request(rt=rt, pt=ANY), version))
            assert {row(c) for c in acls} <= got

        eventually(described)
        deleted = conn.do(DL(filters=[delete_filter(name=name), delete_filter(name=f"User:{name}")]), version)
        assert sum(len(r.matching_acls) for r in deleted.filter_results) == 3


# ------------------------------------------------------------------------------------ kafka-acls


def test_kafka_acls_tool_adds_lists_and_removes(target: SimpleNamespace, tmp_path: Any) -> None:
    config = tmp_path / "alice.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config="
        f'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" '
        f'password="{AUTHZ_USERS["alice"]}";\n'
    )
    topic, group = f"tool-{uuid.uuid4().hex[:8]}", f"grp-{uuid.uuid4().hex[:8]}"
    common = ("--command-config", str(config))
    added = kafka_tool(ACL_COMMAND, target.sasl, *common, "--add", "--allow-principal", "User:bob", "--operation",
                       "Read", "--operation", "Describe", "--topic", topic, "--group", group)  # fmt: skip
    assert added.returncode == 0, added.output
    prefixed = kafka_tool(ACL_COMMAND, target.sasl, *common, "--add", "--deny-principal", "User:bob",
                          "--deny-host", "10.1.2.3", "--operation", "Write", "--topic", topic[:9],
                          "--resource-pattern-type", "prefixed")  # fmt: skip
    assert prefixed.returncode == 0, prefixed.output

    def listed() -> str:
        out = kafka_tool(ACL_COMMAND, target.sasl, *common, "--list", "--topic", topic)
        assert out.returncode == 0, out.output
        assert "principal=User:bob, host=*, operation=READ, permissionType=ALLOW" in out.stdout, out.stdout
        return out.stdout

    text = eventually(listed)
    assert f"ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)" in text
    assert "principal=User:bob, host=*, operation=DESCRIBE, permissionType=ALLOW" in text
    matching = kafka_tool(ACL_COMMAND, target.sasl, *common, "--list", "--topic", topic,
                          "--resource-pattern-type", "match")  # fmt: skip
    assert "principal=User:bob, host=10.1.2.3, operation=WRITE, permissionType=DENY" in matching.stdout
    removed = kafka_tool(ACL_COMMAND, target.sasl, *common, "--remove", "--force", "--topic", topic, "--group", group)
    assert removed.returncode == 0, removed.output
    kafka_tool(ACL_COMMAND, target.sasl, *common, "--remove", "--force", "--topic", topic[:9],
               "--resource-pattern-type", "prefixed")  # fmt: skip
    with alice(target) as conn:
        eventually(lambda: not bindings(conn.do(describe_request(name=topic), 3)) or pytest.fail("still there"))
    # As User:ANONYMOUS (PLAINTEXT) the tool is refused.
    denied = kafka_tool(ACL_COMMAND, target.plain, "--list")
    assert denied.returncode == 1, denied.output
    assert "Error while executing ACL command: org.apache.kafka.common.errors.ClusterAuthorizationException" in (
        denied.output
    )
    assert "needs DESCRIBE permission." in denied.output


# ------------------------------------------------------------------------------------ durability


def test_acls_survive_kill_9(tmp_path: Any) -> None:
    if "logbroker" not in both_targets():
        pytest.skip("logbroker's own durability")
    kept = creation(name="kept", principal="User:bob", op=READ)
    dropped = creation(name="dropped", principal="User:bob", op=WRITE)
    with authz_logbroker(tmp_path / "data", super_users=("User:alice",)) as proc:
        target = SimpleNamespace(sasl=proc.sasl_bootstrap)
        with alice(target) as conn:
            assert [r.error_code for r in conn.do(CA(creations=[kept, dropped]), 3).results] == [0, 0]
            deleted = conn.do(DL(filters=[delete_filter(name="dropped")]), 3).filter_results[0]
            assert len(deleted.matching_acls) == 1
        proc.kill()  # kill -9 right after the acknowledgements
        proc.start()
        with alice(target) as conn:
            assert bindings(conn.do(describe_request(), 3)) == {row(kept)}
        # and the restored ACL is enforced: bob still may not describe the cluster
        with raw_connection(proc.sasl_bootstrap, "bob", AUTHZ_USERS["bob"]) as bob:
            assert bob.do(describe_request(), 3).error_code == E.CLUSTER_AUTHORIZATION_FAILED
