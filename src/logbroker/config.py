"""Broker settings: defaults < config file (TOML, YAML or Kafka's server.properties) < LOGBROKER_* environment <
command-line flags."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, PrivateAttr, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from logbroker import addresses
from logbroker.kafka_properties import LISTENER_OVERRIDABLE, PropertiesError, load_properties


class FsyncPolicy(StrEnum):
    ALWAYS = "always"
    INTERVAL = "interval"
    NEVER = "never"


class ConfigError(ValueError):
    """A refused configuration; the message names the offending key."""


def parse_host_port(value: str, what: str = "listen") -> tuple[str, int]:
    """A listen address: port 0 picks a free one, no host means every interface."""
    host, port = addresses.parse_host_port(value, what, allow_port_zero=True)
    return host or "0.0.0.0", port


def parse_ip_overrides(value: str) -> dict[str, int]:
    """Kafka's max.connections.per.ip.overrides: `host:count` pairs separated by commas."""
    out: dict[str, int] = {}
    for item in filter(None, (p.strip() for p in value.split(","))):
        host, sep, count = item.rpartition(":")
        if not sep or not host or not count.isdigit():
            raise ValueError(f"max_connections_per_ip_overrides: {item!r} is not HOST:COUNT")
        out[host.strip("[]")] = int(count)
    return out


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = (
    "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT"  # Kafka's default, its order
)
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
_LISTENER = re.compile(r"^([A-Za-z0-9_]+)://(\[[0-9A-Fa-f:.%]*\]|[0-9A-Za-z\-._]*):(-?[0-9]+)$")


@dataclass(frozen=True, slots=True)
class Listener:
    """One endpoint clients connect to: Kafka's listener (name, security protocol, bind and advertised address)."""

    name: str
    protocol: str
    host: str
    port: int
    advertised_host: str
    advertised_port: int

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def url(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


def parse_listener_list(value: str, what: str = "listeners") -> list[tuple[str, str, int]]:
    """Kafka's `NAME://HOST:PORT,...` (an empty host binds every interface, brackets hold IPv6)."""
    out: list[tuple[str, str, int]] = []
    for item in filter(None, (p.strip() for p in value.split(","))):
        m = _LISTENER.match(item)
        if m is None:
            raise ValueError(f"{what}: {item!r} is not LISTENER_NAME://HOST:PORT")
        port = int(m[3])
        if not 0 <= port <= 65535:
            raise ValueError(f"{what}: port {port} is out of range")
        name = m[1].upper()
        if any(n == name for n, _, _ in out):
            raise ValueError(f"{what}: listener {name} is named twice")
        out.append((name, m[2].strip("[]"), port))
    if not out:
        raise ValueError(f"{what}: no listener given")
    return out


def parse_protocol_map(value: str) -> dict[str, str]:
    """Kafka's `listener.security.protocol.map`: LISTENER_NAME:SECURITY_PROTOCOL pairs."""
    out: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in value.split(","))):
        name, sep, proto = item.partition(":")
        if not sep or not name.strip() or not proto.strip():
            raise ValueError(f"listener_security_protocol_map: {item!r} is not LISTENER_NAME:SECURITY_PROTOCOL")
        proto = proto.strip().upper()
        if proto not in SECURITY_PROTOCOLS:
            raise ValueError(
                f"listener_security_protocol_map: {proto} is not a security protocol ({', '.join(SECURITY_PROTOCOLS)})"
            )
        out[name.strip().upper()] = proto
    return out


