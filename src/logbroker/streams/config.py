"""Configuration of `logbroker.streams`: the Orleans Kafka provider's defaults, validation that names the key."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from logbroker._kafka import KafkaSettings
from logbroker.streams.errors import StreamsConfigError


class StreamsConfig(BaseModel):
    """One provider's settings. ``bootstrap`` points at the embedded broker or any Kafka cluster."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bootstrap: str = Field("127.0.0.1:9092", min_length=1,
                           description="host:port[,host:port] of the brokers; default: `logbroker serve`")  # fmt: skip
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
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
        for part in value.split(","):
            host, sep, port = part.strip().rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"expected host:port[,host:port...], got {part.strip()!r}")
        return value

    def kafka_settings(self) -> KafkaSettings:
        """The shared layer's connection settings (SASL/TLS details go through ``producer``/``consumer``)."""
        return KafkaSettings(self.bootstrap, self.security_protocol)

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
