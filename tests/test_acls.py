"""ACL model, filters, validation, StandardAuthorizer decisions and the durable store.

Each case states what Apache Kafka does (StandardAuthorizerData, Authorizer.authorizeByResourceType,
AclControlManager, AclApis, ResourcePatternFilter, AccessControlEntryFilter)."""

from __future__ import annotations

from pathlib import Path

import pytest

from logbroker.broker.auth.acls import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AclStore,
    Authorizer,
    PatternType,
    ResourceType,
    parse_super_users,
    validate_filter,
    validate_new_acl,
)
from logbroker.protocol.errors import ErrorCode as E

T, G, C, X = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
Op, ALLOW, DENY = AclOperation, AclPermissionType.ALLOW, AclPermissionType.DENY
ALICE, BOB = "User:alice", "User:bob"


def acl(name="orders", op=Op.READ, perm=ALLOW, principal=ALICE, host="*", rt=T, pt=LIT) -> AclBinding:
    return AclBinding(rt, name, pt, principal, host, op, perm)


def test_codes_are_kafkas():
    """Kafka's wire codes (AclOperation, AclPermissionType, ResourceType, PatternType); unknown codes read as
    UNKNOWN, as Kafka's fromCode does."""
    assert [int(o) for o in Op] == list(range(16))
    assert (Op.IDEMPOTENT_WRITE, Op.TWO_PHASE_COMMIT) == (12, 15)
    assert (DENY, ALLOW) == (2, 3)
    assert (T, G, C, X, ResourceType.DELEGATION_TOKEN, ResourceType.USER) == (2, 3, 4, 5, 6, 7)
    assert (PatternType.ANY, PatternType.MATCH, LIT, PRE) == (1, 2, 3, 4)
    assert Op.from_code(99) is Op.UNKNOWN and ResourceType.from_code(-1) is ResourceType.UNKNOWN


# ---------------------------------------------------------------------- filters

STORED = [
    acl("orders"),
    acl("*"),
    acl("ord", pt=PRE),
    acl("other", pt=PRE),
    acl("orders", op=Op.WRITE, perm=DENY, principal=BOB, host="10.0.0.1"),
    acl("g1", rt=G),
]

FILTER_CASES = [
    # (filter, indices of STORED it matches, what Kafka does)
    (AclBindingFilter(), [0, 1, 2, 3, 4, 5], "ANY everything matches all"),
    (AclBindingFilter(T), [0, 1, 2, 3, 4], "resource type narrows"),
    (AclBindingFilter(T, "orders"), [0, 4], "ANY pattern with a name: exact name only"),
    (AclBindingFilter(T, "orders", LIT), [0, 4], "LITERAL: literal ACLs of that exact name"),
    (AclBindingFilter(T, "ord", PRE), [2], "PREFIXED: prefixed ACLs of that exact name, not their matches"),
    (AclBindingFilter(T, "orders", PatternType.MATCH), [0, 1, 2, 4], "MATCH: equal literal, '*', prefixes"),
    (AclBindingFilter(T, None, PatternType.MATCH), [0, 1, 2, 3, 4], "MATCH without a name: any name"),
    (AclBindingFilter(T, "*", LIT), [1], "LITERAL '*' is only the wildcard ACL itself"),
    (AclBindingFilter(principal=BOB), [4], "principal equality"),
    (AclBindingFilter(host="10.0.0.1"), [4], "host equality ('*' in the ACL is not a filter wildcard)"),
    (AclBindingFilter(operation=Op.WRITE), [4], "operation equality, no implication"),
    (AclBindingFilter(permission=DENY), [4], "permission equality"),
    (AclBindingFilter(operation=Op.ALL), [], "ALL in a filter matches only ALL ACLs"),
]


@pytest.mark.parametrize(("f", "want", "why"), FILTER_CASES, ids=[c[2] for c in FILTER_CASES])
def test_filter_matching(f, want, why):
    assert [i for i, b in enumerate(STORED) if f.matches(b)] == want


