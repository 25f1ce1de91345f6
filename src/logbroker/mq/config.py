"""One configuration model for `logbroker.mq`, from a YAML file, ``LOGBROKER_MQ_*`` environment and overrides.

YAML (a top-level ``mq:`` key is optional)::

    mq:
      type: kafka                      # embedded (default) | kafka
      kafka:
        bootstrap_servers: broker1:9092,broker2:9092
        sasl: {mechanism: SCRAM-SHA-512, username: milvus, password: secret}
        ssl: {ca: /etc/ca.pem}
        producer: {linger.ms: 10}      # passed to confluent-kafka as is

Environment: ``LOGBROKER_MQ_TYPE=kafka``, ``LOGBROKER_MQ_KAFKA__BOOTSTRAP_SERVERS=...``; ``__`` nests, and
under ``producer``/``consumer`` a ``_`` becomes the ``.`` of librdkafka names (``..._PRODUCER__LINGER_MS``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator
from pydantic_settings import BaseSettings, EnvSettingsSource, SettingsConfigDict, YamlConfigSettingsSource

from logbroker._kafka import KafkaSettings, implied_protocol
from logbroker.mq.errors import MQConfigError

ENV_PREFIX = "LOGBROKER_MQ_"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SaslConfig(_Model):
    mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = "PLAIN"
    username: str | None = None
    password: SecretStr | None = None

    @model_validator(mode="after")
    def _both(self) -> SaslConfig:
        # Milvus panics when only one is set; we refuse it up front with the missing key's name.
        if self.username and not self.password:
            raise ValueError("password is required when username is set")
        if self.password and not self.username:
            raise ValueError("username is required when password is set")
        return self


class SslConfig(_Model):
    ca: Path | None = Field(None, description="CA bundle that signed the brokers' certificates")
    cert: Path | None = Field(None, description="client certificate (mutual TLS)")
    key: Path | None = Field(None, description="client private key (mutual TLS)")
    key_password: SecretStr | None = None
    check_hostname: bool = Field(True, description="the broker's certificate must name its host (Kafka's https)")

    @model_validator(mode="after")
    def _pair(self) -> SslConfig:
        if (self.cert is None) != (self.key is None):
            raise ValueError("cert and key must be given together")
        return self


class KafkaConfig(_Model):
    bootstrap_servers: str = Field(..., min_length=1)
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] | None = None
    sasl: SaslConfig | None = None
    ssl: SslConfig | None = None
    producer: dict[str, Any] = Field(default_factory=dict)
    consumer: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _sasl_complete(self) -> KafkaConfig:
        if self.sasl is not None and not (self.sasl.username and self.sasl.password):
            raise ValueError("sasl needs both username and password")
        return self


class EmbeddedConfig(_Model):
    data_dir: Path = Path("./logbroker-data")
    listen: str = "127.0.0.1:0"
    bootstrap: str | None = Field(None, description="attach to an already running logbroker instead of starting one")
    settings: dict[str, Any] = Field(default_factory=dict, description="BrokerSettings overrides")


class MQConfig(_Model):
    type: Literal["embedded", "kafka"] = "embedded"
    embedded: EmbeddedConfig = Field(default_factory=EmbeddedConfig)
    kafka: KafkaConfig | None = None
    auto_create_topics: bool = True
    num_partitions: int = Field(1, ge=1, description="partitions of topics this layer creates")
    ack_commit: Literal["message", "batch", "off"] = Field(
        "batch", description="what Consumer.ack does: commit now, commit every commit_interval_ms, nothing"
    )
    commit_interval_ms: int = Field(1000, ge=1)
    request_timeout_s: float = Field(30.0, gt=0)

    @model_validator(mode="after")
    def _kafka_needs_servers(self) -> MQConfig:
        if self.type == "kafka" and self.kafka is None:
            raise ValueError("type=kafka needs a kafka section with bootstrap_servers")
        return self

    def kafka_settings(self, bootstrap: str) -> KafkaSettings:
        """The shared layer's settings for ``bootstrap``. The protocol, when not named, follows from the
        sections given (sasl -> SASL_*, ssl -> *SSL); an embedded broker is plain loopback."""
        backoff = {"reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 5000}
        k = self.kafka if self.type == "kafka" else None
        if k is None:
            return KafkaSettings(bootstrap, extra=backoff)
        sasl, ssl = k.sasl, k.ssl
        return KafkaSettings(
            bootstrap,
            k.security_protocol or implied_protocol(sasl is not None, ssl is not None),
            sasl_mechanism=sasl.mechanism if sasl else "PLAIN",
            sasl_username=sasl.username if sasl else None,
            sasl_password=sasl.password.get_secret_value() if sasl and sasl.password else None,
            ssl_ca=str(ssl.ca) if ssl and ssl.ca else None,
            ssl_cert=str(ssl.cert) if ssl and ssl.cert else None,
            ssl_key=str(ssl.key) if ssl and ssl.key else None,
            ssl_key_password=ssl.key_password.get_secret_value() if ssl and ssl.key_password else None,
            ssl_check_hostname=ssl.check_hostname if ssl else True,
            extra=backoff,
        )


class _Sources(BaseSettings):
    """MQConfig's top-level keys as raw values and trees, read by pydantic-settings from ``LOGBROKER_MQ_*``
    (``__`` nests) and YAML; `MQConfig` validates the merged result, so every error names its key alike."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="ignore")

    type: str | None = None
    embedded: dict[str, Any] | None = None
    kafka: dict[str, Any] | None = None
    auto_create_topics: str | None = None
    num_partitions: str | None = None
    ack_commit: str | None = None
    commit_interval_ms: str | None = None
    request_timeout_s: str | None = None


