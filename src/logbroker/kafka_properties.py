"""Kafka's own broker property names for `logbroker serve --config server.properties`.

An operator's existing `server.properties` should start logbroker as it is, so this reads the file as Java does
(`java.util.Properties`: ISO-8859-1, comments, `key=value`/`key: value`/`key value`, escapes, continuation
lines; the `javaproperties` package implements exactly that) and translates Kafka's names into BrokerSettings
fields with Kafka's types and precedence rules (`log.retention.ms` over `.minutes` over `.hours`, `log.dirs`
over `log.dir`, ...). Every key falls in one of four classes, decided here and nowhere else:

- a Kafka name logbroker honours (`KAFKA_NAMES`), or `logbroker.<setting>` for settings Kafka has no name
  for (`logbroker.fsync=interval`): becomes a setting;
- a Kafka name with no meaning on one logbroker node (replication, controllers, thread pools, socket buffers,
  TLS/SASL settings of listeners logbroker does not open, ...): ignored, all of them named in one warning;
- a Kafka name whose non-default value logbroker cannot honour and must not pretend to (an authorizer, create
  or alter policies): refused, unless it carries Kafka's default;
- anything else: refused as unknown, every such key named in one error.

Values are checked by Kafka's type rules here (a value Kafka would refuse is refused naming the Kafka key)
and by BrokerSettings' bounds afterwards, whose messages are reworded to name the Kafka key too.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import javaproperties

# Settings a listener may override (Kafka's `listener.name.<listener>.<config>`).
LISTENER_OVERRIDABLE = frozenset(
    {
        "ssl_keystore_location", "ssl_keystore_type", "ssl_key_password", "ssl_truststore_location",
        "ssl_truststore_type", "ssl_client_auth", "ssl_principal_mapping_rules", "ssl_enabled_protocols",
        "sasl_enabled_mechanisms", "sasl_plain_users_file", "sasl_plain_jaas_config", "connections_max_reauth_ms",
    }
)  # fmt: skip


__all__ = ["IGNORED", "KAFKA_NAMES", "REFUSED_UNLESS_DEFAULT", "Loaded", "PropertiesError", "load_properties"]

_INT = (-(2**31), 2**31 - 1)
_LONG = (-(2**63), 2**63 - 1)
_HOUR_MS, _MINUTE_MS = 3_600_000, 60_000


class PropertiesError(ValueError):
    """The file cannot start a broker; the message names every offending key."""


@dataclass
class Loaded:
    """What a properties file says, in BrokerSettings terms."""

    values: dict[str, Any] = field(default_factory=dict)  # field -> value
    origins: dict[str, str] = field(default_factory=dict)  # field -> the property (or properties) behind it
    ignored: list[str] = field(default_factory=list)  # keys that have no effect here, for one warning


# ----------------------------------------------------------------------------- Kafka's types


def _integer(raw: str, bounds: tuple[int, int], kind: str) -> int:
    text = raw.strip()
    if not re.fullmatch(r"[+-]?[0-9]+", text) or not bounds[0] <= int(text) <= bounds[1]:
        raise ValueError(f"Not a number of type {kind}")
    return int(text)


def _int(raw: str) -> int:
    return _integer(raw, _INT, "INT")


def _long(raw: str) -> int:
    return _integer(raw, _LONG, "LONG")


def _bool(raw: str) -> bool:
    text = raw.strip().lower()
    if text not in ("true", "false"):
        raise ValueError("Expected value to be either true or false")
    return text == "true"


def _double(raw: str) -> float:
    text = raw.strip()
    if "_" in text:
        raise ValueError("Not a number of type DOUBLE")
    try:
        return float(text)
    except ValueError:
        raise ValueError("Not a number of type DOUBLE") from None


def _string(raw: str) -> str:
    return raw.strip()


def _list(raw: str) -> str:
    """A LIST as Kafka splits it (commas, blanks around them), joined back for the setting."""
    return ",".join(p.strip() for p in raw.strip().split(",") if p.strip())


# Kafka broker property -> (BrokerSettings field, parser). Names and types as Kafka 4.4 defines them; the
# properties handled by rules of their own (listeners, log dirs, ids, retention and roll times) are below.
KAFKA_NAMES: Mapping[str, tuple[str, Callable[[str], Any]]] = {
    "num.partitions": ("num_partitions", _int),
    "offsets.topic.num.partitions": ("offsets_topic_num_partitions", _int),
    "max.request.partition.size.limit": ("max_request_partition_size_limit", _int),
    "transaction.state.log.num.partitions": ("transaction_state_log_num_partitions", _int),
    "offsets.topic.segment.bytes": ("offsets_topic_segment_bytes", _int),
    "transaction.state.log.segment.bytes": ("transaction_state_log_segment_bytes", _int),
    "transaction.state.log.min.isr": ("transaction_state_log_min_isr", _int),
    "auto.create.topics.enable": ("auto_create_topics", _bool),
    "delete.topic.enable": ("delete_topic_enable", _bool),
    "message.max.bytes": ("message_max_bytes", _int),
    "compression.type": ("compression_type", _string),
    "compression.gzip.level": ("compression_gzip_level", _int),
    "compression.lz4.level": ("compression_lz4_level", _int),
    "compression.zstd.level": ("compression_zstd_level", _int),
    "socket.request.max.bytes": ("socket_request_max_bytes", _int),
    "log.segment.bytes": ("segment_bytes", _int),
    "log.retention.bytes": ("retention_bytes", _long),
    "log.retention.check.interval.ms": ("retention_check_interval_ms", _long),
    "log.cleanup.policy": ("log_cleanup_policy", _list),
    "log.cleaner.enable": ("log_cleaner_enable", _bool),
    "log.cleaner.threads": ("log_cleaner_threads", _int),
    "log.cleaner.backoff.ms": ("log_cleaner_backoff_ms", _long),
    "log.cleaner.dedupe.buffer.size": ("log_cleaner_dedupe_buffer_size", _long),
    "log.cleaner.io.max.bytes.per.second": ("log_cleaner_io_max_bytes_per_second", _double),
    "log.cleaner.min.cleanable.ratio": ("log_cleaner_min_cleanable_ratio", _double),
    "log.cleaner.delete.retention.ms": ("log_cleaner_delete_retention_ms", _long),
    "log.cleaner.min.compaction.lag.ms": ("log_cleaner_min_compaction_lag_ms", _long),
    "log.cleaner.max.compaction.lag.ms": ("log_cleaner_max_compaction_lag_ms", _long),
    "connections.max.idle.ms": ("connections_max_idle_ms", _long),
    "max.connections": ("max_connections", _int),
    "max.connections.per.ip": ("max_connections_per_ip", _int),
    "max.connections.per.ip.overrides": ("max_connections_per_ip_overrides", _string),
    "fetch.max.bytes": ("fetch_max_bytes", _int),
    "max.incremental.fetch.session.cache.slots": ("max_incremental_fetch_session_cache_slots", _int),
    "group.initial.rebalance.delay.ms": ("group_initial_rebalance_delay_ms", _int),
    "group.min.session.timeout.ms": ("group_min_session_timeout_ms", _int),
    "group.max.session.timeout.ms": ("group_max_session_timeout_ms", _int),
    "group.max.size": ("group_max_size", _int),
    "group.consumer.session.timeout.ms": ("group_consumer_session_timeout_ms", _int),
    "group.consumer.heartbeat.interval.ms": ("group_consumer_heartbeat_interval_ms", _int),
    "group.consumer.migration.policy": ("group_consumer_migration_policy", lambda raw: raw.strip().lower()),
    "group.streams.session.timeout.ms": ("group_streams_session_timeout_ms", _int),
    "group.streams.heartbeat.interval.ms": ("group_streams_heartbeat_interval_ms", _int),
    "group.streams.max.size": ("group_streams_max_size", _int),
    "group.streams.num.standby.replicas": ("group_streams_num_standby_replicas", _int),
    "group.streams.initial.rebalance.delay.ms": ("group_streams_initial_rebalance_delay_ms", _int),
    "group.streams.assignment.interval.ms": ("group_streams_assignment_interval_ms", _int),
    "group.share.session.timeout.ms": ("group_share_session_timeout_ms", _int),
    "group.share.heartbeat.interval.ms": ("group_share_heartbeat_interval_ms", _int),
    "group.share.max.size": ("group_share_max_size", _int),
    "group.share.record.lock.duration.ms": ("group_share_record_lock_duration_ms", _int),
    "group.share.delivery.count.limit": ("group_share_delivery_count_limit", _int),
    "group.share.partition.max.record.locks": ("group_share_partition_max_record_locks", _int),
    "group.consumer.max.size": ("group_consumer_max_size", _int),
    "offsets.retention.minutes": ("offsets_retention_minutes", _int),
    "offsets.retention.check.interval.ms": ("offsets_retention_check_interval_ms", _long),
    "log.message.timestamp.before.max.ms": ("message_timestamp_before_max_ms", _long),
    "log.message.timestamp.after.max.ms": ("message_timestamp_after_max_ms", _long),
    "producer.id.expiration.ms": ("producer_id_expiration_ms", _int),
    "producer.id.expiration.check.interval.ms": ("producer_id_expiration_check_interval_ms", _int),
    "transaction.max.timeout.ms": ("transaction_max_timeout_ms", _int),
    "log.message.downconversion.enable": ("log_message_downconversion_enable", _bool),
    "transaction.partition.verification.enable": ("transaction_partition_verification_enable", _bool),
    "transactional.id.expiration.ms": ("transactional_id_expiration_ms", _int),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (
        "transaction_abort_timed_out_transaction_cleanup_interval_ms",
        _int,
    ),
    "transaction.remove.expired.transaction.cleanup.interval.ms": (
        "transaction_remove_expired_transaction_cleanup_interval_ms",
        _int,
    ),
    # Security (TLS stores in PEM only; SASL PLAIN/SCRAM; the standard authorizer).
    "ssl.keystore.location": ("ssl_keystore_location", _string),
    "ssl.keystore.type": ("ssl_keystore_type", _string),
    "ssl.key.password": ("ssl_key_password", _string),
    "ssl.truststore.location": ("ssl_truststore_location", _string),
    "ssl.truststore.type": ("ssl_truststore_type", _string),
    "ssl.client.auth": ("ssl_client_auth", _string),
    "ssl.principal.mapping.rules": ("ssl_principal_mapping_rules", _string),
    "ssl.enabled.protocols": ("ssl_enabled_protocols", _list),
    "sasl.enabled.mechanisms": ("sasl_enabled_mechanisms", _list),
    "sasl.server.max.receive.size": ("sasl_server_max_receive_size", _int),
    "connections.max.reauth.ms": ("connections_max_reauth_ms", _long),
    "connection.failed.authentication.delay.ms": ("connection_failed_authentication_delay_ms", _int),
    "authorizer.class.name": ("authorizer_class_name", _string),
    "super.users": ("super_users", _string),
    "allow.everyone.if.no.acl.found": ("allow_everyone_if_no_acl_found", _bool),
}

# Handled by the rules in `load_properties`.
_RULED = {
    "log.dirs", "log.dir", "listeners", "advertised.listeners", "listener.security.protocol.map",
    "controller.listener.names", "node.id", "broker.id", "log.retention.ms", "log.retention.minutes",
    "log.retention.hours", "log.roll.ms", "log.roll.hours",
}  # fmt: skip

# Kafka names whose value logbroker can only take at Kafka's default: anything else would be a promise broken
# silently (no ACLs enforced, no policy run, no broker-wide LogAppendTime).
REFUSED_UNLESS_DEFAULT: Mapping[str, tuple[str, str]] = {
    "create.topic.policy.class.name": ("", "Java policy classes cannot run in logbroker"),
    "alter.config.policy.class.name": ("", "Java policy classes cannot run in logbroker"),
    "log.message.timestamp.type": ("CreateTime", "set message.timestamp.type per topic instead"),
    "cordoned.log.dirs": ("", "logbroker has one log dir, which takes new partitions"),
}

# Kafka names (and prefixes, ending in ".") with no meaning on a single logbroker node.
_IGNORED_PREFIXES = (
    "alter.log.dirs.replication.quota.", "config.providers.", "controller.", "delegation.token.",
    "errors.deadletterqueue.", "group.consumer.", "group.coordinator.", "group.share.", "group.streams.",
    "kafka.metrics.", "listener.name.", "log.cleaner.io.buffer.", "log.flush.", "log.index.", "log.local.",
    "log.remote.", "log.roll.jitter.", "metadata.", "metrics.", "offsets.topic.", "password.encoder.",
    "quota.", "remote.", "replica.", "replication.quota.", "sasl.", "share.coordinator.", "ssl.",
    "transaction.", "zookeeper.",
)  # fmt: skip
_IGNORED_NAMES = {
    # Cluster roles, replication and leadership: one node is the whole cluster.
    "process.roles", "inter.broker.listener.name", "security.inter.broker.protocol", "early.start.listeners",
    "broker.rack", "broker.heartbeat.interval.ms", "broker.session.timeout.ms",
    "initial.broker.registration.timeout.ms", "controlled.shutdown.enable", "default.replication.factor",
    "min.insync.replicas", "unclean.leader.election.enable", "auto.leader.rebalance.enable",
    "leader.imbalance.check.interval.seconds", "num.replica.fetchers", "num.replica.alter.log.dirs.threads",
    "follower.fetch.last.tiered.offset.enable", "log.dir.failure.timeout.ms",
    # Threads, queues, buffers, purgatories, index and file tuning: logbroker sizes these itself.
    "num.network.threads", "num.io.threads", "background.threads", "num.recovery.threads.per.data.dir",
    "socket.send.buffer.bytes", "socket.receive.buffer.bytes", "socket.listen.backlog.size",
    "socket.connection.setup.timeout.ms", "socket.connection.setup.timeout.max.ms", "queued.max.requests",
    "queued.max.request.bytes", "request.timeout.ms", "fetch.purgatory.purge.interval.requests",
    "producer.purgatory.purge.interval.requests", "delete.records.purgatory.purge.interval.requests",
    "share.fetch.purgatory.purge.interval.requests", "log.preallocate", "log.segment.delete.delay.ms",
    "max.request.partition.size.limit",
    "max.decompressed.message.bytes", "max.connection.creation.rate", "offset.metadata.max.bytes",
    "offsets.commit.timeout.ms", "offsets.load.buffer.size",
    # Security of listeners logbroker does not open, quotas, metrics and plugins it does not load.
    "principal.builder.class", "security.providers", "client.quota.callback.class", "metric.reporters",
    "telemetry.max.bytes", "config.providers",
    # Transactions: the coordinator's retries towards other brokers (there are none).
    "add.partitions.to.txn.retry.backoff.ms", "add.partitions.to.txn.retry.backoff.max.ms",
    # Names of older Kafka versions (ZooKeeper mode, message formats) an operator's file may still carry.
    "broker.id.generation.enable", "reserved.broker.max.id", "inter.broker.protocol.version",
    "log.message.format.version", "control.plane.listener.name", "log.message.downconversion.enable",
    "unstable.api.versions.enable", "unstable.feature.versions.enable",
}  # fmt: skip
IGNORED = frozenset(_IGNORED_NAMES)

_DEFAULT_PROTOCOLS = {p: p for p in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")}
_LISTENER = re.compile(r"^([A-Za-z0-9_]+)://\[?([0-9A-Za-z\-%._:]*?)\]?:(-?[0-9]+)$")


def _ignored(key: str) -> bool:
    return key in IGNORED or key.startswith(_IGNORED_PREFIXES)


# ----------------------------------------------------------------------------- loading


def load_properties(text: str, source: str, setting_names: frozenset[str]) -> Loaded:
    """Translate a properties file's text into settings; PropertiesError names every key it cannot take.

    `setting_names`: BrokerSettings' fields (for `logbroker.<setting>` keys)."""
    props: dict[str, str] = javaproperties.loads(text)  # a later duplicate wins, as in Java
    out = Loaded()
    problems: list[str] = []
    unknown: list[str] = []

    def put(setting: str, value: Any, origin: str) -> None:
        if setting in out.values:
            problems.append(f"{origin} and {out.origins[setting]} both set {setting}: keep one")
            return
        out.values[setting] = value
        out.origins[setting] = origin

    def parsed(key: str, parse: Callable[[str], Any]) -> Any:
        try:
            return parse(props[key])
        except ValueError as exc:
            problems.append(f"invalid value {props[key]!r} for {key}: {exc}")
            return None

    for key, raw in props.items():
        if key in _RULED or _LISTENER_PREFIXED.match(key):
            continue
        if key in KAFKA_NAMES:
            setting, parse = KAFKA_NAMES[key]
            if (value := parsed(key, parse)) is not None:
                put(setting, value, key)
        elif key.startswith("logbroker."):
            setting = key.removeprefix("logbroker.").replace(".", "_").replace("-", "_")
            if setting in setting_names:
                put(setting, raw.strip(), key)
            else:
                unknown.append(key)
        elif key in REFUSED_UNLESS_DEFAULT:
            default, why = REFUSED_UNLESS_DEFAULT[key]
            if raw.strip() != default:
                problems.append(f"{key}={raw.strip()} cannot be honoured ({why}); only {default!r} is accepted")
        elif _ignored(key):
            out.ignored.append(key)
        else:
            unknown.append(key)

    _log_dirs(props, put, problems)
    _node_id(props, put, parsed, problems)
    _retention(props, put, parsed, problems)
    _roll(props, put, parsed, problems)
    _listeners(props, put, problems, out.ignored)
    _listener_overrides(props, put, problems, out.ignored)

    if unknown:
        problems.insert(0, f"unknown properties (not Kafka broker configs logbroker knows, nor logbroker.<setting>): "
                           f"{', '.join(k or repr(k) for k in sorted(unknown))}")  # fmt: skip
    if problems:
        raise PropertiesError("\n".join(f"config file {source}: {p}" for p in problems))
    return out


