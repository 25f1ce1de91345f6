"""One module per Kafka API. Each declares what it serves with `@handles(ApiKey.X, min, max)` on a
function `(ctx: BrokerContext, request) -> response | awaitable | NoResponse`; `registry()` imports every
module here, so a new API is one new file. Modules whose name starts with `_` are helpers, not APIs."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from types import MappingProxyType

from logbroker.protocol import ApiSpec

from ..dispatch import Handler, registered


def registry() -> Mapping[int, Handler]:
    """Every handler of this package, by API key."""
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")
    return registered()


def served_apis(versions: str = "all") -> Mapping[int, ApiSpec]:
    """The version table this broker advertises in ApiVersions and accepts requests in: every version the
    handlers serve, or (``versions="kafka4"``) only what Kafka 4 still serves."""
    return MappingProxyType({key: h.served(versions) for key, h in sorted(registry().items())})
