"""All topics of one data directory: topic metadata, partition logs, the clean-shutdown marker."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import shutil
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from logbroker.protocol.errors import ErrorCode as E

from .configs import TOPIC_CONFIGS, ConfigError, apply, check_topic_configs
from .files import FileCache, write_atomic
from .log import AppendListener, LogConfig, PartitionLog

log = logging.getLogger(__name__)

CLEAN_MARKER = ".clean-shutdown"
TOPICS_DIR = "__topics"
LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
PARTITION_DIR = re.compile(r"^([a-zA-Z0-9._-]+)-([0-9]+)$")
MAX_TOPIC_NAME = 249
# Kafka's internal topics (Topic.INTERNAL_TOPICS): made by the broker, listed as internal, closed to produces.
KAFKA_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


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


def parse_topic_configs(configs: Mapping[str, str | None], defaults: LogConfig) -> LogConfig:
    """A topic's LogConfig: its overrides (Kafka's topic configs, checked as Kafka checks them) over the
    broker's defaults; raises TopicError(INVALID_CONFIG) with Kafka's message."""
    try:
        parsed = check_topic_configs(configs)
    except ConfigError as exc:
        raise TopicError(exc.error, str(exc)) from None
    values = {f: getattr(defaults, f) for f in LogConfig.__dataclass_fields__}
    for key, value in parsed.items():
        apply(values, TOPIC_CONFIGS[key], value)
    return LogConfig(**values)


class LogManager:
    """Owns the data directory (locked against a second broker) and every partition log in it."""

    def __init__(
        self,
        data_dir: Path,
        defaults: LogConfig,
        max_open_files: int | None = None,
        preallocate: int = 0,
        on_append: AppendListener | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.on_append = on_append  # told of every write to every partition log (see PartitionLog.append)
        self.defaults = defaults
        self.preallocate = preallocate  # bytes each active segment reserves ahead of small appends
        # Every partition's segment files share one budget of descriptors (see storage/files.py).
        self.files = FileCache(max_open_files)
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
        # Topics present on disk that cannot be served (unreadable metadata, or records without metadata):
        # name -> why. They are never created anew over their old directories.
        self.unavailable: dict[str, str] = {}
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
                meta = _read_meta(p)
                cfg = parse_topic_configs(meta.configs, self.defaults)
            except (ValueError, TypeError, TopicError) as exc:
                self._refuse(p.stem, f"its metadata file {p} is unreadable ({exc})")
                continue
            self.topics[meta.name] = meta
            self._by_id[meta.topic_id] = meta
            for i in range(meta.partitions):
                self.logs[(meta.name, i)] = PartitionLog(
                    self._part_dir(meta.name, i), cfg, self.clean_start, files=self.files,
                    preallocate=self.preallocate, key=(meta.name, i), on_append=self.on_append,
                )  # fmt: skip
        # Partition directories of topics whose deletion was interrupted; and records without metadata.
        orphans: dict[str, list[str]] = {}
        for d in self.data_dir.iterdir():
            if d.is_dir() and d.name.endswith(".deleted"):
                shutil.rmtree(d, ignore_errors=True)
                continue
            m = PARTITION_DIR.match(d.name)
            if m is None or m[1].startswith("__") or not d.is_dir() or (m[1], int(m[2])) in self.logs:
                continue
            if _holds_records(d):
                orphans.setdefault(m[1], []).append(d.name)
        for name, dirs in sorted(orphans.items()):
            if name in self.unavailable:
                continue
            where = ", ".join(sorted(dirs))
            if name in self.topics:
                n = self.topics[name].partitions
                log.error("%s: directories %s beyond its %d partitions hold records; not served", name, where, n)
            else:
                missing = self._meta_dir / f"{name}.json"
                self._refuse(name, f"its partition directories ({where}) hold records but {missing} is missing")

    def _refuse(self, name: str, why: str) -> None:
        reason = (
            f"topic {name!r} is unavailable: {why}; it is not served and will not be re-created over its old "
            f"data: restore the metadata file, or move the topic's directories away, and restart"
        )
        self.unavailable[name] = reason
        log.error("%s", reason)

    def _part_dir(self, topic: str, partition: int) -> Path:
        return self.data_dir / f"{topic}-{partition}"

    def _save_meta(self, meta: TopicMeta) -> None:
        write_atomic(self._meta_dir / f"{meta.name}.json", json.dumps(meta.to_json()).encode())

    def create_topic(
        self, name: str, partitions: int, configs: dict[str, str | None] | None = None, internal: bool = False
    ) -> TopicMeta:
        """Create a topic whole or not at all: a full disk or a lack of descriptors raises
        TopicError(KAFKA_STORAGE_ERROR) and leaves no directory, metadata or open file behind."""
        validate_topic_name(name)
        if name in self.topics:
            raise TopicError(E.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        if name in self.unavailable:
            raise TopicError(E.KAFKA_STORAGE_ERROR, self.unavailable[name])
        if partitions <= 0:
            raise TopicError(E.INVALID_PARTITIONS, f"number of partitions must be positive, got {partitions}")
        clean = {k: v for k, v in (configs or {}).items() if v is not None}
        cfg = parse_topic_configs(clean, self.defaults)
        meta = TopicMeta(name, partitions, configs=clean, internal=internal)
        opened = self._open_new_partitions(name, range(partitions), cfg)
        try:
            self._save_meta(meta)
        except OSError as exc:
            self._discard(name, opened, [plog.dir for plog in opened.values()])
            raise _storage_error(f"could not create topic {name!r}", exc) from None
        self.logs.update(opened)
        self.topics[name] = meta
        self._by_id[meta.topic_id] = meta
        self.changes += 1
        return meta

    def create_partitions(self, name: str, count: int) -> None:
        """Grow a topic all or nothing, as `create_topic`: on a storage failure the count stays."""
        meta = self.topics.get(name)
        if meta is None:
            raise TopicError(E.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        if count <= meta.partitions:
            raise TopicError(
                E.INVALID_PARTITIONS, f"topic {name!r} has {meta.partitions} partitions; new count must be larger"
            )
        cfg = parse_topic_configs(meta.configs, self.defaults)
        opened = self._open_new_partitions(name, range(meta.partitions, count), cfg)
        grown = TopicMeta(name, count, meta.topic_id, dict(meta.configs), meta.internal)
        try:
            self._save_meta(grown)
        except OSError as exc:
            self._discard(name, opened, [plog.dir for plog in opened.values()])
            raise _storage_error(f"could not add partitions to topic {name!r}", exc) from None
        self.logs.update(opened)
        meta.partitions = count
        self.changes += 1

    def _open_new_partitions(self, name: str, indexes: range, cfg: LogConfig) -> dict[tuple[str, int], PartitionLog]:
        """Fresh partition logs for `indexes`; on failure every one opened here is closed and removed.

        A directory already there is a leftover of an interrupted create when it holds no records, and
        is replaced; one that holds records belongs to a topic whose metadata is lost: refused."""
        opened: dict[tuple[str, int], PartitionLog] = {}
        made: list[Path] = []  # directories this call made (or emptied leftovers it replaced)
        i = indexes.start
        try:
            for i in indexes:
                d = self._part_dir(name, i)
                if d.exists():
                    if _holds_records(d):
                        raise TopicError(
                            E.KAFKA_STORAGE_ERROR,
                            f"cannot create partition {i} of topic {name!r}: {d} holds records of an earlier "
                            f"topic whose metadata is lost; move it away first",
                        )
                    shutil.rmtree(d)
                made.append(d)
                opened[(name, i)] = PartitionLog(
                    d, cfg, clean_shutdown=True, files=self.files, preallocate=self.preallocate,
                    key=(name, i), on_append=self.on_append,
                )  # fmt: skip
        except OSError as exc:
            self._discard(name, opened, made)
            raise _storage_error(f"could not create partition {i} of topic {name!r}", exc) from None
        except BaseException:
            self._discard(name, opened, made)
            raise
        return opened

    def _discard(self, name: str, opened: dict[tuple[str, int], PartitionLog], made: list[Path]) -> None:
        """Undo `_open_new_partitions`: close every file first (removing needs descriptors, and running out
        of them may be why the create failed), then remove the directories."""
        for plog in opened.values():
            for seg in plog.segments:
                seg.close()
        for d in made:
            shutil.rmtree(d, ignore_errors=True)
        left = [d.name for d in made if d.exists()]
        if left:
            log.error("%s: could not remove %s after a failed create", name, ", ".join(left))
        elif made:
            log.warning("%s: removed the %d partition directories of a create that failed", name, len(made))

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
                tomb = d.with_name(f"{d.name[:200]}.{meta.topic_id[:8]}.deleted")  # file names end at 255
                os.replace(d, tomb)
                shutil.rmtree(tomb, ignore_errors=True)
        return meta

    def alter_topic_configs(self, name: str, overrides: Mapping[str, str], validate_only: bool = False) -> None:
        """Replace a topic's overrides (checked whole first), durably, and apply them to its live logs at once."""
        meta = self.topics.get(name)
        if meta is None:
            raise TopicError(E.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")
        cfg = parse_topic_configs(overrides, self.defaults)
        if validate_only:
            return
        updated = TopicMeta(name, meta.partitions, meta.topic_id, dict(overrides), meta.internal)
        try:
            self._save_meta(updated)
        except OSError as exc:
            raise _storage_error(f"could not save the configs of topic {name!r}", exc) from None
        meta.configs = dict(overrides)
        for i in range(meta.partitions):
            if (plog := self.logs.get((name, i))) is not None:
                plog.config = cfg

    def set_defaults(self, defaults: LogConfig) -> None:
        """New broker-level defaults (a dynamic broker config changed): every topic's config is rebuilt."""
        self.defaults = defaults
        for meta in self.topics.values():
            cfg = parse_topic_configs(meta.configs, defaults)
            for i in range(meta.partitions):
                if (plog := self.logs.get((meta.name, i))) is not None:
                    plog.config = cfg

    def topic_by_id(self, topic_id: str) -> TopicMeta | None:
        return self._by_id.get(topic_id)

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self.logs.get((topic, partition))

    def enforce_retention(self) -> int:
        return sum(plog.enforce_retention() for plog in self.logs.values())

    def close(self) -> None:
        for plog in self.logs.values():
            plog.close()
        write_atomic(self.data_dir / CLEAN_MARKER, b"1")
        fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        os.close(self._lock_fd)


def _read_meta(path: Path) -> TopicMeta:
    """A topic's metadata file, checked field by field (raises ValueError/TypeError when damaged)."""
    raw = json.loads(path.read_bytes())
    if not isinstance(raw, dict):
        raise ValueError("not a JSON object")
    meta = TopicMeta(**raw)
    if meta.name != path.stem:
        raise ValueError(f"it names topic {meta.name!r}")
    if not isinstance(meta.partitions, int) or isinstance(meta.partitions, bool) or meta.partitions <= 0:
        raise ValueError(f"partitions is {meta.partitions!r}")
    if not isinstance(meta.topic_id, str):
        raise TypeError("topic_id is not a string")
    uuid.UUID(meta.topic_id)
    if not isinstance(meta.configs, dict) or not all(isinstance(v, str) for v in meta.configs.values()):
        raise ValueError("configs is not an object of strings")
    return meta


def _holds_records(d: Path) -> bool:
    """Whether a partition directory holds data: a non-empty segment, a segment past offset 0 or a moved
    log start. A fresh partition's empty files (and its indexes or producer snapshot) do not count."""
    try:
        for f in d.iterdir():
            if f.suffix == ".log" and (f.stem != "0" * 20 or f.stat().st_size > 0):
                return True
            if f.name == "log-start-offset":
                return True
    except NotADirectoryError:
        return True
    return False


def _storage_error(what: str, exc: OSError) -> TopicError:
    """KAFKA_STORAGE_ERROR, as Kafka answers when a log directory fails (disk full, descriptors)."""
    log.warning("%s: %s", what, exc)
    return TopicError(E.KAFKA_STORAGE_ERROR, f"{what}: {exc.strerror or exc}")
