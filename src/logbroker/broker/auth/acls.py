"""ACLs with the semantics of Kafka's StandardAuthorizer: the model, filters, validation, decisions, storage.

The spec is Apache Kafka's KRaft authorizer (StandardAuthorizer / StandardAuthorizerData), its controller's
validation (AclControlManager) and the client-side filter classes, so that `kafka-acls` and admin clients see
the same answers from logbroker as from Kafka. Codes are Kafka's wire codes. Nothing here knows about
requests or connections: handlers call `Authorizer.authorize` and the CreateAcls/DescribeAcls/DeleteAcls
helpers, and `AclStore` keeps the bindings in `<data>/__acls`.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import Any

from logbroker.protocol.errors import ErrorCode as E
from logbroker.storage.internal import InternalLog, Key

__all__ = [
    "CLUSTER_NAME",
    "STORE_DIR",
    "WILDCARD",
    "WILDCARD_PRINCIPAL",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "AclStore",
    "Authorizer",
    "PatternType",
    "Refusal",
    "ResourceType",
    "parse_super_users",
    "validate_filter",
    "validate_new_acl",
]

STORE_DIR = "__acls"
WILDCARD = "*"  # an ACL host or literal resource name that matches any
WILDCARD_PRINCIPAL = "User:*"  # matches every principal, whatever its type
CLUSTER_NAME = "kafka-cluster"  # the only name a CLUSTER resource may have


class _Coded(IntEnum):
    @classmethod
    def from_code(cls, code: int) -> Any:
        """Kafka's fromCode: a code it does not know reads as UNKNOWN (refused later, not at parse)."""
        try:
            return cls(code)
        except ValueError:
            return cls(0)


class ResourceType(_Coded):
    UNKNOWN = 0
    ANY = 1  # filters only
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_Coded):
    UNKNOWN = 0
    ANY = 1  # filters only
    MATCH = 2  # filters only
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_Coded):
    UNKNOWN = 0
    ANY = 1  # filters only
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class AclPermissionType(_Coded):
    UNKNOWN = 0
    ANY = 1  # filters only
    DENY = 2
    ALLOW = 3


