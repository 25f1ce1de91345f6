"""All topics of one data directory: topic metadata, partition logs, the clean-shutdown marker."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from logbroker.protocol.errors import ErrorCode as E

from .log import LogConfig, PartitionLog, _write_atomic

log = logging.getLogger(__name__)

CLEAN_MARKER = ".clean-shutdown"
TOPICS_DIR = "__topics"
LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME = 249

# Topic-level configs we honour, with how they map onto LogConfig fields.
TOPIC_CONFIG_KEYS = {
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "index.interval.bytes": "index_interval_bytes",
    "max.message.bytes": "max_message_bytes",
}
# Accepted and reported, but with no effect on a single node.
PASSIVE_TOPIC_CONFIGS = {
    "cleanup.policy": "delete",
    "compression.type": "producer",
    "min.insync.replicas": "1",
    "message.timestamp.type": "CreateTime",
    "unclean.leader.election.enable": "false",
}


class TopicError(Exception):
    """A topic operation refused with Kafka's error code `error`."""

    def __init__(self, error: E, message: str) -> None:
        super().__init__(message)
        self.error = error


def validate_topic_name(name: str) -> None:
    if not name or name in (".", ".."):
        raise TopicError(E.INVALID_TOPIC_EXCEPTION, f"topic name {name!r} is not allowed")
    if len(name) > MAX_TOPIC_NAME:
        raise TopicError(E.INVALID_TOPIC_EXCEPTION, f"topic name longer than {MAX_TOPIC_NAME} characters")
    if not LEGAL_TOPIC.match(name):
        raise TopicError(E.INVALID_TOPIC_EXCEPTION, f"topic name {name!r} has characters other than [a-zA-Z0-9._-]")


@dataclass
class TopicMeta:
    name: str
    partitions: int
    topic_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    configs: dict[str, str] = field(default_factory=dict)
    internal: bool = False

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "partitions": self.partitions,
            "topic_id": self.topic_id,
            "configs": self.configs,
            "internal": self.internal,
        }


def parse_topic_configs(configs: dict[str, str | None], defaults: LogConfig) -> LogConfig:
    """Apply topic-level overrides on top of broker defaults; raises TopicError(INVALID_CONFIG)."""
    values = {f: getattr(defaults, f) for f in LogConfig.__dataclass_fields__}
    for key, val in configs.items():
        if key in TOPIC_CONFIG_KEYS:
            try:
                values[TOPIC_CONFIG_KEYS[key]] = int(val) if val is not None else values[TOPIC_CONFIG_KEYS[key]]
            except ValueError:
                raise TopicError(E.INVALID_CONFIG, f"config {key}={val!r} is not an integer") from None
        elif key == "message.timestamp.type":
            if val not in ("CreateTime", "LogAppendTime"):
                raise TopicError(
                    E.INVALID_CONFIG, f"message.timestamp.type must be CreateTime or LogAppendTime, not {val!r}"
                )
            values["log_append_time"] = val == "LogAppendTime"
        elif key not in PASSIVE_TOPIC_CONFIGS:
            raise TopicError(E.INVALID_CONFIG, f"unknown topic config {key!r}")
    if key_bad := next((k for k in ("segment_bytes", "index_interval_bytes") if values[k] < 14), None):
        raise TopicError(E.INVALID_CONFIG, f"{key_bad.replace('_', '.')} is too small")
    return LogConfig(**values)


