"""Configuration of `logbroker.streams`: the Orleans Kafka provider's defaults, validation that names the key."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from logbroker.streams.errors import StreamsConfigError


class StreamsConfig(BaseModel):
    """One provider's settings. ``bootstrap`` points at the embedded broker or any Kafka cluster."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bootstrap: str = Field(..., min_length=1, description="host:port[,host:port] of the brokers")
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    topic: str = Field(..., min_length=1, max_length=249, pattern=r"^[A-Za-z0-9._-]+$")
    consumer_group: str = Field(..., min_length=1)
    num_queues: int = Field(1, ge=1, le=10_000, description="partitions of the topic; one pulling agent each")
    create_topic: bool = True
    cache_size: int = Field(16_384, ge=1, description="messages held per partition cache")
    cache_timespan: float = Field(60.0, ge=0, description="seconds a message stays cached at least")
    produce_batch_size: int = Field(1000, ge=1)
    produce_wait_ms: int = Field(10, ge=0, le=900_000, description="linger before a produce batch is sent")
    acks: Literal[0, 1, -1] = 1
    max_bytes_per_fetch: int = Field(32_768, ge=1024)
    receive_wait_ms: int = Field(100, ge=1, le=60_000, description="how long one fetch waits for data")
    init_with_last_offset: bool = True
    session_timeout_ms: int = Field(10_000, ge=1000)
    metrics_port: int | None = Field(None, ge=0, le=65535, description="None: no HTTP endpoint; 0: any free port")
    producer: dict[str, Any] = Field(default_factory=dict, description="extra librdkafka producer settings")
    consumer: dict[str, Any] = Field(default_factory=dict, description="extra librdkafka consumer settings")

    @model_validator(mode="after")
    def _fetch_fits(self) -> StreamsConfig:
        if self.max_bytes_per_fetch < 1024:
            raise ValueError("max_bytes_per_fetch must be at least 1024")
        return self

    @classmethod
    def load(cls, data: Mapping[str, Any] | StreamsConfig | None = None, **overrides: Any) -> StreamsConfig:
        """Validate into one StreamsConfigError naming the first bad key, so callers fix one thing at a time."""
        if isinstance(data, StreamsConfig) and not overrides:
            return data
        raw = dict(data.model_dump() if isinstance(data, StreamsConfig) else (data or {}))
        raw = dict(raw.get("streams", raw))
        raw.update(overrides)
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            err = exc.errors()[0]
            key = ".".join(str(p) for p in ("streams", *err["loc"]))
            raise StreamsConfigError(f"{key}: {err['msg']} (got {err.get('input')!r})") from None
