"""Who may do what: the ACLs (Kafka's StandardAuthorizer and its durable store) and the SCRAM users.

Handlers ask `ctx.access`; changes are durable (under the fsync policy) before they count or are answered.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from logbroker.protocol import Request

from .auth.acls import AclBinding, AclBindingFilter, AclOperation, AclStore, Authorizer, Refusal, ResourceType
from .auth.users import UserStore
from .groups.model import for_log
from .seams import Durability

log = logging.getLogger("logbroker.broker")


class AccessControl:
    """The ACLs and their decisions, and the SCRAM credentials, over their durable stores."""

    def __init__(
        self, authorizer: Authorizer | None, acl_store: AclStore | None, users: UserStore, durability: Durability
    ) -> None:
        self._authorizer = authorizer  # None: no authorizer configured, everything is allowed
        self._acl_store = acl_store
        self._users = users
        self._durability = durability

    def close(self) -> None:
        self._users.close()
        if self._acl_store is not None:
            self._acl_store.close()

    def untrusted_stores(self) -> dict[str, str]:
        """Security stores with damaged records (store -> what and where), distrusted until an operator
        repairs them or accepts the loss: the ACL store denies every non-super-user request, the users store
        refuses SCRAM logins of non-super users."""
        out = {}
        for name, store in (("acls", self._acl_store), ("users", self._users)):
            if store is not None and store.untrusted:
                where = "; ".join(d.describe() for d in store.damage[:3])
                out[name] = f"{len(store.damage)} damaged batches in {store.dir} ({where})"
        return out

    @property
    def users(self) -> UserStore:
        return self._users

    async def alter_users(self, records: list[tuple[tuple[str, ...], object]]) -> None:
        """Write SCRAM credential changes durably, then make them the state."""
        self.users.append(records)
        await self._durability.commit()
        self.users.apply(records)
        for (_kind, user, mechanism), value in records:  # the user and mechanism only, never the credential
            what = "deleted" if value is None else "set"
            log.info("SCRAM credential %s: user %s, %s", what, for_log(str(user)), mechanism)

    @property
    def authorizer(self) -> Authorizer | None:
        """The ACLs and their decision, or None when no authorizer is configured (Kafka without
        `authorizer.class.name`: every request is allowed, and the ACL APIs answer SECURITY_DISABLED)."""
        return self._authorizer

    def authorize(self, req: Request, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        """May the request's principal, from its address, do `operation` on the resource? (Kafka's
        AuthHelper.authorize; always True without an authorizer.)"""
        a = self._authorizer
        return a is None or a.authorize(req.principal, req.client_address, operation, resource_type, name)

    def authorize_names(
        self, req: Request, operation: AclOperation, resource_type: ResourceType, names: Iterable[str]
    ) -> set[str]:
        """The subset of `names` the request may do `operation` on (Kafka's filterByAuthorized)."""
        a = self._authorizer
        if a is None:
            return set(names)
        return {n for n in set(names) if a.authorize(req.principal, req.client_address, operation, resource_type, n)}

    def authorize_any(self, req: Request, operation: AclOperation, resource_type: ResourceType) -> bool:
        """May the principal do `operation` on at least one resource of the type? (Kafka's
        authorizeByResourceType: IDEMPOTENT_WRITE through WRITE on any topic, CREATE on any topic...)"""
        a = self._authorizer
        return a is None or a.authorize_by_resource_type(req.principal, req.client_address, operation, resource_type)

    def describe_acls(self, f: AclBindingFilter) -> list[AclBinding]:
        if self._authorizer is None:
            raise RuntimeError("no authorizer is configured")
        return self._authorizer.acls(f)

    async def create_acls(self, bindings: list[AclBinding]) -> list[Refusal | None]:
        """Add ACLs; the new ones are durable before this returns (and before they count: a decision is
        never made on an ACL a crash could take back)."""
        if self._authorizer is None or self._acl_store is None:
            raise RuntimeError("no authorizer is configured")
        trial = Authorizer(acls=self._authorizer.acls())
        results = trial.create(bindings, self._acl_store)
        await self._durability.commit()
        for b, r in zip(bindings, results, strict=True):
            if r is None:
                self._authorizer.add(b)
                log.info("ACL created: %s", _acl_text(b))
        return results

    async def delete_acls(self, filters: list[AclBindingFilter]) -> list[Refusal | list[AclBinding]]:
        """Delete the ACLs the filters match; durable before this returns. Deletions count at once: a
        crash before the sync can only bring back what the client was never told was deleted."""
        if self._authorizer is None or self._acl_store is None:
            raise RuntimeError("no authorizer is configured")
        results = self._authorizer.delete(filters, self._acl_store)
        await self._durability.commit()
        for r in results:
            for b in r if isinstance(r, list) else ():
                log.info("ACL deleted: %s", _acl_text(b))
        return results


def _acl_text(b: AclBinding) -> str:
    """An ACL as kafka-acls prints one."""
    return (
        f"{b.principal} {b.permission.name} {b.operation.name} from host {b.host} on "
        f"{b.resource_type.name}:{b.pattern_type.name}:{for_log(b.name)}"
    )