class LogManager:
    """Owns the data directory (locked against a second broker) and every partition log in it."""

    def __init__(self, data_dir: Path, defaults: LogConfig) -> None:
        self.data_dir = Path(data_dir)
        self.defaults = defaults
        self.data_dir.mkdir(parents=True, exist_ok=True)
        fresh = not (self.data_dir / TOPICS_DIR).exists()
        self._lock_fd = os.open(self.data_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise RuntimeError(f"data directory {self.data_dir} is in use by another broker") from None
        marker = self.data_dir / CLEAN_MARKER
        self.clean_start = fresh or marker.exists()
        self.topics: dict[str, TopicMeta] = {}
        self._by_id: dict[str, TopicMeta] = {}  # topic id (KIP-516) -> topic, kept with `topics`
        self.changes = 0  # bumped whenever a topic is created, grown or deleted (for derived tables)
        self.logs: dict[tuple[str, int], PartitionLog] = {}
        self._meta_dir = self.data_dir / TOPICS_DIR
        self._meta_dir.mkdir(exist_ok=True)
        self._load()
        if marker.exists():
            marker.unlink()

    def _load(self) -> None:
        for p in sorted(self._meta_dir.glob("*.json")):
            try:
                meta = TopicMeta(**json.loads(p.read_text()))
            except (ValueError, TypeError) as exc:
                log.error("ignoring unreadable topic metadata %s: %s", p, exc)
                continue
            self.topics[meta.name] = meta
            self._by_id[meta.topic_id] = meta
            cfg = parse_topic_configs(meta.configs, self.defaults)
            for i in range(meta.partitions):
                self.logs[(meta.name, i)] = PartitionLog(self._part_dir(meta.name, i), cfg, self.clean_start)
        # Partition directories of topics whose deletion was interrupted.
        for d in self.data_dir.iterdir():
            if d.is_dir() and d.name.endswith(".deleted"):
                shutil.rmtree(d, ignore_errors=True)

    def _part_dir(self, topic: str, partition: int) -> Path:
        return self.data_dir / f"{topic}-{partition}"

    def _save_meta(self, meta: TopicMeta) -> None:
        _write_atomic(self._meta_dir / f"{meta.name}.json", json.dumps(meta.to_json()).encode())

    def create_topic(
        self, name: str, partitions: int, configs: dict[str, str | None] | None = None, internal: bool = False
    ) -> TopicMeta:
        validate_topic_name(name)
        if name in self.topics:
            raise TopicError(E.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        if partitions <= 0:
            raise TopicError(E.INVALID_PARTITIONS, f"number of partitions must be positive, got {partitions}")
        clean = {k: v for k, v in (configs or {}).items() if v is not None}
        cfg = parse_topic_configs(clean, self.defaults)
        meta = TopicMeta(name, partitions, configs=clean, internal=internal)
        for i in range(partitions):
            self.logs[(name, i)] = PartitionLog(self._part_dir(name, i), cfg, clean_shutdown=True)
        self._save_meta(meta)
        self.topics[name] = meta
        self._by_id[meta.topic_id] = meta
        self.changes += 1
        return meta

    def create_partitions(self, name: str, count: int) -> None:
        meta = self.topics.get(name)
        if meta is None:
            raise TopicError(E.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        if count <= meta.partitions:
            raise TopicError(
                E.INVALID_PARTITIONS, f"topic {name!r} has {meta.partitions} partitions; new count must be larger"
            )
        cfg = parse_topic_configs(meta.configs, self.defaults)
        for i in range(meta.partitions, count):
            self.logs[(name, i)] = PartitionLog(self._part_dir(name, i), cfg, clean_shutdown=True)
        meta.partitions = count
        self._save_meta(meta)
        self.changes += 1

    def delete_topic(self, name: str) -> TopicMeta:
        meta = self.topics.pop(name, None)
        if meta is None:
            raise TopicError(E.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        self._by_id.pop(meta.topic_id, None)
        self.changes += 1
        (self._meta_dir / f"{name}.json").unlink(missing_ok=True)
        for i in range(meta.partitions):
            plog = self.logs.pop((name, i), None)
            if plog is not None:
                for s in plog.segments:
                    s.close()
                d = self._part_dir(name, i)
                tomb = d.with_name(d.name + f".{meta.topic_id[:8]}.deleted")
                os.replace(d, tomb)
                shutil.rmtree(tomb, ignore_errors=True)
        return meta

    def topic_by_id(self, topic_id: str) -> TopicMeta | None:
        return self._by_id.get(topic_id)

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self.logs.get((topic, partition))

    def enforce_retention(self) -> int:
        return sum(plog.enforce_retention() for plog in self.logs.values())

    def close(self) -> None:
        for plog in self.logs.values():
            plog.close()
        _write_atomic(self.data_dir / CLEAN_MARKER, b"1")
        fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        os.close(self._lock_fd)
