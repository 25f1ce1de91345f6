"""The catalogue of Kafka APIs the codec knows: message types by API key, and version ranges.

The codec is kafka-python 3's schema-driven classes (Kafka's own JSON schemas, generated per version);
KIP-848 messages come from our schema files (`kip848`). Every other layer reaches message types through
`api(key)` and never imports kafka-python itself, so the codec can be replaced behind this module.
"""

from __future__ import annotations

import importlib
import warnings
from dataclasses import dataclass
from enum import IntEnum
from functools import cache
from typing import Any

# kafka-python reads its schemas with importlib.resources' legacy calls, one DeprecationWarning per schema:
# hundreds in every program (and every user's pytest run) that imports the codec. Not ours to act on.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.api_key import ApiKey as _CodecApiKey
    from kafka.protocol.api_message import ApiMessage

    from . import kip848  # its messages load their schemas the same way

__all__ = ["Api", "ApiKey", "ApiSpec", "UnknownApi", "api"]

# Kafka's API keys: the codec's, and the ones newer than it whose schemas are ours (kip848).
ApiKey = IntEnum(  # type: ignore[misc]
    "ApiKey",
    [(k.name, int(k)) for k in _CodecApiKey]
    + [("StreamsGroupTopologyDescriptionUpdate", 93), ("UnregisterController", 94)],
)

# kafka-python modules whose ApiMessage classes make up the catalogue (plus our own kip848 messages).
_MODULES = (
    "kafka.protocol.admin",
    "kafka.protocol.consumer",
    "kafka.protocol.metadata",
    "kafka.protocol.producer",
    "kafka.protocol.sasl",
)


class UnknownApi(LookupError):
    """No request/response schema is known for an API key."""


@dataclass(frozen=True, slots=True)
class Api:
    """One API's request and response message classes (`Api.response(...)` builds a response)."""

    key: int
    name: str
    request: Any
    response: Any

    @property
    def codec_max_version(self) -> int:
        """The newest version the schemas describe (a server or client may serve fewer)."""
        return int(min(self.request.max_version, self.response.max_version))


@dataclass(frozen=True, slots=True)
class ApiSpec:
    """An API in the version range one side serves or uses."""

    api: Api
    min_version: int
    max_version: int
    # Versions advertised for old clients' feature probes only: a request in one closes the connection
    # (librdkafka < 2.11 enables compression only when Produce v0 is in range; Kafka 4 does the same).
    rejected_below: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.min_version <= self.max_version <= self.api.codec_max_version:
            raise ValueError(
                f"{self.api.name}: versions {self.min_version}-{self.max_version} are outside what the codec "
                f"knows (0-{self.api.codec_max_version})"
            )

    @property
    def key(self) -> int:
        return self.api.key

    @property
    def name(self) -> str:
        return self.api.request.name

    @property
    def request(self) -> Any:
        return self.api.request

    @property
    def response(self) -> Any:
        return self.api.response


@cache
def _catalogue() -> dict[int, Api]:
    pairs: dict[int, dict[str, Any]] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        modules = [importlib.import_module(m) for m in _MODULES] + [kip848]
    for module in modules:
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, ApiMessage) and getattr(obj, "_json", None) is not None:
                kind = "request" if obj.is_request() else "response"
                pairs.setdefault(obj.API_KEY, {})[kind] = obj
    return {
        key: Api(key, p["request"].name.removesuffix("Request"), p["request"], p["response"])
        for key, p in pairs.items()
        if "request" in p and "response" in p
    }


def api(key: int) -> Api:
    """The message types of API `key`; raises UnknownApi when no schema for it is known."""
    found = _catalogue().get(int(key))
    if found is None:
        raise UnknownApi(f"no schema is known for API key {int(key)}")
    return found