class _Environment(EnvSettingsSource):
    """The environment source over a given mapping (tests and embedders pass their own)."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self._env = env
        super().__init__(_Sources)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {k.lower(): v for k, v in self._env.items()}


def _env_tree(env: Mapping[str, str]) -> dict[str, Any]:
    unknown = sorted(n[len(ENV_PREFIX) :].lower().split("__")[0] for n in env if n.startswith(ENV_PREFIX))
    if bad := [n for n in unknown if n not in _Sources.model_fields]:
        raise MQConfigError(f"mq.{bad[0]}: no such setting ({ENV_PREFIX}{bad[0].upper()})")
    tree = _Environment(env)()
    for section in ("producer", "consumer"):  # librdkafka's names have dots where variables have `_`
        kafka = tree.get("kafka")
        if isinstance(kafka, dict) and isinstance(kafka.get(section), dict):
            kafka[section] = {k.replace("_", "."): v for k, v in kafka[section].items()}
    return tree


def _yaml_tree(path: str | os.PathLike[str]) -> dict[str, Any]:
    if not Path(path).is_file():
        raise MQConfigError(f"cannot read mq config {path}: no such file")
    try:
        loaded = YamlConfigSettingsSource(_Sources, yaml_file=path)()
    except (OSError, yaml.YAMLError, ValueError) as exc:
        raise MQConfigError(f"cannot read mq config {path}: {exc}") from exc
    if not isinstance(loaded, dict):
        raise MQConfigError(f"{path}: expected a mapping at the top level")
    return loaded["mq"] if isinstance(loaded.get("mq"), dict) else loaded


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), dict) else v
    return out


def load_config(
    path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None, **overrides: Any
) -> MQConfig:
    """Defaults < YAML file < environment < keyword overrides; the first bad key is named in one error."""
    data = _yaml_tree(path) if path is not None else {}
    data = _merge(data, _env_tree(os.environ if env is None else env))
    data = _merge(data, overrides)
    return validate_config(data)


def validate_config(data: Mapping[str, Any] | MQConfig) -> MQConfig:
    if isinstance(data, MQConfig):
        return data
    try:
        return MQConfig.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(["mq", *(str(p) for p in err["loc"])])
        # Never echo the input: it may be a password.
        raise MQConfigError(f"{key}: {err['msg']}") from None
