"""Kafka's topic configs: every name Kafka 4.4 accepts, its type, default, broker synonyms and checks.

A topic's effective `LogConfig` is its overrides over the broker's defaults; the broker's defaults come from
the synonyms (dynamic per-broker, dynamic cluster-wide, static settings, Kafka's default: see
broker/configs.py). Configs that mean nothing on one node (replication throttles, tiered-storage lags) are
validated, stored and reported as Kafka reports them, never refused as unknown.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from enum import IntEnum
from types import MappingProxyType
from typing import Any

from logbroker.protocol.errors import ErrorCode as E

LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1


class ConfigType(IntEnum):
    """DescribeConfigs' config_type (KIP-569)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigError(Exception):
    """A refused config value; `error` is the Kafka error code to answer with."""

    def __init__(self, message: str, error: E = E.INVALID_CONFIG) -> None:
        super().__init__(message)
        self.error = error


def _number(raw: str, kind: ConfigType) -> int | float:
    text = raw.strip()
    try:
        if kind is ConfigType.DOUBLE:
            return float(text)
        value = int(text)
    except ValueError:
        raise ValueError(f"Not a number of type {kind.name}") from None
    bounds = {ConfigType.INT: INT_MAX, ConfigType.SHORT: (1 << 15) - 1, ConfigType.LONG: LONG_MAX}[kind]
    if not -bounds - 1 <= value <= bounds:
        raise ValueError(f"Not a number of type {kind.name}")
    return value


def parse_typed(raw: str, kind: ConfigType) -> Any:
    """A config string as Kafka's ConfigDef parses it (ValueError carries Kafka's reason)."""
    if kind in (ConfigType.INT, ConfigType.SHORT, ConfigType.LONG, ConfigType.DOUBLE):
        return _number(raw, kind)
    if kind is ConfigType.BOOLEAN:
        text = raw.strip().lower()
        if text not in ("true", "false"):
            raise ValueError("Expected value to be either true or false")
        return text == "true"
    if kind is ConfigType.LIST:
        return [p.strip() for p in raw.split(",") if p.strip()]
    return raw.strip()


def render(value: Any) -> str:
    """A parsed value as Kafka prints it in its messages (2 -> 2.0 for doubles, lists comma-joined)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ",".join(value)
    if isinstance(value, float):
        return java_double(value)
    return str(value)


def java_double(x: float) -> str:
    """Java's Double.toString: plain from 10^-3 to 10^7 ("0.5", "10.0"), else computerized scientific
    notation ("1.7976931348623157E308", "1.0E7"), with the shortest digits that read back as `x`."""
    if x != x or x in (float("inf"), float("-inf")):
        return {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}[repr(x)]
    if x == 0 or 1e-3 <= abs(x) < 1e7:
        s = repr(x)
        if "e" in s:  # Python switches to exponents at 1e16; Java prints these plainly
            s = f"{x:.1f}" if x.is_integer() else format(x, "f")
        return s
    sign, digits, exp = Decimal(repr(x)).as_tuple()
    text = "".join(map(str, digits)).rstrip("0") or "0"
    exponent = len(digits) + int(exp) - 1
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{exponent}"


Check = Callable[[Any], str | None]


def at_least(low: float) -> Check:
    return lambda v: f"Value must be at least {low}" if v < low else None


def between(low: float, high: float) -> Check:
    def check(v: float) -> str | None:
        if v < low:
            return f"Value must be at least {low}"
        if v > high:
            return f"Value must be no more than {high}"
        return None

    return check


def one_of(*allowed: str) -> Check:
    return lambda v: None if v in allowed else f"String must be one of: {', '.join(allowed)}"


def each_in(*allowed: str) -> Check:
    def check(v: list[str]) -> str | None:
        bad = [x for x in v if x not in allowed]
        return f"String must be one of: {', '.join(allowed)}" if bad else None

    return check


def _gzip_level(v: int) -> str | None:
    return None if v == -1 or 1 <= v <= 9 else "Value must be between 1 and 9 or equal to -1"


COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")


def _compression(v: str) -> str | None:
    return None if v in COMPRESSION_TYPES else f"String must be one of: {', '.join(COMPRESSION_TYPES)}"


def _throttled(v: list[str]) -> str | None:
    """`*`, or partition:broker pairs (Kafka's ThrottledReplicaListValidator)."""
    if v == ["*"]:
        return None
    for item in v:
        part, sep, broker = item.partition(":")
        if not sep or not part.strip().isdigit() or not broker.strip().isdigit():
            return "must be the literal '*' or a list of replicas in the following format: [partitionId]:[brokerId],..."
    return None


@dataclass(frozen=True)
class TopicConfig:
    """One of Kafka's topic configs. `synonyms` are the broker configs that set its default, first wins;
    `scale` multiplies a synonym's value into the topic config's unit (log.retention.hours -> ms)."""

    name: str
    type: ConfigType
    default: str | None
    synonyms: tuple[str, ...] = ()
    check: Check | None = None
    target: str | None = None  # the LogConfig field it sets (None: stored and reported only)
    doc: str = ""
    scale: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))

    def parse(self, raw: str | None) -> Any:
        """The typed value of `raw`, or ConfigError with Kafka's message."""
        if raw is None:
            raise ConfigError(f"Null value not supported for : {self.name}", E.INVALID_REQUEST)
        try:
            value = parse_typed(raw, self.type)
        except ValueError as exc:
            raise ConfigError(f"Invalid value {raw} for configuration {self.name}: {exc}") from None
        why = self.check(value) if self.check is not None else None
        if why is not None:
            raise ConfigError(f"Invalid value {render(value)} for configuration {self.name}: {why}")
        return value