class BrokerSettings(BaseSettings):
    """Everything `logbroker serve` can be told. Names follow Kafka's broker configs where one exists."""

    model_config = SettingsConfigDict(env_prefix="LOGBROKER_", extra="forbid", validate_assignment=True)
    # Setting -> the Kafka property of the config file that set it, where the names differ (retention_ms from
    # log.retention.hours): DescribeConfigs reports a static config under the name it was given.
    _property_names: dict[str, str] = PrivateAttr(default_factory=dict)

    data_dir: Path = Field(Path("./logbroker-data"), description="where partition logs live")
    listen: str = Field(
        "127.0.0.1:9092", description="HOST:PORT of the one PLAINTEXT listener when `listeners` is unset"
    )
    advertised_listener: str | None = Field(None, description="HOST:PORT clients are told to use (with `listen`)")
    # Listeners and security (Kafka's names). Several listeners at once, each with a security protocol.
    listeners: str | None = Field(
        None, description="NAME://HOST:PORT,... (Kafka's listeners); replaces `listen` when set"
    )
    advertised_listeners: str | None = Field(None, description="NAME://HOST:PORT,... clients are told to use")
    listener_security_protocol_map: str = Field(
        DEFAULT_PROTOCOL_MAP, description="NAME:PROTOCOL,... (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)"
    )
    listener_configs: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="per-listener overrides of ssl_*/sasl_* settings (Kafka's listener.name.<name>.<config>)",
    )
    ssl_keystore_location: Path | None = Field(
        None, description="PEM file: the server's private key and certificate chain"
    )
    ssl_keystore_type: str = Field("PEM", description="only PEM")
    ssl_key_password: str | None = Field(None, description="the password of an encrypted private key")
    ssl_truststore_location: Path | None = Field(
        None, description="PEM file of CA certificates clients are checked against"
    )
    ssl_truststore_type: str = Field("PEM", description="only PEM")
    ssl_client_auth: str = Field("none", description="client certificates: none, requested or required")
    ssl_principal_mapping_rules: str = Field("DEFAULT", description="certificate subject -> user name rules")
    ssl_enabled_protocols: str = Field("TLSv1.2,TLSv1.3", description="TLS versions offered (1.2 and newer)")
    sasl_enabled_mechanisms: str = Field(
        "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        description="SASL mechanisms offered: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER (unsecured tokens: "
        "development only)",
    )
    sasl_plain_users_file: Path | None = Field(
        None, description='PLAIN users: `name=password` lines, or a JAAS PlainLoginModule entry with user_NAME="pw"'
    )
    sasl_plain_jaas_config: str | None = Field(None, description="PLAIN users inline (Kafka's plain.sasl.jaas.config)")
    sasl_server_max_receive_size: int = Field(
        524288, ge=64, description="largest request before authentication (a SASL token)"
    )
    connections_max_reauth_ms: int = Field(
        0, ge=0, description="SASL sessions last this long; clients re-authenticate (KIP-368); 0: forever"
    )
    connection_failed_authentication_delay_ms: int = Field(
        100, ge=0, description="a failed authentication's connection is closed after this delay"
    )
    authorizer_class_name: str = Field(
        "", description=f"empty: no authorization; {STANDARD_AUTHORIZER}: ACLs are enforced"
    )
    super_users: str = Field("", description="principals allowed everything, separated by ';' (User:admin;User:ops)")
    allow_everyone_if_no_acl_found: bool = Field(
        False, description="with an authorizer: allow an operation on a resource no ACL names"
    )
    metrics_listen: str | None = Field(
        None,
        description="HOST:PORT of the Prometheus /metrics, /health and /ready endpoint (off when unset; keep "
        "it on loopback or a private network: it is not authenticated)",
    )
    console_listen: str | None = Field(
        None,
        description="HOST:PORT of the web console `logbroker serve` runs beside the broker (off when unset; off "
        "loopback give console_tls_cert/console_tls_key, or it is served in clear text with a warning)",
    )
    console_tls_cert: Path | None = Field(None, description="PEM certificate (chain) the console serves HTTPS with")
    console_tls_key: Path | None = Field(None, description="PEM private key of console_tls_cert")
    node_id: int = Field(1, ge=0, description="the broker's id in Metadata answers (Kafka's node.id)")
    fsync: FsyncPolicy = Field(FsyncPolicy.ALWAYS, description="always | interval | never")
    fsync_interval_ms: int = Field(1000, ge=1, description="with fsync=interval")
    offsets_commit_sync: Literal["shared", "own"] = Field(
        "shared",
        description="with fsync=always, how an OffsetCommit is made durable. shared: written to the log before it "
        "is answered (it survives kill -9), then synced by the next fsync round: a produce's, or one run within "
        "offsets_commit_sync_delay_ms (Kafka syncs neither). own: answered after its own fsync round, as a "
        "produce (survives a power cut too)",
    )
    offsets_commit_sync_delay_ms: int = Field(
        100, ge=1, le=10_000, description="with offsets_commit_sync=shared: the longest a commit waits for its sync"
    )
    auto_create_topics: bool = Field(
        True, description="create a topic on its first Metadata or Produce request naming it"
    )
    num_partitions: int = Field(1, ge=1, description="partitions of auto-created topics")
    max_request_partition_size_limit: int = Field(
        2000, ge=1, description="partitions one DescribeTopicPartitions answer describes at most"
    )
    offsets_topic_num_partitions: int = Field(
        50, ge=1, description="partitions of __consumer_offsets, listed once a group first finds its coordinator"
    )
    transaction_state_log_num_partitions: int = Field(
        50, ge=1, description="partitions of __transaction_state, listed once a producer first finds its coordinator"
    )
    offsets_topic_segment_bytes: int = Field(
        104857600, ge=1, description="segment.bytes of __consumer_offsets, set when it is created (as Kafka)"
    )
    transaction_state_log_segment_bytes: int = Field(
        104857600, ge=1, description="segment.bytes of __transaction_state, set when it is created (as Kafka)"
    )
    transaction_state_log_min_isr: int = Field(
        2, ge=1, description="min.insync.replicas of __transaction_state, set when it is created (as Kafka)"
    )
    delete_topic_enable: bool = Field(True, description="allow DeleteTopics")
    message_max_bytes: int = Field(1048588, ge=64, description="largest record batch accepted")
    compression_type: Literal["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"] = Field(
        "producer",
        description="producer: batches stored as producers compressed them; a codec or uncompressed: batches in "
        "another codec are recompressed on write (topics without their own compression.type)",
    )
    compression_gzip_level: int = Field(-1, ge=-1, le=9, description="gzip level of recompressed batches (-1: 6)")
    compression_lz4_level: int = Field(9, ge=1, le=17, description="lz4 level of recompressed batches")
    compression_zstd_level: int = Field(3, ge=-131072, le=22, description="zstd level of recompressed batches")
    socket_request_max_bytes: int = Field(104857600, ge=1024, description="largest request frame")
    segment_bytes: int = Field(
        1 << 30, ge=1024, description="a partition's log rolls to a new segment file at this size"
    )
    segment_ms: int = Field(7 * 24 * 3600 * 1000, ge=1, description="... or when its first record is this old")
    retention_ms: int = Field(
        7 * 24 * 3600 * 1000,
        ge=-1,
        description="segments whose newest record is older than this are deleted; -1: kept forever",
    )
    retention_bytes: int = Field(
        -1, ge=-1, description="a partition's oldest segments are deleted past this size; -1: no limit"
    )
    retention_check_interval_ms: int = Field(300_000, ge=10, description="how often retention is enforced")
    # The log cleaner (Kafka's log.cleaner.* and the broker defaults of the compaction topic configs).
    log_cleanup_policy: str = Field(
        "delete", description="cleanup.policy of topics that set none: delete, compact or both"
    )
    # The scrubber (logbroker's own: Kafka repairs rot from replicas): CRCs of closed segments, verified.
    log_scrubber_enable: bool = Field(True, description="verify closed segments' CRCs in the background")
    log_scrubber_bytes_per_second: int = Field(
        16 << 20, ge=0, description="the scrubber's read rate (bytes/s; 0 pauses it)"
    )
    log_scrubber_interval_ms: int = Field(
        86_400_000, ge=1000, description="from the start of one pass over every closed segment to the next"
    )
    log_cleaner_enable: bool = Field(True, description="run the cleaner that compacts cleanup.policy=compact topics")
    log_cleaner_threads: int = Field(1, ge=1, description="partitions cleaned at once")
    log_cleaner_backoff_ms: int = Field(15_000, ge=0, description="sleep when no partition needs cleaning")
    log_cleaner_dedupe_buffer_size: int = Field(
        128 << 20,
        ge=1 << 20,
        description="memory for the key map of one cleaning (bounds the dirty range cleaned at once)",
    )
    log_cleaner_io_max_bytes_per_second: float = Field(
        1.7976931348623157e308, gt=0, description="read+write throttle of the cleaner (bytes/s)"
    )
    log_cleaner_min_cleanable_ratio: float = Field(0.5, ge=0, le=1, description="default min.cleanable.dirty.ratio")
    log_cleaner_delete_retention_ms: int = Field(86_400_000, ge=0, description="default delete.retention.ms")
    log_cleaner_min_compaction_lag_ms: int = Field(0, ge=0, description="default min.compaction.lag.ms")
    log_cleaner_max_compaction_lag_ms: int = Field(2**63 - 1, ge=1, description="default max.compaction.lag.ms")
    connections_max_idle_ms: int = Field(600_000, ge=100, description="a connection idle this long is closed")
    request_timeout_ms: int = Field(30_000, ge=100, description="a request must arrive whole within this")
    # Connections and back-pressure (Kafka: SocketServer, ConnectionQuotas).
    max_connections: int = Field(
        100_000, ge=1, description="open client connections (capped to what the file-descriptor limit allows)"
    )
    max_connections_per_ip: int = Field(2**31 - 1, ge=0, description="connections from one address (Kafka's default)")
    max_connections_per_ip_overrides: str = Field(
        "", description="HOST:COUNT,... per-address exceptions to max_connections_per_ip"
    )
    max_pipelined_requests: int = Field(100, ge=1, description="requests of one connection in progress at once")
    connection_max_unsent_bytes: int = Field(
        4 << 20, ge=1024, description="a connection stops being read while its unsent responses exceed this"
    )
    max_inflight_bytes: int = Field(
        512 << 20,
        ge=1 << 20,
        description="connections holding answers stop being read while requests in progress and unsent "
        "responses of all connections hold more than this",
    )
    fetch_max_bytes: int = Field(55 << 20, ge=1024, description="largest Fetch response (Kafka's fetch.max.bytes)")
    protocol_versions: Literal["all", "kafka4"] = Field(
        "all",
        description="all: every API version Kafka 3.9 serves, the pre-0.11 message formats included (converted "
        "on produce and fetch); kafka4: only what Kafka 4 serves, refusing the versions KIP-896 removed as it does",
    )
    log_message_downconversion_enable: bool = Field(
        True,
        description="answer Fetch v0-v3 by converting stored batches to the old message formats (Kafka 3.x's "
        "log.message.downconversion.enable; per topic: message.downconversion.enable)",
    )
    fetch_zero_copy_bytes: int = Field(
        64 << 10,
        ge=0,
        description="a partition's fetch answer of at least this many bytes is sent from its file with sendfile "
        "(no copy in user space; TLS listeners always copy); 0: never",
    )
    max_incremental_fetch_session_cache_slots: int = Field(
        1000,
        ge=0,
        description="incremental fetch sessions kept at once, in 8 shards of slots // 8 "
        "(Kafka's max.incremental.fetch.session.cache.slots)",
    )
    log_preallocate_bytes: int = Field(
        256 << 10,
        ge=0,
        description="space a partition's active segment reserves ahead of appends smaller than this, so that "
        "syncing a small append commits no new file length (about a third cheaper here); trimmed when the "
        "segment rolls or the broker stops; 0: never",
    )
    log_max_open_files: int = Field(
        0, ge=0, description="descriptors segment files may hold open at once; 0: derived from the open-file limit"
    )
    group_initial_rebalance_delay_ms: int = Field(
        100, ge=0, description="wait for more members before the first rebalance of an empty group (Kafka: 3000)"
    )
    group_min_session_timeout_ms: int = Field(
        1000, ge=1, description="the shortest session.timeout.ms a classic group member may ask for"
    )
    group_max_session_timeout_ms: int = Field(
        1_800_000, ge=1, description="the longest session.timeout.ms a classic group member may ask for"
    )
    group_consumer_session_timeout_ms: int = Field(45_000, ge=100, description="KIP-848 member session timeout")
    group_consumer_heartbeat_interval_ms: int = Field(5_000, ge=10, description="KIP-848 heartbeat interval")
    group_consumer_migration_policy: Literal["bidirectional", "upgrade", "downgrade", "disabled"] = Field(
        "bidirectional",
        description="online conversion of live groups between the classic and the consumer protocol (KIP-848)",
    )
    group_streams_session_timeout_ms: int = Field(
        45_000, ge=100, description="streams-group (KIP-1071) member session timeout"
    )
    group_streams_heartbeat_interval_ms: int = Field(5_000, ge=10, description="streams-group heartbeat interval")
    group_streams_max_size: int = Field(2**31 - 1, ge=1, description="members of one streams group at most")
    group_streams_num_standby_replicas: int = Field(
        0, ge=0, le=2, description="standby replicas of each stateful task, on other processes than its active one"
    )
    group_streams_initial_rebalance_delay_ms: int = Field(
        3_000, ge=0, description="how long a new streams group waits for more members before its first assignment"
    )
    group_streams_assignment_interval_ms: int = Field(
        1_000, ge=0, description="a streams group's assignment is recomputed at most this often"
    )
    group_share_session_timeout_ms: int = Field(45_000, ge=100, description="share-group member session timeout")
    group_share_heartbeat_interval_ms: int = Field(5_000, ge=10, description="share-group heartbeat interval")
    group_share_max_size: int = Field(200, ge=1, le=1000, description="members of one share group at most")
    group_share_record_lock_duration_ms: int = Field(
        30_000, ge=1000, le=3_600_000, description="how long a share-group member holds the records it fetched"
    )
    group_share_delivery_count_limit: int = Field(
        5, ge=2, le=10, description="deliveries of a record to share-group members before it is archived"
    )
    group_share_partition_max_record_locks: int = Field(
        2000, ge=100, le=10_000, description="records of one share-partition in flight at most"
    )
    offsets_retention_minutes: int = Field(7 * 24 * 60, ge=1, description="committed offsets of empty groups")
    # Client-created group state, bounded as Kafka's GroupCoordinatorConfig bounds it.
    offsets_retention_ms: int | None = Field(
        None, ge=1, description="overrides offsets_retention_minutes (logbroker only: lets tests expire in seconds)"
    )
    offsets_retention_check_interval_ms: int = Field(
        600_000, ge=1, description="how often expired offsets and empty groups without offsets are removed"
    )
    group_max_size: int = Field(2**31 - 1, ge=1, description="members of a classic group (Kafka's group.max.size)")
    group_consumer_max_size: int = Field(2**31 - 1, ge=1, description="members of a KIP-848 consumer group")
    # Produce validation and producer state (Kafka's names and 4.4 defaults; the timestamp bounds are also
    # topic configs, message.timestamp.before.max.ms / message.timestamp.after.max.ms, KIP-937).
    message_timestamp_before_max_ms: int = Field(
        2**63 - 1, ge=0, description="refuse CreateTime records older than this against the broker's clock"
    )
    message_timestamp_after_max_ms: int = Field(
        3_600_000, ge=0, description="refuse CreateTime records further in the future than this"
    )
    producer_id_expiration_ms: int = Field(
        86_400_000, ge=1, description="forget an idempotent producer's state once its last batch is this old"
    )
    producer_id_expiration_check_interval_ms: int = Field(
        600_000, ge=1, description="how often expired producer ids are removed"
    )
    # Transactions (Kafka's names and defaults).
    transaction_max_timeout_ms: int = Field(
        900_000, ge=1, description="the longest transaction.timeout.ms a transactional producer may ask for"
    )
    transactional_id_expiration_ms: int = Field(
        604_800_000, ge=1, description="forget a transactional id idle (no transaction open) this long"
    )
    transaction_partition_verification_enable: bool = Field(
        True,
        description="verify a transactional batch's partition with the coordinator before appending it (KIP-890; "
        "Produce v12+ is always verified)",
    )
    transaction_version: int = Field(
        2,
        ge=1,
        le=2,
        description="the finalized transaction.version feature clients read from ApiVersions: 2 is KIP-890 part 2 "
        "(the epoch bumps at every transaction's end, partitions and groups join a transaction with Produce v12 "
        "and TxnOffsetCommit v5), as Kafka 4.4 finalizes it; 1 keeps clients on AddPartitionsToTxn and EndTxn v4. "
        "Read until `kafka-features` changes the level (kept in the data directory from then on)",
    )
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = Field(
        10_000, ge=1, description="how often transactions past their timeout are aborted"
    )
    transaction_remove_expired_transaction_cleanup_interval_ms: int = Field(
        3_600_000, ge=1, description="how often expired transactional ids are removed"
    )
    log_level: str = Field("INFO", description="DEBUG, INFO, WARNING, ERROR or CRITICAL")
    log_format: str = Field("text", description="text, or json: one JSON object per line (for log shippers)")

    @field_validator("listen")
    @classmethod
    def _listen(cls, v: str) -> str:
        parse_host_port(v, "listen")
        return v

    @field_validator("advertised_listener")
    @classmethod
    def _adv(cls, v: str | None) -> str | None:
        if v is not None:
            host, _ = parse_host_port(v, "advertised_listener")
            if host in ("0.0.0.0", "::"):
                raise ValueError("advertised_listener must be an address clients can reach")
        return v

    @field_validator("metrics_listen", "console_listen")
    @classmethod
    def _metrics_listen(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is not None:
            parse_host_port(v, info.field_name or "listen")
        return v

    @field_validator("log_cleanup_policy")
    @classmethod
    def _policy(cls, v: str) -> str:
        policies = {p.strip() for p in v.split(",")}
        if not policies or not policies <= {"compact", "delete"}:
            raise ValueError("log_cleanup_policy must be compact, delete or compact,delete")
        return ",".join(sorted(policies))

    @field_validator("log_level")
    @classmethod
    def _level(cls, v: str) -> str:
        if v.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
            raise ValueError("log_level must be DEBUG, INFO, WARNING, ERROR or CRITICAL")
        return v.upper()

    @field_validator("log_format")
    @classmethod
    def _log_format(cls, v: str) -> str:
        if v.lower() not in ("text", "json"):
            raise ValueError("log_format must be text or json")
        return v.lower()

    @field_validator("max_connections_per_ip_overrides")
    @classmethod
    def _overrides(cls, v: str) -> str:
        parse_ip_overrides(v)
        return v

    @model_validator(mode="after")
    def _sizes(self) -> BrokerSettings:
        if self.message_max_bytes > self.socket_request_max_bytes:
            raise ValueError("message_max_bytes cannot exceed socket_request_max_bytes")
        return self

    @model_validator(mode="after")
    def _security(self) -> BrokerSettings:
        listeners = self.listener_list()  # raises on a bad list, map or advertised name
        for name, overrides in self.listener_configs.items():
            if name.upper() not in {lst.name for lst in listeners}:
                raise ValueError(f"listener_configs: no listener is named {name}")
            for key in overrides:
                if key not in LISTENER_OVERRIDABLE:
                    raise ValueError(f"listener_configs.{name}: {key} cannot be set per listener")
        for lst in listeners:
            get = lambda key, lst=lst: self.for_listener(lst.name, key)  # noqa: E731
            for key in ("ssl_keystore_type", "ssl_truststore_type"):
                if str(get(key)).upper() != "PEM":
                    raise ValueError(f"{key}: only PEM is supported, got {get(key)!r} (listener {lst.name})")
            if str(get("ssl_client_auth")).lower() not in ("none", "requested", "required"):
                raise ValueError(f"ssl_client_auth must be none, requested or required, got {get('ssl_client_auth')!r}")
            for proto in filter(None, (p.strip() for p in str(get("ssl_enabled_protocols")).split(","))):
                if proto not in ("TLSv1.2", "TLSv1.3"):
                    raise ValueError(f"ssl_enabled_protocols: {proto} is not offered (TLSv1.2 and TLSv1.3 only)")
            if lst.tls and not get("ssl_keystore_location"):
                raise ValueError(f"listener {lst.name} uses {lst.protocol} but no ssl_keystore_location is set")
            if lst.sasl:
                mechs = [m.strip().upper() for m in str(get("sasl_enabled_mechanisms")).split(",") if m.strip()]
                if not mechs:
                    raise ValueError(f"listener {lst.name} uses {lst.protocol} but sasl_enabled_mechanisms is empty")
                for m in mechs:
                    if m not in SASL_MECHANISMS:
                        raise ValueError(
                            f"sasl_enabled_mechanisms: {m} is not supported ({', '.join(SASL_MECHANISMS)})"
                        )
        if self.authorizer_class_name.strip() not in ("", STANDARD_AUTHORIZER):
            raise ValueError(
                f"authorizer_class_name: only {STANDARD_AUTHORIZER} (ACLs) is available, "
                f"got {self.authorizer_class_name!r}"
            )
        for part in self.super_users.split(";"):
            if part.strip() and ":" not in part:
                raise ValueError(f"super_users: expected principalType:principalName, got {part.strip()!r}")
        return self

    def for_listener(self, listener: str, key: str) -> Any:
        """A setting as `listener` sees it: its `listener_configs` override, else the broker-wide value."""
        overrides = self.listener_configs.get(listener.lower()) or self.listener_configs.get(listener.upper()) or {}
        return overrides[key] if key in overrides else getattr(self, key)

    def listener_list(self) -> list[Listener]:
        """The listeners to open: `listeners` (with the protocol map and advertised addresses), or one
        PLAINTEXT listener on `listen`."""
        if self.listeners is None:
            host, port = parse_host_port(self.listen)
            adv_host, adv_port = parse_host_port(self.advertised_listener) if self.advertised_listener else (host, port)
            return [Listener("PLAINTEXT", "PLAINTEXT", host, port, _reachable(adv_host), adv_port)]
        protocols = parse_protocol_map(self.listener_security_protocol_map)
        advertised = (
            {n: (h, p) for n, h, p in parse_listener_list(self.advertised_listeners or "", "advertised_listeners")}
            if self.advertised_listeners
            else {}
        )
        bound = parse_listener_list(self.listeners)
        names = {n for n, _, _ in bound}
        for name in advertised:
            if name not in names:
                raise ValueError(f"advertised_listeners names listener {name}, which listeners does not have")
        ports = [p for _, _, p in bound if p]
        if len(ports) != len(set(ports)):
            raise ValueError("listeners: two listeners on one port")
        out = []
        for name, host, port in bound:
            proto = protocols.get(name)
            if proto is None:
                raise ValueError(
                    f"listeners: listener {name} has no security protocol in listener_security_protocol_map"
                )
            adv_host, adv_port = advertised.get(name, (host, port))
            out.append(Listener(name, proto, host or "0.0.0.0", port, _reachable(adv_host), adv_port))
        return out

    @property
    def advertised(self) -> tuple[str, int]:
        """The first listener's advertised address (what tools print; Metadata answers per listener)."""
        first = self.listener_list()[0]
        return first.advertised_host, first.advertised_port

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, env_settings, _FileSource(settings_cls)


def _reachable(host: str) -> str:
    """A wildcard bind address is not one a client can use: advertise loopback instead."""
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host


class _FileSource(PydanticBaseSettingsSource):
    """Values from the file named by `_config_file` (set by `load_settings`)."""

    path: Path | None = None
    notes: list[str] | None = None  # warnings about the file (Kafka properties with no meaning here)
    names: dict[str, str] = {}  # field -> the key in the file that set it, where they differ

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:  # pragma: no cover
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        if _FileSource.path is None:
            return {}
        return read_config_file(_FileSource.path, _FileSource.notes, _FileSource.names)


def read_config_file(path: Path, notes: list[str] | None = None, names: dict[str, str] | None = None) -> dict[str, Any]:
    """The settings a file holds. `.properties` files use Kafka's broker property names (see kafka_properties);
    `notes` receives warnings about them, `names` which property set each setting."""
    if path.suffix == ".properties":
        return _read_properties(path, notes, names)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc.strerror}") from None
    try:
        if path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text) or {}
        else:
            data = tomllib.loads(text)
    except Exception as exc:
        raise ConfigError(f"config file {path} is not valid {path.suffix.lstrip('.') or 'TOML'}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of settings")
    # Accept Kafka-style dotted or dashed names too (log.retention.ms is not accepted: be explicit).
    return {str(k).replace("-", "_").replace(".", "_"): v for k, v in data.items()}