def test_describe_lists_in_kafka_order():
    """StandardAcl's order: resource type, then name descending, then pattern type, operation..."""
    auth = Authorizer(acls=STORED)
    names = [(b.resource_type, b.name, b.pattern_type, b.operation) for b in auth.acls()]
    assert names == [
        (T, "other", PRE, Op.READ),
        (T, "orders", LIT, Op.READ),
        (T, "orders", LIT, Op.WRITE),
        (T, "ord", PRE, Op.READ),
        (T, "*", LIT, Op.READ),
        (G, "g1", LIT, Op.READ),
    ]


# ---------------------------------------------------------------------- validation

VALIDATION_CASES = [
    # (binding, error, message, scope)
    (acl(), None, None, None),
    (acl("*", pt=PRE), None, None, None),  # Kafka accepts a prefixed "*": matches names starting with "*"
    (acl(principal="alice"), None, None, None),  # no principal check on create in KRaft
    (acl("kafka-cluster", op=Op.ALTER, rt=C), None, None, None),
    (acl("other", rt=C), E.INVALID_REQUEST, "The only valid name for the CLUSTER resource is kafka-cluster", "binding"),
    (acl("", rt=C), E.INVALID_REQUEST, "The only valid name for the CLUSTER resource is kafka-cluster", "binding"),
    (acl(""), E.INVALID_REQUEST, "Invalid empty resource name", "binding"),
    (acl(rt=ResourceType.ANY), E.UNKNOWN_SERVER_ERROR, None, "request"),  # ResourcePattern ctor throws
    (acl(pt=PatternType.MATCH), E.UNKNOWN_SERVER_ERROR, None, "request"),
    (acl(pt=PatternType.ANY), E.UNKNOWN_SERVER_ERROR, None, "request"),
    (acl(op=Op.ANY), E.UNKNOWN_SERVER_ERROR, None, "request"),  # AccessControlEntry ctor throws
    (acl(perm=AclPermissionType.ANY), E.UNKNOWN_SERVER_ERROR, None, "request"),
    (acl(rt=ResourceType.UNKNOWN), E.INVALID_REQUEST, None, "connection"),  # CreateAclsRequest.validate
    (acl(op=Op.UNKNOWN), E.INVALID_REQUEST, None, "connection"),
]


@pytest.mark.parametrize(("b", "error", "message", "scope"), VALIDATION_CASES)
def test_validate_new_acl(b, error, message, scope):
    r = validate_new_acl(b)
    if error is None:
        assert r is None
    else:
        assert r is not None and (r.error, r.message, r.scope) == (error, message, scope)


def test_validate_filter():
    """AclControlManager.validateFilter: UNKNOWN parts refused per filter with these messages."""
    assert validate_filter(AclBindingFilter(ResourceType.ANY, "*", LIT, "User:*", "*")) is None
    r = validate_filter(AclBindingFilter(pattern_type=PatternType.UNKNOWN))
    assert r is not None and (r.error, r.message) == (E.INVALID_REQUEST, "Unknown patternFilter.")
    r = validate_filter(AclBindingFilter(permission=AclPermissionType.UNKNOWN))
    assert r is not None and (r.error, r.message) == (E.INVALID_REQUEST, "Unknown entryFilter.")


def test_create_is_idempotent_and_delete_dedupes():
    """Creating an existing ACL succeeds without a second copy; two DeleteAcls filters matching one ACL
    both report it and it is deleted once (AclControlManagerTest.testDeleteDedupe)."""
    auth = Authorizer()
    b = acl(host="10.0.0.1", op=Op.ALL)
    assert auth.create([b, b, acl("")]) == [None, None, validate_new_acl(acl(""))]
    assert len(auth) == 1
    unknown = AclBindingFilter(pattern_type=PatternType.UNKNOWN)
    res = auth.delete([AclBindingFilter(), b.as_filter(), unknown])
    assert res == [[b], [b], validate_filter(unknown)]
    assert len(auth) == 0