def _log_dirs(props: Mapping[str, str], put: Callable[..., None], problems: list[str]) -> None:
    """log.dirs, else log.dir (Kafka's precedence); logbroker keeps its data in one directory."""
    key = "log.dirs" if "log.dirs" in props else "log.dir" if "log.dir" in props else None
    if key is None:
        return
    dirs = [d.strip() for d in props[key].split(",") if d.strip()]
    if len(dirs) != 1:
        got = ", ".join(dirs) or "none"
        problems.append(f"{key}: logbroker keeps its data in exactly one directory, got {len(dirs)}: {got}")
        return
    put("data_dir", dirs[0], key)


def _node_id(
    props: Mapping[str, str], put: Callable[..., None], parsed: Callable[..., Any], problems: list[str]
) -> None:
    """node.id, or broker.id (its older name); both set must agree, as Kafka requires. broker.id -1 is Kafka's
    'not set'."""
    node = parsed("node.id", _int) if "node.id" in props else None
    broker = parsed("broker.id", _int) if "broker.id" in props else None
    if broker == -1:
        broker = None
    if node is not None and broker is not None and node != broker:
        problems.append(f"broker.id ({broker}) and node.id ({node}) must be equal")
    elif node is not None:
        put("node_id", node, "node.id")
    elif broker is not None:
        put("node_id", broker, "broker.id")