def _read_properties(path: Path, notes: list[str] | None, names: dict[str, str] | None) -> dict[str, Any]:
    try:
        text = path.read_bytes().decode("latin-1")  # java.util.Properties reads ISO-8859-1, as Kafka loads it
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc.strerror}") from None
    try:
        loaded = load_properties(text, str(path), frozenset(BrokerSettings.model_fields))
    except PropertiesError as exc:
        raise ConfigError(str(exc)) from None
    if loaded.ignored and notes is not None:
        notes.append(
            f"config file {path}: ignoring {len(loaded.ignored)} Kafka properties that have no meaning on one "
            f"logbroker node: {', '.join(loaded.ignored)}"
        )
    if names is not None:
        names.update({k: v for k, v in loaded.origins.items() if k != v})
    return loaded.values


def format_validation_error(exc: ValidationError, names: dict[str, str] | None = None) -> str:
    """One line per refused value, naming the setting (and the file's key for it, e.g. a Kafka property)."""
    lines = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "config"
        if names and key in names:
            key = f"{names[key]} ({key})"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown setting"
        lines.append(f"invalid config: {key}: {msg}")
    return "\n".join(lines)


ENV_PREFIX = "LOGBROKER_"
# LOGBROKER_* variables that are not BrokerSettings fields yet belong to logbroker: those of the client commands
# are found on the CLI's options by `unknown_environment`'s caller; these belong to the faces and the tooling.
OTHER_ENV = frozenset({"LOGBROKER_JARS_DIR", "LOGBROKER_TEST_TARGET", "LOGBROKER_REQUIRE_PEERS",
                       "LOGBROKER_DEMO_TEST_MARK", "LOGBROKER_SASL_PASSWORD", "LOGBROKER_BOOTSTRAP",
                       "LOGBROKER_CERTS_KEY_PASSWORD", "LOGBROKER_KAFKA_BOOTSTRAP",  # the pytest plugin
                       "LOGBROKER_BENCH_CACHE", "LOGBROKER_GO", "LOGBROKER_KCAT",  # bench tools
                       "LOGBROKER_SPARK_JAVA_OPTIONS",  # logbroker.spark.session; below: the tests
                       "LOGBROKER_PORT_BLOCK", "LOGBROKER_TEST_WORKERS", "LOGBROKER_PEER_JVM_OPTS"})  # fmt: skip
