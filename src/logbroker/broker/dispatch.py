"""Handlers declare the API and versions they serve; dispatch and ApiVersions are built from that.

Each module under `broker/handlers/` decorates its entry point with `@handles(ApiKey.X, lo, hi)`, so a new
API is one new file: `broker.handlers.registry()` imports every module of that package and returns what
registered. This module imports no handler, so handlers may import it without a loop.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar

from logbroker.protocol import ApiSpec, api

if TYPE_CHECKING:
    from logbroker.protocol import Request

    from .context import BrokerContext

HandlerFn = Callable[["BrokerContext", "Request"], Any]
F = TypeVar("F", bound=HandlerFn)


@dataclass(frozen=True, slots=True)
class Handler:
    spec: ApiSpec  # every version this handler serves (protocol_versions=all)
    fn: HandlerFn
    exclusive: bool = False  # the connection reads no further request until this one is answered
    kafka4: ApiSpec | None = None  # what Kafka 4 serves of it (protocol_versions=kafka4), if less

    def served(self, versions: str = "all") -> ApiSpec:
        return self.kafka4 if versions == "kafka4" and self.kafka4 is not None else self.spec


_REGISTRY: dict[int, Handler] = {}


def handles(
    key: int,
    min_version: int,
    max_version: int,
    *,
    kafka4_min: int | None = None,
    kafka4_advertises: bool = False,
    exclusive: bool = False,
) -> Callable[[F], F]:
    """Register the decorated function as the handler of API `key` in versions min..max.

    `kafka4_min`: the oldest version Kafka 4 still serves (KIP-896 removed older ones). With
    `protocol_versions=kafka4` the older versions are refused as there: a request in one closes the
    connection, and they are not advertised, unless `kafka4_advertises` (Kafka 4 keeps listing Produce
    v0-2, KAFKA-18659, because librdkafka gates compression on it; logbroker also lists the old Fetch,
    OffsetCommit and OffsetFetch versions librdkafka 2.0.2 probes).
    `exclusive`: for APIs whose answers can be large (Fetch): the connection takes no further request
    until this one is answered, as Kafka does for every request, so pipelining cannot multiply the memory
    a connection holds. Other requests pipeline (producers keep several in flight).
    The function returns a response object, an awaitable of one, or a `NoResponse`.
    """
    spec = ApiSpec(api(key), min_version, max_version)
    kafka4 = None
    if kafka4_min is not None and kafka4_min > min_version:
        if kafka4_advertises:
            kafka4 = ApiSpec(spec.api, min_version, max_version, kafka4_min)
        else:
            kafka4 = ApiSpec(spec.api, kafka4_min, max_version)

    def register(fn: F) -> F:
        old = _REGISTRY.get(spec.key)
        if old is not None and (old.fn.__module__, old.fn.__qualname__) != (fn.__module__, fn.__qualname__):
            raise RuntimeError(f"two handlers for {spec.name}: {old.fn.__module__} and {fn.__module__}")
        _REGISTRY[spec.key] = Handler(spec, fn, exclusive, kafka4)
        return fn

    return register


def registered() -> Mapping[int, Handler]:
    """What has registered so far (`broker.handlers.registry()` imports every handler first)."""
    return MappingProxyType(_REGISTRY)