def _retention(
    props: Mapping[str, str], put: Callable[..., None], parsed: Callable[..., Any], problems: list[str]
) -> None:
    """Kafka's precedence: log.retention.ms over .minutes over .hours; a negative result is -1 (unlimited),
    0 is refused."""
    for key, parse, scale in (
        ("log.retention.ms", _long, 1),
        ("log.retention.minutes", _int, _MINUTE_MS),
        ("log.retention.hours", _int, _HOUR_MS),
    ):
        if key in props:
            value = parsed(key, parse)
            if value is None:
                return
            millis = -1 if value * scale < 0 else value * scale
            if millis == 0:
                problems.append(f"{key}: log.retention.ms must be unlimited (-1) or, greater than or equal to 1")
                return
            put("retention_ms", millis, key)
            return


def _roll(props: Mapping[str, str], put: Callable[..., None], parsed: Callable[..., Any], problems: list[str]) -> None:
    """log.roll.ms over log.roll.hours (at least 1, as Kafka checks it)."""
    for key, parse, scale in (("log.roll.ms", _long, 1), ("log.roll.hours", _int, _HOUR_MS)):
        if key in props:
            value = parsed(key, parse)
            if value is not None:
                if key == "log.roll.hours" and value < 1:
                    problems.append(f"invalid value {props[key]!r} for {key}: Value must be at least 1")
                else:
                    put("segment_ms", value * scale, key)
            return


