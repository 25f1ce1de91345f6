"""Connection and security settings, turned into librdkafka configuration in one place.

Each face keeps its own option names (``mq.kafka.sasl``, oslo's ``ssl_cafile``, ``streams.security_protocol``)
and maps them onto `KafkaSettings`; `librdkafka_config` is then the only code that knows librdkafka's
property names, so the faces cannot disagree on what a setting means.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
SECURITY_PROTOCOLS: tuple[str, ...] = get_args(SecurityProtocol)
SASL_MECHANISMS: tuple[str, ...] = get_args(SaslMechanism)


def implied_protocol(sasl: bool, ssl: bool) -> SecurityProtocol:
    """The protocol that credentials and/or TLS settings imply when none is named (mq's rule)."""
    if sasl:
        return "SASL_SSL" if ssl else "SASL_PLAINTEXT"
    return "SSL" if ssl else "PLAINTEXT"


@dataclass(frozen=True)
class KafkaSettings:
    """Where the brokers are and how to authenticate: what every client of one face shares.

    SASL settings apply only with a ``SASL_*`` protocol and TLS files only with ``*SSL``, so a face may
    fill them unconditionally. Empty strings count as unset (oslo's options use ``""``). ``extra`` is
    added last: a face's own tuning (reconnect backoff, connect timeout) or a user's pass-through.
    """

    bootstrap_servers: str
    security_protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism = "PLAIN"
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_ca: str | None = None
    ssl_cert: str | None = None
    ssl_key: str | None = None
    ssl_key_password: str | None = field(default=None, repr=False)
    client_id: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.bootstrap_servers:
            raise ValueError("bootstrap_servers is empty")
        if self.security_protocol not in SECURITY_PROTOCOLS:
            raise ValueError(
                f"security_protocol must be one of {', '.join(SECURITY_PROTOCOLS)}, not {self.security_protocol!r}"
            )
        if self.sasl_mechanism not in SASL_MECHANISMS:
            raise ValueError(f"sasl_mechanism must be one of {', '.join(SASL_MECHANISMS)}, not {self.sasl_mechanism!r}")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol.startswith("SASL")

    @property
    def uses_ssl(self) -> bool:
        return self.security_protocol.endswith("SSL")


def librdkafka_config(settings: KafkaSettings, **overrides: Any) -> dict[str, Any]:
    """The librdkafka properties of ``settings`` (plus ``overrides``, e.g. ``group.id``), for any client type."""
    s = settings
    conf: dict[str, Any] = {"bootstrap.servers": s.bootstrap_servers, "security.protocol": s.security_protocol}
    if s.client_id:
        conf["client.id"] = s.client_id
    if s.uses_sasl:
        conf["sasl.mechanisms"] = s.sasl_mechanism
        if s.sasl_username is not None:
            conf["sasl.username"] = s.sasl_username
            conf["sasl.password"] = s.sasl_password or ""
    if s.uses_ssl:
        for name, value in (("ssl.ca.location", s.ssl_ca), ("ssl.certificate.location", s.ssl_cert),
                            ("ssl.key.location", s.ssl_key), ("ssl.key.password", s.ssl_key_password)):  # fmt: skip
            if value:
                conf[name] = str(value)
    conf.update(s.extra)
    conf.update(overrides)
    return conf


def as_config(target: KafkaSettings | Mapping[str, Any]) -> dict[str, Any]:
    """Accept settings or a ready librdkafka dict (the layer's functions take either)."""
    return librdkafka_config(target) if isinstance(target, KafkaSettings) else dict(target)