_HOURS, _MINUTES = 3_600_000, 60_000

TOPIC_CONFIGS: dict[str, TopicConfig] = {
    c.name: c
    for c in (
        TopicConfig("cleanup.policy", ConfigType.LIST, "delete", ("log.cleanup.policy",), each_in("compact", "delete"),
                    doc="delete: whole old segments go by time and size; compact: the last record per key is kept; "
                        "both; or empty: neither."),
        TopicConfig("compression.gzip.level", ConfigType.INT, "-1", ("compression.gzip.level",), _gzip_level,
                    "compression_gzip_level", doc="gzip level of batches this topic recompresses (-1: zlib's 6)."),
        TopicConfig("compression.lz4.level", ConfigType.INT, "9", ("compression.lz4.level",), between(1, 17),
                    "compression_lz4_level", doc="lz4 level of batches this topic recompresses."),
        TopicConfig("compression.type", ConfigType.STRING, "producer", ("compression.type",),
                    _compression, "compression_type",
                    doc="producer: batches are stored as the producer compressed them, untouched; a codec "
                        "(gzip, snappy, lz4, zstd) or uncompressed: batches in another codec are recompressed "
                        "to it on write, as Kafka does."),
        TopicConfig("compression.zstd.level", ConfigType.INT, "3", ("compression.zstd.level",), between(-131072, 22),
                    "compression_zstd_level", doc="zstd level of batches this topic recompresses."),
        TopicConfig("delete.retention.ms", ConfigType.LONG, "86400000", ("log.cleaner.delete.retention.ms",),
                    at_least(0), "delete_retention_ms",
                    doc="How long a tombstone stays readable after compaction reached it."),
        TopicConfig("errors.deadletterqueue.group.enable", ConfigType.BOOLEAN, "false"),
        TopicConfig("file.delete.delay.ms", ConfigType.LONG, "60000", ("log.segment.delete.delay.ms",), at_least(0)),
        TopicConfig("flush.messages", ConfigType.LONG, str(LONG_MAX), ("log.flush.interval.messages",), at_least(1),
                    doc="Stored and reported: logbroker's fsync policy (fsync before every acknowledgement by "
                        "default) is at least this strict."),
        TopicConfig("flush.ms", ConfigType.LONG, str(LONG_MAX), ("log.flush.interval.ms",), at_least(0)),
        TopicConfig("follower.replication.throttled.replicas", ConfigType.LIST, "", (), _throttled),
        TopicConfig("index.interval.bytes", ConfigType.INT, "4096", ("log.index.interval.bytes",), at_least(0),
                    "index_interval_bytes", doc="Bytes of log between two sparse offset-index entries."),
        TopicConfig("leader.replication.throttled.replicas", ConfigType.LIST, "", (), _throttled),
        TopicConfig("local.retention.bytes", ConfigType.LONG, "-2", ("log.local.retention.bytes",), at_least(-2)),
        TopicConfig("local.retention.ms", ConfigType.LONG, "-2", ("log.local.retention.ms",), at_least(-2)),
        TopicConfig("max.compaction.lag.ms", ConfigType.LONG, str(LONG_MAX), ("log.cleaner.max.compaction.lag.ms",),
                    at_least(1), "max_compaction_lag_ms",
                    doc="A record stays uncompacted at most this long, whatever the dirty ratio."),
        TopicConfig("max.decompressed.message.bytes", ConfigType.INT, "2147483639",
                    ("max.decompressed.message.bytes",), at_least(0)),
        TopicConfig("max.message.bytes", ConfigType.INT, "1048588", ("message.max.bytes",), at_least(0),
                    "max_message_bytes", doc="Largest record batch a produce may carry for this topic."),
        TopicConfig("message.downconversion.enable", ConfigType.BOOLEAN, "true",
                    ("log.message.downconversion.enable",), None, "downconversion_enable",
                    doc="Fetch v0-v3 (pre-0.11 readers) get this topic's batches converted to their message "
                        "format; false: UNSUPPORTED_VERSION for them (Kafka 3.x's config; Kafka 4 removed it)."),
        TopicConfig("message.timestamp.after.max.ms", ConfigType.LONG, "3600000",
                    ("log.message.timestamp.after.max.ms",), at_least(0), "message_timestamp_after_max_ms"),
        TopicConfig("message.timestamp.before.max.ms", ConfigType.LONG, str(LONG_MAX),
                    ("log.message.timestamp.before.max.ms",), at_least(0), "message_timestamp_before_max_ms"),
        TopicConfig("message.timestamp.type", ConfigType.STRING, "CreateTime", ("log.message.timestamp.type",),
                    one_of("CreateTime", "LogAppendTime"), "log_append_time"),
        TopicConfig("min.cleanable.dirty.ratio", ConfigType.DOUBLE, "0.5", ("log.cleaner.min.cleanable.ratio",),
                    between(0, 1), "min_cleanable_dirty_ratio",
                    doc="Compact once the uncompacted part is at least this share of the log."),
        TopicConfig("min.compaction.lag.ms", ConfigType.LONG, "0", ("log.cleaner.min.compaction.lag.ms",),
                    at_least(0), "min_compaction_lag_ms", doc="A record younger than this is never compacted away."),
        TopicConfig("min.insync.replicas", ConfigType.INT, "1", ("min.insync.replicas",), at_least(1),
                    doc="Stored and reported: Kafka 4 caps it at the replication factor, so on one node acks=all "
                        "never waits for more."),
        TopicConfig("preallocate", ConfigType.BOOLEAN, "false", ("log.preallocate",)),
        TopicConfig("remote.copy.lag.bytes", ConfigType.LONG, "-1", ("log.remote.copy.lag.bytes",), at_least(-1)),
        TopicConfig("remote.copy.lag.ms", ConfigType.LONG, "0", ("log.remote.copy.lag.ms",), at_least(0)),
        TopicConfig("remote.log.copy.disable", ConfigType.BOOLEAN, "false"),
        TopicConfig("remote.log.delete.on.disable", ConfigType.BOOLEAN, "false"),
        TopicConfig("remote.storage.enable", ConfigType.BOOLEAN, "false"),
        TopicConfig("retention.bytes", ConfigType.LONG, "-1", ("log.retention.bytes",), None, "retention_bytes",
                    doc="Oldest whole segments are deleted while a partition is larger than this (-1: no limit)."),
        TopicConfig("retention.ms", ConfigType.LONG, "604800000",
                    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"), at_least(-1),
                    "retention_ms", scale={"log.retention.minutes": _MINUTES, "log.retention.hours": _HOURS},
                    doc="Whole segments whose newest record is older than this are deleted (-1: keep forever)."),
        TopicConfig("segment.bytes", ConfigType.INT, "1073741824", ("log.segment.bytes",), at_least(14),
                    "segment_bytes", doc="Size at which a partition's active segment file is rolled."),
        TopicConfig("segment.index.bytes", ConfigType.INT, "10485760", ("log.index.size.max.bytes",), at_least(4)),
        TopicConfig("segment.jitter.ms", ConfigType.LONG, "0", ("log.roll.jitter.ms", "log.roll.jitter.hours"),
                    at_least(0), scale={"log.roll.jitter.hours": _HOURS}),
        TopicConfig("segment.ms", ConfigType.LONG, "604800000", ("log.roll.ms", "log.roll.hours"), at_least(1),
                    "segment_ms", scale={"log.roll.hours": _HOURS},
                    doc="Age at which a partition's active segment is rolled even if not full."),
        TopicConfig("unclean.leader.election.enable", ConfigType.BOOLEAN, "false", ("unclean.leader.election.enable",)),
    )
}  # fmt: skip