# An ALLOW ACL for one of these also allows DESCRIBE (resp. DESCRIBE_CONFIGS); a DENY implies nothing.
_IMPLIES_DESCRIBE = frozenset(
    {AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}
)
_IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: a resource pattern and an access control entry (Kafka's AclBinding / StandardAcl)."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    def sort_key(self) -> tuple[Any, ...]:
        """The fields in StandardAcl's comparison order; `_kafka_order` sorts the name descending."""
        return (
            self.resource_type,
            self.name,
            self.pattern_type,
            self.operation,
            self.principal,
            self.host,
            self.permission,
        )

    def to_json(self) -> list[Any]:
        return [
            int(self.resource_type),
            self.name,
            int(self.pattern_type),
            self.principal,
            self.host,
            int(self.operation),
            int(self.permission),
        ]

    @classmethod
    def from_json(cls, v: list[Any]) -> AclBinding:
        rt, name, pt, principal, host, op, perm = v
        return cls(
            ResourceType.from_code(rt),
            name,
            PatternType.from_code(pt),
            principal,
            host,
            AclOperation.from_code(op),
            AclPermissionType.from_code(perm),
        )

    def as_filter(self) -> AclBindingFilter:
        """The filter that matches exactly this binding (Kafka's AclBinding.toFilter)."""
        return AclBindingFilter(
            self.resource_type, self.name, self.pattern_type, self.principal, self.host, self.operation, self.permission
        )


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Kafka's AclBindingFilter (ResourcePatternFilter + AccessControlEntryFilter). None and ANY match
    anything; pattern MATCH matches every ACL that would apply to the named resource."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def matches(self, b: AclBinding) -> bool:
        return self._matches_pattern(b) and self._matches_entry(b)

    def _matches_pattern(self, b: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != b.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != b.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, b.pattern_type):
            return self.name == b.name
        # MATCH: the ACLs that apply to a resource called `name`.
        if b.pattern_type == PatternType.LITERAL:
            return self.name == b.name or b.name == WILDCARD
        if b.pattern_type == PatternType.PREFIXED:
            return self.name.startswith(b.name)
        return False  # Kafka throws on an ACL of another pattern type; none can be stored

    def _matches_entry(self, b: AclBinding) -> bool:
        return (
            (self.principal is None or self.principal == b.principal)
            and (self.host is None or self.host == b.host)
            and (self.operation == AclOperation.ANY or self.operation == b.operation)
            and (self.permission == AclPermissionType.ANY or self.permission == b.permission)
        )


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why Kafka refuses a binding or filter, and how far the refusal reaches.

    scope "binding": that entry's result carries `error`/`message`; "request": Kafka fails the whole
    request (every entry UNKNOWN_SERVER_ERROR, no message: its ResourcePattern / AccessControlEntry
    constructors throw while the handler builds bindings); "connection": the request does not parse
    (CreateAclsRequest.validate throws on UNKNOWN codes) and Kafka closes the connection."""

    error: E
    message: str | None
    scope: str = "binding"


def validate_new_acl(b: AclBinding) -> Refusal | None:
    """What Kafka answers for one CreateAcls creation, in the order Kafka checks (None: accepted).

    Kafka does not refuse a PREFIXED "*" (it matches names starting with "*"), a principal without a colon
    or a host that is not an address: those are stored as given."""
    if (
        b.resource_type == ResourceType.UNKNOWN
        or b.pattern_type == PatternType.UNKNOWN
        or b.operation == AclOperation.UNKNOWN
        or b.permission == AclPermissionType.UNKNOWN
    ):
        return Refusal(E.INVALID_REQUEST, None, "connection")
    if (
        b.resource_type == ResourceType.ANY
        or b.pattern_type in (PatternType.ANY, PatternType.MATCH)
        or b.operation == AclOperation.ANY
        or b.permission == AclPermissionType.ANY
    ):
        return Refusal(E.UNKNOWN_SERVER_ERROR, None, "request")
    # AclApis.handleCreateAcls (broker side), then AclControlManager.validateNewAcl (whose other checks the
    # two above already cover).
    if b.resource_type == ResourceType.CLUSTER and b.name != CLUSTER_NAME:
        return Refusal(E.INVALID_REQUEST, f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not b.name:
        return Refusal(E.INVALID_REQUEST, "Invalid empty resource name")
    return None


def validate_filter(f: AclBindingFilter) -> Refusal | None:
    """AclControlManager.validateFilter for a DeleteAcls filter: UNKNOWN elements are refused per filter."""
    if f.resource_type == ResourceType.UNKNOWN or f.pattern_type == PatternType.UNKNOWN:
        return Refusal(E.INVALID_REQUEST, "Unknown patternFilter.")
    if f.operation == AclOperation.UNKNOWN or f.permission == AclPermissionType.UNKNOWN:
        return Refusal(E.INVALID_REQUEST, "Unknown entryFilter.")
    return None


def parse_super_users(value: str | None) -> frozenset[str]:
    """`super.users`: principals separated by ';', blanks ignored; each must be "Type:name" (Kafka refuses
    the configuration otherwise)."""
    out: set[str] = set()
    for part in (value or "").split(";"):
        p = part.strip()
        if not p:
            continue
        if ":" not in p:
            raise ValueError(f"expected a string in format principalType:principalName but got {p}")
        out.add(p)
    return frozenset(out)


def _kafka_order(bindings: Iterable[AclBinding]) -> list[AclBinding]:
    """Kafka's listing order: resource type ascending, name descending, then the rest ascending."""
    by_rest = sorted(bindings, key=lambda b: b.sort_key()[2:])
    by_name = sorted(by_rest, key=lambda b: b.name, reverse=True)
    return sorted(by_name, key=lambda b: b.resource_type)


@dataclass(slots=True)
class _Index:
    """The ACLs of one resource type: literal ones by name ("*" included), prefixed ones by prefix, with the
    distinct prefix lengths sorted so a lookup tries only lengths that exist."""

    literal: dict[str, set[AclBinding]] = field(default_factory=dict)
    prefixed: dict[str, set[AclBinding]] = field(default_factory=dict)
    prefix_lengths: list[int] = field(default_factory=list)
    length_counts: dict[int, int] = field(default_factory=dict)

    def add(self, b: AclBinding) -> None:
        if b.pattern_type == PatternType.PREFIXED:
            group = self.prefixed.setdefault(b.name, set())
            if not group:
                n = len(b.name)
                if self.length_counts.get(n, 0) == 0:
                    bisect.insort(self.prefix_lengths, n)
                self.length_counts[n] = self.length_counts.get(n, 0) + 1
            group.add(b)
        else:
            self.literal.setdefault(b.name, set()).add(b)

    def remove(self, b: AclBinding) -> None:
        table = self.prefixed if b.pattern_type == PatternType.PREFIXED else self.literal
        group = table.get(b.name)
        if group is None:
            return
        group.discard(b)
        if group:
            return
        del table[b.name]
        if b.pattern_type == PatternType.PREFIXED:
            n = len(b.name)
            self.length_counts[n] -= 1
            if self.length_counts[n] == 0:
                del self.length_counts[n]
                self.prefix_lengths.remove(n)

    def applicable(self, name: str) -> Iterable[AclBinding]:
        """Every ACL whose pattern matches the resource `name` (the sections StandardAuthorizerData scans)."""
        yield from self.literal.get(name, ())
        for n in self.prefix_lengths:
            if n > len(name):
                break
            yield from self.prefixed.get(name[:n], ())
        if name != WILDCARD:
            yield from self.literal.get(WILDCARD, ())


class Authorizer:
    """The ACL set and the decision over it (Kafka's StandardAuthorizer). Mutate through `add`/`remove`
    (or the CreateAcls/DeleteAcls helpers, which also keep an `AclStore` in step)."""

    def __init__(
        self,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
        acls: Iterable[AclBinding] = (),
    ) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        # The ACL store had damaged records: its bindings may lack a DENY, so only super users pass.
        self.untrusted = False
        self._acls: set[AclBinding] = set()
        self._index: dict[ResourceType, _Index] = {}
        for b in acls:
            self.add(b)

    @classmethod
    def from_config(cls, config: dict[str, Any], acls: Iterable[AclBinding] = ()) -> Authorizer:
        """From Kafka's property names: `super.users`, `allow.everyone.if.no.acl.found` (default false;
        Boolean.parseBoolean, so only "true" in any case is true)."""
        allow = str(config.get("allow.everyone.if.no.acl.found", "false")).strip().lower() == "true"
        return cls(parse_super_users(config.get("super.users")), allow, acls)

    # ------------------------------------------------------------------ the set

    def __len__(self) -> int:
        return len(self._acls)

    def __contains__(self, b: object) -> bool:
        return b in self._acls

    def add(self, b: AclBinding) -> bool:
        """Add a binding; False when it was already there (Kafka adds an existing ACL as a no-op success)."""
        if b in self._acls:
            return False
        self._acls.add(b)
        self._index.setdefault(b.resource_type, _Index()).add(b)
        return True

    def remove(self, b: AclBinding) -> bool:
        if b not in self._acls:
            return False
        self._acls.discard(b)
        self._index[b.resource_type].remove(b)
        return True

    def acls(self, f: AclBindingFilter | None = None) -> list[AclBinding]:
        """The bindings a DescribeAcls filter selects, in Kafka's order."""
        return _kafka_order(b for b in self._acls if f is None or f.matches(b))

    # ------------------------------------------------------------------ decisions

    def authorize(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType, name: str
    ) -> bool:
        """May `principal` ("User:alice"), connected from `host` (the client's address as text), do
        `operation` on the literal resource `resource_type`/`name`?

        Super users may do anything. Otherwise a matching DENY wins over any ALLOW; without either, the
        answer is `allow.everyone.if.no.acl.found` only when no ACL at all applies to the resource (one for
        another principal, host or operation makes it a deny)."""
        if principal in self.super_users:
            return True
        if self.untrusted:
            return False
        index = self._index.get(resource_type)
        if index is None:
            return self.allow_everyone_if_no_acl_found
        has_acls = allowed = False
        for acl in index.applicable(name):
            has_acls = True
            verdict = _verdict(acl, principal, host, operation)
            if verdict is AclPermissionType.DENY:
                return False
            if verdict is AclPermissionType.ALLOW:
                allowed = True
        if allowed:
            return True
        return self.allow_everyone_if_no_acl_found if not has_acls else False

    def authorize_by_resource_type(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Whether `principal` may do `operation` on at least one resource of the type (Kafka's default
        Authorizer.authorizeByResourceType, used e.g. for InitProducerId without a transactional id: WRITE
        on any topic stands in for IDEMPOTENT_WRITE on the cluster, and for CreateTopics' CREATE).

        As in Kafka: first a normal check on a resource named "hardcode" (so super users, and
        allow.everyone when no ACL applies to that name, pass); then an ALLOW (operation or ALL, no
        implication) on a literal or prefixed pattern counts unless denied by the same literal, a prefixed
        deny that is a prefix of it, or a literal "*" deny."""
        if resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
            raise ValueError(f"authorize_by_resource_type needs a concrete resource type, not {resource_type.name}")
        if operation in (AclOperation.ANY, AclOperation.UNKNOWN):
            raise ValueError(f"authorize_by_resource_type needs a concrete operation, not {operation.name}")
        if self.untrusted and principal not in self.super_users:
            return False  # the bindings may lack a DENY: no ALLOW found below may be trusted
        if self.authorize(principal, host, operation, resource_type, "hardcode"):
            return True
        index = self._index.get(resource_type)
        if index is None:
            return False
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allow: list[AclBinding] = []
        wildcard_allow = False
        for acl in [b for group in (*index.literal.values(), *index.prefixed.values()) for b in group]:
            if acl.host not in (host, WILDCARD) or acl.principal not in (principal, WILDCARD_PRINCIPAL):
                continue
            if acl.operation not in (operation, AclOperation.ALL):
                continue
            literal = acl.pattern_type == PatternType.LITERAL
            if acl.permission == AclPermissionType.DENY:
                if literal and acl.name == WILDCARD:
                    return False
                (deny_literal if literal else deny_prefixed).add(acl.name)
            elif acl.permission == AclPermissionType.ALLOW:
                if literal and acl.name == WILDCARD:
                    wildcard_allow = True
                else:
                    allow.append(acl)
        if wildcard_allow:
            return True
        for acl in allow:
            if acl.pattern_type == PatternType.LITERAL and acl.name in deny_literal:
                continue
            if not any(acl.name[:i] in deny_prefixed for i in range(1, len(acl.name) + 1)):
                return True
        return False

    # ------------------------------------------------------------------ CreateAcls / DeleteAcls

    def create(self, bindings: list[AclBinding], store: AclStore | None = None) -> list[Refusal | None]:
        """CreateAcls' per-creation outcome (None: created, or already present). The caller answers a
        "request"/"connection" refusal as its scope says before calling this at all (see `Refusal`)."""
        results: list[Refusal | None] = []
        new: list[AclBinding] = []
        for b in bindings:
            refusal = validate_new_acl(b)
            if refusal is None and self.add(b):
                new.append(b)
            results.append(refusal)
        if store is not None and new:
            store.put(new)
        return results

    def delete(
        self, filters: list[AclBindingFilter], store: AclStore | None = None
    ) -> list[Refusal | list[AclBinding]]:
        """DeleteAcls: per filter, a refusal or the bindings it matched. Every filter is matched against the
        set as it was before the request, so two filters matching one binding both report it (as Kafka's
        controller does) while it is deleted once."""
        results: list[Refusal | list[AclBinding]] = []
        doomed: set[AclBinding] = set()
        for f in filters:
            refusal = validate_filter(f)
            if refusal is not None:
                results.append(refusal)
                continue
            matched = self.acls(f)
            doomed.update(matched)
            results.append(matched)
        for b in doomed:
            self.remove(b)
        if store is not None and doomed:
            store.drop(doomed)
        return results


def _verdict(acl: AclBinding, principal: str, host: str, op: AclOperation) -> AclPermissionType | None:
    """StandardAuthorizerData.findResult for an ACL whose pattern matches: its permission when principal,
    host and operation apply, else None.

    A principal without a colon never matches (Kafka throws from the decision instead)."""
    if acl.principal != WILDCARD_PRINCIPAL and (acl.principal != principal or ":" not in acl.principal):
        return None
    if acl.host != WILDCARD and acl.host != host:
        return None
    if acl.operation != AclOperation.ALL:
        if acl.permission == AclPermissionType.ALLOW:
            if op == AclOperation.DESCRIBE:
                if acl.operation not in _IMPLIES_DESCRIBE:
                    return None
            elif op == AclOperation.DESCRIBE_CONFIGS:
                if acl.operation not in _IMPLIES_DESCRIBE_CONFIGS:
                    return None
            elif op != acl.operation:
                return None
        elif op != acl.operation:
            return None
    return acl.permission


def _key(b: AclBinding) -> Key:
    return ("a", *b.to_json())


class AclStore(InternalLog):
    """The ACLs' internal log in `<data>/__acls`: one record per binding, key ("a", *binding), value 1 while
    it exists and None once deleted. The caller makes appends durable (the broker's fsync policy)."""

    def __init__(self, data_dir: Path, clean_shutdown: bool, segment_bytes: int = 64 << 20) -> None:
        # A damaged record may have been a DENY or a deletion: kept, and the store distrusted (`untrusted`).
        super().__init__(data_dir / STORE_DIR, clean_shutdown, segment_bytes, keep_damage=True)

    def load_bindings(self) -> list[AclBinding]:
        """Replay the log (once, after construction): the bindings that exist."""
        return [AclBinding.from_json(list(k[1:])) for k in self.load() if k and k[0] == "a"]

    def put(self, bindings: Iterable[AclBinding]) -> None:
        self.append([(_key(b), 1) for b in bindings])

    def drop(self, bindings: Iterable[AclBinding]) -> None:
        self.append([(_key(b), None) for b in bindings])