def _listeners(props: Mapping[str, str], put: Callable[..., None], problems: list[str], ignored: list[str]) -> None:
    """Client listeners; controller listeners (`controller.listener.names`) mean nothing on one node and are
    dropped with a warning. One PLAINTEXT listener becomes `listen` (as before listeners had protocols);
    anything else becomes `listeners` with the protocol map and advertised addresses."""
    controllers = {n.strip().upper() for n in props.get("controller.listener.names", "").split(",") if n.strip()}
    if "controller.listener.names" in props:
        ignored.append("controller.listener.names")
    protocols = dict(_DEFAULT_PROTOCOLS)
    if "listener.security.protocol.map" in props:  # replaces Kafka's default map, as in Kafka
        protocols = {}
        for item in filter(None, (p.strip() for p in props["listener.security.protocol.map"].split(","))):
            name, sep, proto = item.partition(":")
            if not sep or not name.strip() or not proto.strip():
                problems.append(f"listener.security.protocol.map: {item!r} is not LISTENER_NAME:SECURITY_PROTOCOL")
                return
            protocols[name.strip().upper()] = proto.strip().upper()
    found: dict[str, list[tuple[str, str, int, str]]] = {}
    for key in ("listeners", "advertised.listeners"):
        if key not in props:
            continue
        parsed: list[tuple[str, str, int, str]] = []
        for item in filter(None, (p.strip() for p in props[key].split(","))):
            m = _LISTENER.match(item)
            if m is None:
                problems.append(f"{key}: {item!r} is not LISTENER_NAME://HOST:PORT")
                return
            name, host, port = m[1].upper(), m[2], int(m[3])
            if name in controllers:
                ignored.append(f"{key} {item} (controller listener)")
                continue
            if not 0 <= port <= 65535:
                problems.append(f"{key}: port {port} is out of range")
                return
            proto = protocols.get(name)
            if proto is None:
                problems.append(f"{key}: listener {name} has no security protocol in listener.security.protocol.map")
                return
            if proto not in _DEFAULT_PROTOCOLS:
                problems.append(f"{key}: listener {name} has an unknown security protocol {proto}")
                return
            parsed.append((name, host, port, proto))
        if not parsed and key == "listeners":
            problems.append(f"{key}: no listener for clients (only controller listeners)")
            return
        found[key] = parsed
    bound = found.get("listeners", [])
    advertised = found.get("advertised.listeners", [])
    names = {n for n, _, _, _ in bound}
    for name, _, _, _ in advertised:
        if bound and name not in names:
            problems.append(f"advertised.listeners names listener {name}, which listeners does not have")
            return
    single = (
        len(bound) <= 1
        and len(advertised) <= 1
        and all(n == "PLAINTEXT" and p == "PLAINTEXT" for n, _, _, p in bound + advertised)
    )
    if single:
        for key, setting, entries in (
            ("listeners", "listen", bound),
            ("advertised.listeners", "advertised_listener", advertised),
        ):
            if not entries:
                continue
            _, host, port, _ = entries[0]
            if key == "listeners":
                bind = host or "0.0.0.0"  # Kafka: an empty host binds every interface
                put(setting, f"[{bind}]:{port}" if ":" in bind else f"{bind}:{port}", key)
            elif host:  # an empty advertised host: Kafka advertises the machine's name; logbroker its own default
                put(setting, f"[{host}]:{port}" if ":" in host else f"{host}:{port}", key)
        return

    def url(name: str, host: str, port: int) -> str:
        return f"{name}://[{host}]:{port}" if ":" in host else f"{name}://{host}:{port}"

    if bound:
        put("listeners", ",".join(url(n, h, p) for n, h, p, _ in bound), "listeners")
    if advertised:
        put("advertised_listeners", ",".join(url(n, h, p) for n, h, p, _ in advertised if h), "advertised.listeners")
    if "listener.security.protocol.map" in props:
        used = {n for n, _, _, _ in bound + advertised}
        put(
            "listener_security_protocol_map",
            ",".join(f"{n}:{p}" for n, p in protocols.items() if n in used or n not in controllers),
            "listener.security.protocol.map",
        )