# Broker config name -> (topic config, scale): what a broker-level value sets the default of.
BROKER_SYNONYMS: dict[str, tuple[TopicConfig, int]] = {
    syn: (c, c.scale.get(syn, 1)) for c in TOPIC_CONFIGS.values() for syn in c.synonyms
}


def check_topic_configs(configs: Mapping[str, str | None]) -> dict[str, Any]:
    """Every override parsed, or ConfigError for the first bad one (Kafka reports one per resource)."""
    out: dict[str, Any] = {}
    for key, raw in configs.items():
        spec = TOPIC_CONFIGS.get(key)
        if spec is None:
            raise ConfigError(f"Unknown topic config name: {key}")
        out[key] = spec.parse(raw)
    if out.get("remote.storage.enable"):
        raise ConfigError(
            "Tiered Storage functionality is disabled in the broker. "
            "Topic cannot be configured with remote log storage."
        )
    return out


def apply(values: dict[str, Any], spec: TopicConfig, value: Any) -> None:
    """Set the LogConfig fields `spec` governs to `value` (a parsed value of the topic config's unit)."""
    if spec.name == "cleanup.policy":
        values["cleanup_delete"] = "delete" in value
        values["cleanup_compact"] = "compact" in value
    elif spec.name == "message.timestamp.type":
        values["log_append_time"] = value == "LogAppendTime"
    elif spec.target is not None:
        values[spec.target] = value