def test_super_users_config():
    assert parse_super_users(" User:admin ;;User:ops; ") == {"User:admin", "User:ops"}
    assert parse_super_users(None) == frozenset()
    with pytest.raises(ValueError):
        parse_super_users("admin")


# ---------------------------------------------------------------------- decisions

# (acls, principal, host, operation, resource type, name, allowed, what Kafka does)
AUTH_CASES = [
    ([], ALICE, "1.2.3.4", Op.READ, T, "orders", False, "no ACLs: default deny"),
    ([acl()], ALICE, "1.2.3.4", Op.READ, T, "orders", True, "literal allow"),
    ([acl()], ALICE, "1.2.3.4", Op.WRITE, T, "orders", False, "other operation not allowed"),
    ([acl()], BOB, "1.2.3.4", Op.READ, T, "orders", False, "other principal"),
    ([acl()], ALICE, "1.2.3.4", Op.READ, T, "orders2", False, "literal is not a prefix"),
    ([acl()], ALICE, "1.2.3.4", Op.READ, G, "orders", False, "other resource type"),
    ([acl(principal="User:*")], BOB, "1.2.3.4", Op.READ, T, "orders", True, "User:* matches any principal"),
    ([acl(principal="User:*")], "Group:x", "h", Op.READ, T, "orders", True, "User:* matches other types too"),
    ([acl(host="10.0.0.1")], ALICE, "10.0.0.2", Op.READ, T, "orders", False, "host must be equal"),
    ([acl(host="10.0.0.1")], ALICE, "10.0.0.1", Op.READ, T, "orders", True, "host equal"),
    ([acl("*")], ALICE, "h", Op.READ, T, "anything", True, "literal '*' matches any name"),
    ([acl("ord", pt=PRE)], ALICE, "h", Op.READ, T, "orders", True, "prefixed matches"),
    ([acl("orders", pt=PRE)], ALICE, "h", Op.READ, T, "orders", True, "prefix equal to the name matches"),
    ([acl("ordersx", pt=PRE)], ALICE, "h", Op.READ, T, "orders", False, "longer prefix does not"),
    ([acl("*", pt=PRE)], ALICE, "h", Op.READ, T, "orders", False, "prefixed '*' is not a wildcard"),
    ([acl(), acl(perm=DENY)], ALICE, "h", Op.READ, T, "orders", False, "deny beats allow"),
    ([acl(), acl("*", perm=DENY, principal="User:*")], ALICE, "h", Op.READ, T, "orders", False, "wildcard deny"),
    ([acl(), acl("or", pt=PRE, perm=DENY)], ALICE, "h", Op.READ, T, "orders", False, "prefixed deny"),
    ([acl(op=Op.ALL)], ALICE, "h", Op.DELETE, T, "orders", True, "ALL allows every operation"),
    ([acl(), acl(op=Op.ALL, perm=DENY)], ALICE, "h", Op.READ, T, "orders", False, "ALL deny denies all"),
    ([acl(op=Op.READ)], ALICE, "h", Op.DESCRIBE, T, "orders", True, "READ implies DESCRIBE"),
    ([acl(op=Op.WRITE)], ALICE, "h", Op.DESCRIBE, T, "orders", True, "WRITE implies DESCRIBE"),
    ([acl(op=Op.DELETE)], ALICE, "h", Op.DESCRIBE, T, "orders", True, "DELETE implies DESCRIBE"),
    ([acl(op=Op.ALTER)], ALICE, "h", Op.DESCRIBE, T, "orders", True, "ALTER implies DESCRIBE"),
    ([acl(op=Op.CREATE)], ALICE, "h", Op.DESCRIBE, T, "orders", False, "CREATE does not imply DESCRIBE"),
    ([acl(op=Op.ALTER_CONFIGS)], ALICE, "h", Op.DESCRIBE_CONFIGS, T, "orders", True, "ALTER_CONFIGS implies"),
    ([acl(op=Op.ALTER_CONFIGS)], ALICE, "h", Op.DESCRIBE, T, "orders", False, "but not DESCRIBE"),
    ([acl(op=Op.DESCRIBE)], ALICE, "h", Op.READ, T, "orders", False, "DESCRIBE implies nothing else"),
    (
        [acl(op=Op.READ), acl(op=Op.READ, perm=DENY)],
        ALICE,
        "h",
        Op.DESCRIBE,
        T,
        "orders",
        True,
        "a DENY READ does not deny DESCRIBE (implication only for ALLOW)",
    ),
    (
        [acl(op=Op.DESCRIBE, perm=DENY), acl(op=Op.READ)],
        ALICE,
        "h",
        Op.DESCRIBE,
        T,
        "orders",
        False,
        "explicit DENY DESCRIBE wins over READ's implied DESCRIBE",
    ),
    ([acl("g", rt=G, pt=PRE)], ALICE, "h", Op.READ, G, "group-1", True, "prefixed ACL on a group"),
    (
        [acl("kafka-cluster", rt=C, op=Op.IDEMPOTENT_WRITE)],
        ALICE,
        "h",
        Op.IDEMPOTENT_WRITE,
        C,
        "kafka-cluster",
        True,
        "cluster operation",
    ),
]


