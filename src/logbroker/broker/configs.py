"""The broker's configs as Kafka layers them, and the dynamic ones that change while it runs (KIP-226).

A broker config's value comes from the first of: a dynamic per-broker value, a dynamic cluster-wide default
(resource name ""), the static settings (a file, the environment or flags; only what was set explicitly),
Kafka's default. The dynamic values are kept in `__configs/broker.json`, replaced atomically and fsync'ed
before an alteration is acknowledged, and applied at once: the log defaults of every topic without an
override of its own, the cleaner's settings, connection limits.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from logbroker.config import BrokerSettings, format_validation_error
from logbroker.protocol.errors import ErrorCode as E
from logbroker.storage.configs import (
    BROKER_SYNONYMS,
    LONG_MAX,
    TOPIC_CONFIGS,
    ConfigError,
    ConfigType,
    TopicConfig,
    apply,
    parse_typed,
    render,
)
from logbroker.storage.files import read_json_object, write_atomic
from logbroker.storage.log import LogConfig

from .loggers import config_values

log = logging.getLogger("logbroker.broker")

# DescribeConfigs' config_source.
DYNAMIC_TOPIC, DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT = 1, 2, 3, 4, 5

CONFIG_FILE = "broker.json"


@dataclass(frozen=True)
class BrokerConfig:
    """A broker config: its Kafka type and default, the settings field behind it, whether it may change live."""

    name: str
    type: ConfigType
    default: str | None
    setting: str | None = None  # BrokerSettings field
    dynamic: bool = False
    scale: int = 1  # the setting's unit per one of this config's (log.retention.hours -> ms)


def _catalogue() -> dict[str, BrokerConfig]:
    T = ConfigType
    # Log defaults: the broker synonyms of the topic configs. Kafka's defaults are per synonym (the hours form
    # carries the default, the ms form none); the *.hours/*.minutes forms are static only in Kafka.
    settings_of = {
        "log.retention.ms": "retention_ms",
        "log.retention.bytes": "retention_bytes",
        "log.segment.bytes": "segment_bytes",
        "log.roll.ms": "segment_ms",
        "message.max.bytes": "message_max_bytes",
        "compression.type": "compression_type",
        "compression.gzip.level": "compression_gzip_level",
        "compression.lz4.level": "compression_lz4_level",
        "compression.zstd.level": "compression_zstd_level",
        "log.message.timestamp.before.max.ms": "message_timestamp_before_max_ms",
        "log.message.timestamp.after.max.ms": "message_timestamp_after_max_ms",
        "log.message.downconversion.enable": "log_message_downconversion_enable",
        "log.cleanup.policy": "log_cleanup_policy",
        "log.cleaner.delete.retention.ms": "log_cleaner_delete_retention_ms",
        "log.cleaner.min.compaction.lag.ms": "log_cleaner_min_compaction_lag_ms",
        "log.cleaner.max.compaction.lag.ms": "log_cleaner_max_compaction_lag_ms",
        "log.cleaner.min.cleanable.ratio": "log_cleaner_min_cleanable_ratio",
    }
    own_defaults = {
        "log.retention.ms": None,
        "log.retention.minutes": None,
        "log.retention.hours": "168",
        "log.roll.ms": None,
        "log.roll.hours": "168",
        "log.roll.jitter.ms": None,
        "log.roll.jitter.hours": "0",
        "log.flush.interval.ms": None,
    }
    static_only = {"log.retention.minutes", "log.retention.hours", "log.roll.hours", "log.roll.jitter.hours"}
    out: dict[str, BrokerConfig] = {}
    for name, (topic, scale) in BROKER_SYNONYMS.items():
        default = own_defaults.get(name, topic.default)
        out[name] = BrokerConfig(name, topic.type, default, settings_of.get(name), name not in static_only, scale)
    for c in (
        BrokerConfig("log.cleaner.enable", T.BOOLEAN, "true", "log_cleaner_enable"),
        BrokerConfig("log.cleaner.threads", T.INT, "1", "log_cleaner_threads", True),
        BrokerConfig("log.cleaner.backoff.ms", T.LONG, "15000", "log_cleaner_backoff_ms", True),
        BrokerConfig("log.cleaner.dedupe.buffer.size", T.LONG, "134217728", "log_cleaner_dedupe_buffer_size", True),
        BrokerConfig("log.cleaner.io.max.bytes.per.second", T.DOUBLE, "1.7976931348623157E308",
                     "log_cleaner_io_max_bytes_per_second", True),
        BrokerConfig("log.cleaner.io.buffer.size", T.INT, "524288", None, True),
        BrokerConfig("log.cleaner.io.buffer.load.factor", T.DOUBLE, "0.9", None, True),
        BrokerConfig("node.id", T.INT, None, "node_id"),
        BrokerConfig("broker.id", T.INT, "-1", "node_id"),
        BrokerConfig("log.dirs", T.STRING, None, "data_dir"),
        BrokerConfig("log.dir", T.STRING, "/tmp/kafka-logs"),
        BrokerConfig("listeners", T.STRING, "PLAINTEXT://:9092", "listen"),
        BrokerConfig("advertised.listeners", T.STRING, None, "advertised_listener"),
        BrokerConfig("listener.security.protocol.map", T.STRING,
                     "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT",
                     "listener_security_protocol_map"),
        BrokerConfig("ssl.keystore.location", T.STRING, None, "ssl_keystore_location"),
        BrokerConfig("ssl.keystore.type", T.STRING, "JKS", "ssl_keystore_type"),
        BrokerConfig("ssl.truststore.location", T.STRING, None, "ssl_truststore_location"),
        BrokerConfig("ssl.truststore.type", T.STRING, "JKS", "ssl_truststore_type"),
        BrokerConfig("ssl.client.auth", T.STRING, "none", "ssl_client_auth"),
        BrokerConfig("ssl.principal.mapping.rules", T.STRING, "DEFAULT", "ssl_principal_mapping_rules"),
        BrokerConfig("ssl.enabled.protocols", T.LIST, "TLSv1.2,TLSv1.3", "ssl_enabled_protocols"),
        BrokerConfig("sasl.enabled.mechanisms", T.LIST, "GSSAPI", "sasl_enabled_mechanisms"),
        BrokerConfig("sasl.server.max.receive.size", T.INT, "524288", "sasl_server_max_receive_size"),
        BrokerConfig("connections.max.reauth.ms", T.LONG, "0", "connections_max_reauth_ms"),
        BrokerConfig("connection.failed.authentication.delay.ms", T.INT, "100",
                     "connection_failed_authentication_delay_ms"),
        BrokerConfig("authorizer.class.name", T.STRING, "", "authorizer_class_name"),
        BrokerConfig("super.users", T.STRING, None, "super_users"),
        BrokerConfig("allow.everyone.if.no.acl.found", T.BOOLEAN, "false", "allow_everyone_if_no_acl_found"),
        BrokerConfig("num.partitions", T.INT, "1", "num_partitions"),
        BrokerConfig("offsets.topic.num.partitions", T.INT, "50", "offsets_topic_num_partitions"),
        BrokerConfig("max.request.partition.size.limit", T.INT, "2000", "max_request_partition_size_limit"),
        BrokerConfig("transaction.state.log.num.partitions", T.INT, "50", "transaction_state_log_num_partitions"),
        BrokerConfig("transaction.partition.verification.enable", T.BOOLEAN, "true",
                     "transaction_partition_verification_enable", True),
        BrokerConfig("auto.create.topics.enable", T.BOOLEAN, "true", "auto_create_topics"),
        BrokerConfig("delete.topic.enable", T.BOOLEAN, "true", "delete_topic_enable"),
        BrokerConfig("socket.request.max.bytes", T.INT, "104857600", "socket_request_max_bytes"),
        BrokerConfig("log.retention.check.interval.ms", T.LONG, "300000", "retention_check_interval_ms"),
        BrokerConfig("connections.max.idle.ms", T.LONG, "600000", "connections_max_idle_ms"),
        BrokerConfig("max.connections", T.INT, str((1 << 31) - 1), "max_connections", True),
        BrokerConfig("max.connections.per.ip", T.INT, str((1 << 31) - 1), "max_connections_per_ip", True),
        BrokerConfig("max.connections.per.ip.overrides", T.STRING, "", "max_connections_per_ip_overrides", True),
        BrokerConfig("fetch.max.bytes", T.INT, str(55 << 20), "fetch_max_bytes"),
        BrokerConfig("max.incremental.fetch.session.cache.slots", T.INT, "1000",
                     "max_incremental_fetch_session_cache_slots"),
        BrokerConfig("default.replication.factor", T.INT, "1"),
        BrokerConfig("offsets.topic.replication.factor", T.SHORT, "3"),
        BrokerConfig("group.initial.rebalance.delay.ms", T.INT, "3000", "group_initial_rebalance_delay_ms"),
        BrokerConfig("group.min.session.timeout.ms", T.INT, "6000", "group_min_session_timeout_ms"),
        BrokerConfig("group.max.session.timeout.ms", T.INT, "1800000", "group_max_session_timeout_ms"),
        BrokerConfig("group.max.size", T.INT, str((1 << 31) - 1), "group_max_size"),
        BrokerConfig("group.consumer.max.size", T.INT, str((1 << 31) - 1), "group_consumer_max_size"),
        BrokerConfig("group.consumer.session.timeout.ms", T.INT, "45000", "group_consumer_session_timeout_ms"),
        BrokerConfig("group.consumer.heartbeat.interval.ms", T.INT, "5000", "group_consumer_heartbeat_interval_ms"),
        BrokerConfig("group.consumer.migration.policy", T.STRING, "bidirectional", "group_consumer_migration_policy"),
        BrokerConfig("group.streams.session.timeout.ms", T.INT, "45000", "group_streams_session_timeout_ms"),
        BrokerConfig("group.streams.heartbeat.interval.ms", T.INT, "5000", "group_streams_heartbeat_interval_ms"),
        BrokerConfig("group.streams.max.size", T.INT, str((1 << 31) - 1), "group_streams_max_size"),
        BrokerConfig("group.streams.num.standby.replicas", T.INT, "0", "group_streams_num_standby_replicas"),
        BrokerConfig("group.streams.initial.rebalance.delay.ms", T.INT, "3000",
                     "group_streams_initial_rebalance_delay_ms"),
        BrokerConfig("group.streams.assignment.interval.ms", T.INT, "1000", "group_streams_assignment_interval_ms"),
        BrokerConfig("group.share.session.timeout.ms", T.INT, "45000", "group_share_session_timeout_ms"),
        BrokerConfig("group.share.heartbeat.interval.ms", T.INT, "5000", "group_share_heartbeat_interval_ms"),
        BrokerConfig("group.share.max.size", T.INT, "200", "group_share_max_size"),
        BrokerConfig("group.share.record.lock.duration.ms", T.INT, "30000", "group_share_record_lock_duration_ms"),
        BrokerConfig("group.share.delivery.count.limit", T.INT, "5", "group_share_delivery_count_limit"),
        BrokerConfig("group.share.partition.max.record.locks", T.INT, "2000",
                     "group_share_partition_max_record_locks"),
        BrokerConfig("offsets.retention.minutes", T.INT, "10080", "offsets_retention_minutes"),
        BrokerConfig("offsets.retention.check.interval.ms", T.LONG, "600000", "offsets_retention_check_interval_ms"),
        BrokerConfig("producer.id.expiration.ms", T.INT, "86400000", "producer_id_expiration_ms", True),
        BrokerConfig("producer.id.expiration.check.interval.ms", T.INT, "600000",
                     "producer_id_expiration_check_interval_ms"),
        BrokerConfig("logbroker.fsync", T.STRING, "always", "fsync"),
        BrokerConfig("logbroker.fsync.interval.ms", T.LONG, "1000", "fsync_interval_ms"),
    ):  # fmt: skip
        out[c.name] = c
    # Every other broker config Kafka 4.4 lists (measured: kafka_broker_configs.json), with Kafka's default, so
    # its tools see the whole set; logbroker honours none of these, so none can change while it runs.
    for name, kafka in KAFKA_BROKER_CONFIGS.items():
        if name not in out:
            out[name] = BrokerConfig(name, ConfigType(kafka["type"]), kafka["default"])
    return out


def _kafka_broker_configs() -> dict[str, dict[str, Any]]:
    """Kafka 4.4's broker configs: name -> type, default, dynamic, sensitive (measured by
    `python -m logbroker_devtools.catalogue.kafka_broker_configs`)."""
    with resources.files("logbroker.broker").joinpath("kafka_broker_configs.json").open("rb") as f:
        table: dict[str, dict[str, Any]] = json.load(f)
    return table


KAFKA_BROKER_CONFIGS = _kafka_broker_configs()
BROKER_CONFIGS = _catalogue()


@dataclass(frozen=True)
class Entry:
    """One DescribeConfigs row."""

    name: str
    value: str | None
    source: int
    read_only: bool
    type: ConfigType
    synonyms: tuple[tuple[str, str | None, int], ...]
    documentation: str | None = None
    sensitive: bool = False  # value (and its synonyms' values) withheld: passwords and names Kafka does not know


class BrokerConfigs:
    """Static settings plus the dynamic layers; the only writer of `__configs/broker.json`."""

    def __init__(self, settings: BrokerSettings, data_dir: Path) -> None:
        self.settings = settings
        self.static = settings.model_copy()  # what the process was started with, before dynamic values
        self.node = str(settings.node_id)
        self.dir = Path(data_dir) / "__configs"
        self.dynamic: dict[str, dict[str, str]] = {"": {}, self.node: {}}  # "" = cluster-wide default
        self._load()

    # ------------------------------------------------------------------ persistence

    def _load(self) -> None:
        # A damaged file must not stop the broker: its static configs still hold.
        path = self.dir / CONFIG_FILE
        raw = read_json_object(path, "dynamic broker configs are ignored")
        if raw is None:
            return
        for scope in ("", self.node):
            values = raw.get(scope, {})
            if isinstance(values, dict):
                self.dynamic[scope] = {str(k): str(v) for k, v in values.items() if isinstance(v, str)}
        try:
            self._apply(self.dynamic)
        except ConfigError as exc:
            log.error("dynamic broker configs in %s are not applied: %s", path, exc)
            self.dynamic = {"": {}, self.node: {}}
            return
        for scope, values in self.dynamic.items():
            if values:
                which = f"broker {scope}" if scope else "cluster-wide default"
                log.info("dynamic broker configs in force (%s): %s", which, config_values(values))

    def _save(self, dynamic: Mapping[str, Mapping[str, str]]) -> None:
        self.dir.mkdir(exist_ok=True)
        write_atomic(self.dir / CONFIG_FILE, json.dumps(dynamic, sort_keys=True).encode())

    # ------------------------------------------------------------------ values

    def _setting(self, name: str) -> str | None:
        spec = BROKER_CONFIGS.get(name)
        if spec is None or spec.setting is None:
            return None
        if name in ("listeners", "advertised.listeners"):
            # Kafka's form, whether the listeners came from `listeners` or from `listen`.
            found = self.static.listener_list()
            if name == "listeners":
                return ",".join(lst.url() for lst in found)
            return ",".join(f"{lst.name}://{lst.advertised_host}:{lst.advertised_port}" for lst in found)
        value = getattr(self.static, spec.setting)
        if value is None:
            return None
        if isinstance(value, Path):
            return str(value)
        return render(getattr(value, "value", value))

    def levels(self, name: str, dynamic: Mapping[str, Mapping[str, str]] | None = None) -> Iterator[tuple[str, int]]:
        """(value, source) of `name` at each layer that has one, highest first."""
        dyn = self.dynamic if dynamic is None else dynamic
        if (v := dyn.get(self.node, {}).get(name)) is not None:
            yield v, DYNAMIC_BROKER
        if (v := dyn.get("", {}).get(name)) is not None:
            yield v, DYNAMIC_DEFAULT
        spec = BROKER_CONFIGS.get(name)
        if spec is None:
            return
        if (v := self._static(name, spec)) is not None:
            yield v, STATIC
        # The default is a layer of its own, listed under a static value too (Kafka's staticDefaultConfigs).
        if (v := self._default_of(name, spec)) is not None:
            yield v, DEFAULT

    def _static(self, name: str, spec: BrokerConfig) -> str | None:
        """What the broker was started with under this name (a flag, the environment or the config file).
        A setting the file gave under another name of its synonym group (log.retention.hours for
        retention_ms) is reported under that name, in its unit."""
        given = self.static._property_names  # setting -> the file's property name, where they differ
        if spec.setting is None:
            hit = BROKER_SYNONYMS.get(name)
            setting = next((s for s, key in given.items() if key == name), None)
            if hit is None or setting is None or setting not in self.static.model_fields_set:
                return None
            millis = getattr(self.static, setting)
            return str(millis // spec.scale) if isinstance(millis, int) and millis % spec.scale == 0 else None
        if spec.setting not in self.static.model_fields_set:
            return None
        origin = given.get(spec.setting)
        if origin is not None and origin != name and origin in BROKER_CONFIGS:
            other = BROKER_CONFIGS[origin]
            if other.setting is None and self._static(origin, other) is not None:
                return None  # reported under the file's name instead
        return self._setting(name)

    def _default_of(self, name: str, spec: BrokerConfig) -> str | None:
        """A config's default: Kafka's for the log defaults and what has no setting behind it (the hours form
        carries retention's); else logbroker's own default of the setting, which is what is in force when
        nothing is set (listeners on 127.0.0.1). None: no default (advertised.listeners falls back to the
        listeners, and Kafka lists that as unset)."""
        if name in BROKER_SYNONYMS or spec.setting is None:
            return spec.default
        if name == "advertised.listeners":
            return None
        if name == "listeners":
            return f"PLAINTEXT://{BrokerSettings.model_fields['listen'].default}"
        field = BrokerSettings.model_fields[spec.setting]
        default = field.get_default(call_default_factory=True)
        if default is None:
            return None
        if isinstance(default, Path):
            return str(default)
        return render(getattr(default, "value", default))

    def synonym_list(self, name: str, dynamic: Mapping[str, Mapping[str, str]] | None = None
                     ) -> tuple[tuple[str, str | None, int], ...]:  # fmt: skip
        """Kafka's synonyms of a broker config (ConfigHelper.configSynonyms): its whole synonym group
        (log.retention.ms, .minutes, .hours) layer by layer, dynamic per broker first and defaults last, then
        everything before the first entry of `name` itself dropped (so log.retention.ms set nowhere lists
        nothing, even with log.retention.hours in the static configs)."""
        hit = BROKER_SYNONYMS.get(name)
        group = hit[0].synonyms if hit is not None else (name,)
        layered = {n: list(self.levels(n, dynamic)) for n in group}
        out = [(n, v, s) for src in (DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT) for n in group
               for v, s in layered[n] if s == src]  # fmt: skip
        while out and out[0][0] != name:
            out.pop(0)
        return tuple(out)

    def topic_default(
        self, topic: TopicConfig, dynamic: Mapping[str, Mapping[str, str]] | None = None
    ) -> tuple[str, int, list[tuple[str, str | None, int]]]:
        """A topic config's broker-level value in the topic's unit (the first synonym set at any layer wins:
        log.retention.ms over .minutes over .hours), and Kafka's source and synonyms for it: those of its
        first broker synonym (`synonym_list`), DEFAULT with none when that one is set nowhere."""
        value: str | None = None
        for syn in topic.synonyms:
            for v, _source in self.levels(syn, dynamic):
                value = _scaled(v, topic.type, topic.scale.get(syn, 1))
                break
            if value is not None:
                break
        synonyms = list(self.synonym_list(topic.synonyms[0], dynamic)) if topic.synonyms else []
        source = synonyms[0][2] if synonyms else DEFAULT
        return (topic.default or "" if value is None else value), source, synonyms

    def log_defaults(self, dynamic: Mapping[str, Mapping[str, str]] | None = None) -> LogConfig:
        """The LogConfig of a topic without overrides, from the broker layers."""
        values = {f: getattr(LogConfig(), f) for f in LogConfig.__dataclass_fields__}
        for topic in TOPIC_CONFIGS.values():
            raw, _source, _ = self.topic_default(topic, dynamic)
            try:
                apply(values, topic, parse_typed(raw, topic.type))
            except ValueError:  # a damaged dynamic value: the next layer's is not known here; keep Kafka's default
                apply(values, topic, parse_typed(topic.default or "", topic.type))
        return LogConfig(**values)

    # ------------------------------------------------------------------ describe

    def broker_entries(self, scope: str) -> list[Entry]:
        """A broker's configs (scope = its id) or the cluster-wide dynamic defaults (scope "")."""
        if scope == "":
            return [
                Entry(k, v, DYNAMIC_DEFAULT, False, _type_of(k), ((k, v, DYNAMIC_DEFAULT),))
                for k, v in sorted(self.dynamic[""].items())
            ]
        out = []
        names = list(BROKER_CONFIGS) + sorted(k for layer in self.dynamic.values() for k in layer
                                              if k not in BROKER_CONFIGS)  # fmt: skip
        for name in dict.fromkeys(names):
            spec = BROKER_CONFIGS.get(name)
            if spec is None:
                # A name Kafka does not know (a plugin's): its type is unknown, so its value is withheld.
                synonyms = tuple((n, None, s) for n, _v, s in self.synonym_list(name))
                out.append(Entry(name, None, synonyms[0][2] if synonyms else DEFAULT, True, ConfigType.UNKNOWN,
                                 synonyms, sensitive=True))  # fmt: skip
                continue
            synonyms = self.synonym_list(name)
            value, source = (synonyms[0][1], synonyms[0][2]) if synonyms else (None, DEFAULT)
            out.append(Entry(name, value, source, not spec.dynamic, _type_of(name), synonyms))
        return out

    # ------------------------------------------------------------------ alter

    def check_scope(self, resource_name: str) -> str:
        """The dynamic layer a broker resource names, or ConfigError(INVALID_REQUEST) as Kafka answers."""
        if resource_name == "":
            return ""
        try:
            node = int(resource_name)
        except ValueError:
            raise ConfigError(f"Node id must be an integer, but it is: {resource_name}", E.INVALID_REQUEST) from None
        if str(node) != self.node:
            raise ConfigError(
                f"Unexpected broker id, expected {self.node}, but received {resource_name}", E.INVALID_REQUEST
            )
        return self.node

    def alter(self, scope: str, values: Mapping[str, str], validate_only: bool) -> None:
        """Replace the dynamic configs of `scope` with `values`: checked whole, persisted, then applied."""
        read_only = sorted(k for k in values if k in BROKER_CONFIGS and not BROKER_CONFIGS[k].dynamic)
        if read_only:
            raise ConfigError(f"Cannot update these configs dynamically: [{', '.join(read_only)}]", E.INVALID_REQUEST)
        for k, raw in values.items():
            spec = BROKER_CONFIGS.get(k)
            if spec is not None:
                try:
                    parsed = parse_typed(raw, spec.type)
                except ValueError as exc:
                    msg = f"Invalid value {raw} for configuration {k}: {exc}"
                    raise ConfigError(msg, E.INVALID_REQUEST) from None
                hit = BROKER_SYNONYMS.get(k)
                why = hit[0].check(parsed) if hit is not None and hit[0].check is not None else None
                if why is not None:
                    raise ConfigError(f"Invalid value {render(parsed)} for configuration {k}: {why}", E.INVALID_REQUEST)
            # A name Kafka does not know is kept, as Kafka keeps custom configs of plugins.
        dynamic = {**self.dynamic, scope: dict(values)}
        updated = self._settings_with(dynamic)  # refuses what the settings' own checks refuse
        if validate_only:
            return
        self._save(dynamic)
        self.dynamic = dynamic
        self._set(updated)

    def _settings_with(self, dynamic: Mapping[str, Mapping[str, str]]) -> dict[str, Any]:
        """The settings fields the dynamic layers change, validated together with the rest."""
        changes: dict[str, Any] = {}
        for name, spec in BROKER_CONFIGS.items():
            if spec.setting is None or not spec.dynamic:
                continue
            value = next((v for v, s in self.levels(name, dynamic) if s in (DYNAMIC_BROKER, DYNAMIC_DEFAULT)), None)
            if value is None:
                changes[spec.setting] = getattr(self.static, spec.setting)
            else:
                parsed = parse_typed(value, spec.type)
                changes[spec.setting] = ",".join(parsed) if isinstance(parsed, list) else parsed
        try:
            BrokerSettings.model_validate({**self.static.model_dump(), **changes})
        except ValidationError as exc:
            raise ConfigError(format_validation_error(exc), E.INVALID_REQUEST) from None
        return changes

    def _apply(self, dynamic: Mapping[str, Mapping[str, str]]) -> None:
        self._set(self._settings_with(dynamic))

    def _set(self, changes: Mapping[str, Any]) -> None:
        for field, value in changes.items():
            if getattr(self.settings, field) != value:
                setattr(self.settings, field, value)


def _scaled(raw: str, kind: ConfigType, scale: int) -> str:
    if scale == 1:
        return raw
    try:
        return str(min(int(raw) * scale, LONG_MAX))
    except ValueError:
        return raw


def _type_of(name: str) -> ConfigType:
    """The type DescribeConfigs reports: Kafka 4.4's (listeners are a LIST there), else the catalogue's."""
    if (kafka := KAFKA_BROKER_CONFIGS.get(name)) is not None:
        return ConfigType(kafka["type"])
    spec = BROKER_CONFIGS.get(name)
    return spec.type if spec is not None else ConfigType.STRING