@dataclass(slots=True)
class LogConfig:
    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * 24 * 3600 * 1000
    retention_ms: int = 7 * 24 * 3600 * 1000  # -1: keep forever
    retention_bytes: int = -1  # -1: no size limit
    index_interval_bytes: int = 4096
    max_message_bytes: int = 1048588
    log_append_time: bool = False  # message.timestamp.type=LogAppendTime
    compression_type: str = "producer"  # compression.type: producer keeps batches as they arrive
    compression_gzip_level: int = -1  # the levels of a recompression to that codec (KIP-390)
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    downconversion_enable: bool = True  # message.downconversion.enable: Fetch v0-v3 answered by conversion
    # KIP-937 bounds on a CreateTime record's timestamp against the broker's clock (Kafka 4 defaults).
    message_timestamp_before_max_ms: int = (1 << 63) - 1
    message_timestamp_after_max_ms: int = 3_600_000
    # cleanup.policy: `delete` removes whole segments by time and size; `compact` keeps the last record per
    # key. A compact-only log is never time- or size-deleted, as in Kafka.
    cleanup_delete: bool = True
    cleanup_compact: bool = False
    # Compaction (Kafka's topic configs of the same names).
    delete_retention_ms: int = 86_400_000  # tombstones stay readable this long after their segment is cleaned
    min_compaction_lag_ms: int = 0  # a record younger than this is never compacted away
    max_compaction_lag_ms: int = (1 << 63) - 1  # a dirty record older than this is cleaned whatever the ratio
    min_cleanable_dirty_ratio: float = 0.5  # clean once dirty bytes / (clean + dirty) bytes reach this