@pytest.mark.parametrize(
    ("acls", "principal", "host", "op", "rt", "name", "allowed", "why"), AUTH_CASES, ids=[c[-1] for c in AUTH_CASES]
)
def test_authorize(acls, principal, host, op, rt, name, allowed, why):
    assert Authorizer(acls=acls).authorize(principal, host, op, rt, name) is allowed


def test_super_users_bypass_deny():
    """super.users are allowed anything, DENY ACLs included; matched as the exact "Type:name" string."""
    auth = Authorizer({"User:admin"}, acls=[acl(perm=DENY, principal="User:*", op=Op.ALL)])
    assert auth.authorize("User:admin", "h", Op.WRITE, T, "orders")
    assert not auth.authorize(ALICE, "h", Op.WRITE, T, "orders")


@pytest.mark.parametrize(
    ("acls", "allowed", "why"),
    [
        ([], True, "no ACL on the resource: allow.everyone applies"),
        ([acl("other")], True, "ACLs only on other resources do not count"),
        ([acl(principal=BOB)], False, "an ACL on the resource for someone else: deny"),
        ([acl(op=Op.WRITE)], False, "an ACL for another operation: deny"),
        ([acl("*", principal=BOB)], False, "a wildcard-resource ACL counts as an ACL on the resource"),
        ([acl("ord", pt=PRE, host="9.9.9.9")], False, "a matching prefixed ACL for another host counts"),
        ([acl(perm=DENY)], False, "explicit deny"),
    ],
)
def test_allow_everyone_if_no_acl_found(acls, allowed, why):
    auth = Authorizer.from_config({"allow.everyone.if.no.acl.found": "true"}, acls)
    assert auth.authorize(ALICE, "h", Op.READ, T, "orders") is allowed


def test_from_config_defaults_to_deny():
    """Kafka's Boolean.parseBoolean: absent or anything but "true" is false."""
    assert not Authorizer.from_config({}).authorize(ALICE, "h", Op.READ, T, "x")
    assert not Authorizer.from_config({"allow.everyone.if.no.acl.found": "yes"}).authorize(ALICE, "h", Op.READ, T, "x")
    assert Authorizer.from_config({"allow.everyone.if.no.acl.found": " TRUE "}).authorize(ALICE, "h", Op.READ, T, "x")