# Broker security properties with a per-listener form (`listener.name.<listener>.<property>`).
_LISTENER_KEYS: Mapping[str, tuple[str, Callable[[str], Any]]] = {
    **{key: spec for key, spec in KAFKA_NAMES.items() if spec[0] in LISTENER_OVERRIDABLE},
    "plain.sasl.jaas.config": ("sasl_plain_jaas_config", _string),
}
_LISTENER_PREFIXED = re.compile(r"^listener\.name\.([^.]+)\.(.+)$")


def _listener_overrides(
    props: Mapping[str, str], put: Callable[..., None], problems: list[str], ignored: list[str]
) -> None:
    """`listener.name.<listener>.<property>` for the security properties logbroker honours per listener (the
    PLAIN users of a listener's JAAS config included); other per-listener properties, and those of listeners
    the file does not open (controllers'), are ignored as Kafka leaves them unused."""
    overrides: dict[str, dict[str, Any]] = {}
    declared = {
        m[1].lower()
        for item in props.get("listeners", "PLAINTEXT://:9092").split(",")
        if (m := _LISTENER.match(item.strip()))
    }
    for key, raw in props.items():
        m = _LISTENER_PREFIXED.match(key)
        if m is None:
            continue
        listener, prop = m[1].lower(), m[2]
        if prop in _LISTENER_KEYS and listener in declared:
            setting, parse = _LISTENER_KEYS[prop]
            try:
                overrides.setdefault(listener, {})[setting] = parse(raw)
            except ValueError as exc:
                problems.append(f"invalid value {raw!r} for {key}: {exc}")
        else:
            ignored.append(key)
    if overrides:
        put("listener_configs", overrides, "listener.name.*")
