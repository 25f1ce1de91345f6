"""What a console is started with (the CLI and `serve --console` fill it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from logbroker._kafka.settings import KafkaSettings


@dataclass
class ConsoleOptions:
    """``bootstrap``/``security``: the cluster, as the client commands take them. When ``security`` is SASL
    every browser session logs in and acts as its own principal; its username and password, if any, are
    never used for a browser. ``local`` is the in-process broker (`serve --console`): metrics and
    share-partition locks read in process. ``metrics_url``: another logbroker's /metrics to chart."""

    bootstrap: str
    security: KafkaSettings | None = None
    listen: str = "127.0.0.1:9080"
    tls_cert: str | None = None
    tls_key: str | None = None
    metrics_url: str | None = None
    local: Any = None
    timeout: float = 10.0
    sample_seconds: float = 2.0

    @property
    def needs_login(self) -> bool:
        return self.security is not None and self.security.uses_sasl