@pytest.mark.parametrize(
    ("acls", "allowed", "why"),
    [
        ([], False, "no ACLs"),
        ([acl("t1", op=Op.WRITE)], True, "a literal allow on some topic"),
        ([acl("t", op=Op.WRITE, pt=PRE)], True, "a prefixed allow"),
        ([acl("*", op=Op.WRITE)], True, "wildcard allow"),
        ([acl("t1", op=Op.ALL)], True, "ALL counts"),
        ([acl("t1", op=Op.READ)], False, "another operation (no implication here)"),
        ([acl("t1", op=Op.WRITE), acl("t1", op=Op.WRITE, perm=DENY)], False, "same literal denied"),
        ([acl("t1", op=Op.WRITE), acl("t", op=Op.WRITE, pt=PRE, perm=DENY)], False, "dominated by prefix deny"),
        ([acl("t1", op=Op.WRITE), acl("t2", op=Op.WRITE, perm=DENY)], True, "deny elsewhere does not matter"),
        ([acl("t1", op=Op.WRITE), acl("*", op=Op.WRITE, perm=DENY)], False, "wildcard deny denies all"),
        ([acl("t1", op=Op.WRITE, host="9.9.9.9")], False, "other host"),
        ([acl("t1", op=Op.WRITE, principal="User:*")], True, "wildcard principal"),
    ],
)
def test_authorize_by_resource_type(acls, allowed, why):
    """Authorizer.authorizeByResourceType (e.g. InitProducerId without a transactional id asks WRITE on any
    topic)."""
    assert Authorizer(acls=acls).authorize_by_resource_type(ALICE, "h", Op.WRITE, T) is allowed


def test_authorize_by_resource_type_special_cases():
    assert Authorizer({ALICE}).authorize_by_resource_type(ALICE, "h", Op.WRITE, T)  # super user
    everyone = Authorizer(allow_everyone_if_no_acl_found=True)
    assert everyone.authorize_by_resource_type(ALICE, "h", Op.WRITE, T)  # via the "hardcode" resource
    with pytest.raises(ValueError):
        everyone.authorize_by_resource_type(ALICE, "h", Op.ANY, T)
    with pytest.raises(ValueError):
        everyone.authorize_by_resource_type(ALICE, "h", Op.WRITE, ResourceType.ANY)


def test_index_many_acls_and_removal():
    """Thousands of literal and prefixed ACLs: decisions stay right as ACLs come and go."""
    acls = [acl(f"topic-{i}") for i in range(3000)] + [acl(f"p{i}-", pt=PRE) for i in range(3000)]
    auth = Authorizer(acls=acls)
    assert auth.authorize(ALICE, "h", Op.READ, T, "topic-2999")
    assert auth.authorize(ALICE, "h", Op.READ, T, "p17-x")
    assert not auth.authorize(ALICE, "h", Op.READ, T, "p17x")
    assert auth.remove(acl("p17-", pt=PRE)) and not auth.remove(acl("p17-", pt=PRE))
    assert not auth.authorize(ALICE, "h", Op.READ, T, "p17-x")
    for b in acls:
        auth.remove(b)
    assert len(auth) == 0 and not auth.authorize(ALICE, "h", Op.READ, T, "topic-1")
    assert Authorizer(allow_everyone_if_no_acl_found=True, acls=[]).authorize(ALICE, "h", Op.READ, T, "topic-1")


# ---------------------------------------------------------------------- store


def test_store_round_trip(tmp_path: Path):
    first = [acl(), acl("ord", pt=PRE, perm=DENY), acl("g", rt=G, principal="User:*", host="10.0.0.1")]
    store = AclStore(tmp_path, True)
    auth = Authorizer(acls=store.load_bindings())
    assert auth.create([*first, first[0]], store) == [None] * 4
    auth.delete([AclBindingFilter(G)], store)
    store.close()

    store = AclStore(tmp_path, True)
    assert set(store.load_bindings()) == set(first[:2]) == set(Authorizer(acls=first[:2]).acls())
    assert (tmp_path / "__acls").is_dir()
    store.close()


def test_store_reopened_after_unclean_shutdown(tmp_path: Path):
    """Appends without close, then a reopen with clean_shutdown=False (recovery) gives the same set."""
    store = AclStore(tmp_path, True)
    store.load_bindings()
    auth = Authorizer()
    many = [acl(f"t{i}", op=Op.WRITE) for i in range(50)]
    auth.create(many, store)
    auth.delete([AclBindingFilter(T, "t7", LIT)], store)
    reopened = AclStore(tmp_path, False)
    assert set(reopened.load_bindings()) == set(auth.acls()) and len(auth) == 49
    reopened.close()
