"""Configuration of `logbroker.streams`: the Orleans Kafka provider's defaults, validation that names the key."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from logbroker._kafka import KafkaSettings, implied_protocol
from logbroker.addresses import parse_bootstrap
from logbroker.streams.errors import StreamsConfigError


class StreamsConfig(BaseModel):
    """One provider's settings. ``bootstrap`` points at the embedded broker or any Kafka cluster."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bootstrap: str = Field("127.0.0.1:9092", min_length=1,
                           description="host:port[,host:port] of the brokers; default: `logbroker serve`")  # fmt: skip
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT", description="left unset, what the sasl_*/ssl_* settings given imply (SASL_*, *SSL)"
    )
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = "PLAIN"
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_ca: Path | None = Field(None, description="PEM CA bundle that signed the brokers' certificates")
    ssl_cert: Path | None = Field(None, description="PEM client certificate (mutual TLS); may hold the key too")
    ssl_key: Path | None = Field(None, description="PEM private key of ssl_cert (default: inside ssl_cert)")
    ssl_key_password: SecretStr | None = None
    ssl_check_hostname: bool = Field(True, description="check the broker's certificate names its host (Kafka's https)")
    topic: str = Field(..., min_length=1, max_length=249, pattern=r"^[A-Za-z0-9._-]+$")
    consumer_group: str = Field(..., min_length=1)
    num_queues: int = Field(1, ge=1, le=10_000, description="partitions of the topic; one pulling agent each")
    create_topic: bool = True
    cache_size: int = Field(16_384, ge=1, description="messages held per partition cache")
    cache_timespan: float = Field(60.0, ge=0, description="seconds a message stays cached at least")
    produce_batch_size: int = Field(1000, ge=1, le=1_000_000, description="messages per produce batch at most")
    produce_wait_ms: int = Field(10, ge=0, le=900_000, description="linger before a produce batch is sent")
    acks: Literal[0, 1, -1] = 1
    max_bytes_per_fetch: int = Field(32_768, ge=1024, le=64 << 20, description="per partition, as per Orleans queue")
    receive_wait_ms: int = Field(100, ge=1, le=60_000, description="how long one fetch waits for data")
    init_with_last_offset: bool = True
    implicit_idle_timeout: float | None = Field(
        900.0, ge=0, le=7 * 86_400, allow_inf_nan=False,
        description="seconds an implicit subscription may sit idle before it is retired; None or 0: never",
    )  # fmt: skip
    session_timeout_ms: int = Field(10_000, ge=1000, le=3_600_000)
    metrics_port: int | None = Field(20490, ge=0, le=65535, description="Orleans' 20490; 0: any free; None: off")
    metrics_host: str = Field("127.0.0.1", min_length=1, description="address the metrics endpoint listens on")
    producer: dict[str, Any] = Field(default_factory=dict, description="extra librdkafka producer settings")
    consumer: dict[str, Any] = Field(default_factory=dict, description="extra librdkafka consumer settings")

    @field_validator("bootstrap")
    @classmethod
    def _host_ports(cls, value: str) -> str:
        """Caught here, an unparsable list is one clear error instead of librdkafka retrying in the background."""
        parse_bootstrap(value, "bootstrap")
        return value

    @model_validator(mode="after")
    def _credentials(self) -> StreamsConfig:
        if (self.sasl_username is None) != (self.sasl_password is None):
            raise ValueError("sasl_username and sasl_password go together")
        if self.security_protocol.startswith("SASL") and self.sasl_username is None:
            raise ValueError(f"security_protocol {self.security_protocol} needs sasl_username and sasl_password")
        if self.ssl_key is not None and self.ssl_cert is None:
            raise ValueError("ssl_key needs ssl_cert")
        return self

    def kafka_settings(self) -> KafkaSettings:
        """The shared layer's connection settings. The protocol, when not named, follows from what is given
        (credentials: SASL_*, a CA or client certificate: *SSL), as in `logbroker.mq`."""
        protocol = self.security_protocol
        if "security_protocol" not in self.model_fields_set:
            protocol = implied_protocol(self.sasl_username is not None, bool(self.ssl_ca or self.ssl_cert))
        secret = lambda v: v.get_secret_value() if v is not None else None  # noqa: E731
        return KafkaSettings(
            self.bootstrap,
            protocol,
            sasl_mechanism=self.sasl_mechanism,
            sasl_username=self.sasl_username,
            sasl_password=secret(self.sasl_password),
            ssl_ca=str(self.ssl_ca) if self.ssl_ca else None,
            ssl_cert=str(self.ssl_cert) if self.ssl_cert else None,
            ssl_key=str(self.ssl_key or self.ssl_cert) if self.ssl_cert else None,
            ssl_key_password=secret(self.ssl_key_password),
            ssl_check_hostname=self.ssl_check_hostname,
        )

    @classmethod
    def load(cls, data: Mapping[str, Any] | StreamsConfig | None = None, **overrides: Any) -> StreamsConfig:
        """Validate into one StreamsConfigError naming the first bad key, so callers fix one thing at a time."""
        if isinstance(data, StreamsConfig) and not overrides:
            return data
        # exclude_unset: a value left at its default stays "not chosen" (metrics_port treats that more leniently)
        raw = dict(data.model_dump(exclude_unset=True) if isinstance(data, StreamsConfig) else (data or {}))
        raw = dict(raw.get("streams", raw))
        raw.update(overrides)
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            err = exc.errors()[0]
            key = ".".join(str(p) for p in ("streams", *err["loc"]))
            raise StreamsConfigError(f"{key}: {err['msg']} (got {err.get('input')!r})") from None