OTHER_ENV_PREFIXES = ("LOGBROKER_MQ_",)  # logbroker.mq's settings (`__` nests)


def unknown_environment(environ: Mapping[str, str], known: Iterable[str] = ()) -> list[str]:
    """LOGBROKER_* variables no part of logbroker reads: a misspelt setting would otherwise be ignored silently
    (pydantic-settings reads only the names of fields). `known`: more names that are read (CLI options)."""
    names = {ENV_PREFIX + f.upper() for f in BrokerSettings.model_fields} | OTHER_ENV | set(known)
    return sorted(
        k for k in environ if k.upper().startswith(ENV_PREFIX) and k.upper() not in names
        and not k.upper().startswith(OTHER_ENV_PREFIXES)
    )  # fmt: skip


def load_settings(
    config_file: Path | None = None, *, notes: list[str] | None = None, **overrides: Any
) -> BrokerSettings:
    """Build settings from all sources; raises ConfigError naming the bad key. `notes` receives warnings about
    the file (one line listing the Kafka properties that have no meaning here)."""
    _FileSource.path, _FileSource.notes, _FileSource.names = config_file, notes, {}
    try:
        settings = BrokerSettings(**{k: v for k, v in overrides.items() if v is not None})
        settings._property_names = {k: v for k, v in _FileSource.names.items() if overrides.get(k) is None}
        return settings
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, _FileSource.names)) from None
    finally:
        _FileSource.path, _FileSource.notes, _FileSource.names = None, None, {}
