"""Durable group state: an internal log of offset-commit and group-metadata records.

Each record's key names what it describes (`["o", group, topic, partition]` or `["g", group]`) and its
value is JSON, or null for a deletion. On start the log is replayed (last record per key wins), and
when it holds many superseded records it is rewritten with only the live ones ("compacted on load").
Appends go through the same partition log and fsync policy as topic data, so an acknowledged commit
survives kill -9.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from logbroker.protocol.records import NewRecord, build_batch, decode_records, validate_produce
from logbroker.storage import LogConfig, PartitionLog

log = logging.getLogger(__name__)

STORE_DIR = "__groups"
COMPACT_MIN_RECORDS = 1000

Key = tuple[Any, ...]
Record = tuple[Key, Any]  # (key, JSON value); a None value deletes the key


def offset_key(group_id: str, topic: str, partition: int) -> Key:
    return ("o", group_id, topic, partition)


def group_key(group_id: str) -> Key:
    return ("g", group_id)


class GroupStore:
    def __init__(self, data_dir: Path, clean_shutdown: bool, segment_bytes: int = 64 << 20) -> None:
        self.dir = data_dir / STORE_DIR
        self.config = LogConfig(segment_bytes=segment_bytes, retention_ms=-1, max_message_bytes=64 << 20)
        tmp = self.dir.with_name(STORE_DIR + ".compact")
        old = self.dir.with_name(STORE_DIR + ".old")
        if not self.dir.exists() and tmp.exists():  # crashed between the two renames of a rewrite
            os.replace(tmp, self.dir)
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
        self.log = PartitionLog(self.dir, self.config, clean_shutdown)
        self.records_in_log = 0

    def load(self) -> dict[Key, Any]:
        """Replay the log: the live value of every key (deleted keys are absent)."""
        live: dict[Key, Any] = {}
        offset = self.log.log_start_offset
        count = 0
        while offset < self.log.next_offset:
            data = self.log.read(offset, 8 << 20)
            if not data:
                break
            for rec in decode_records(data):
                if rec.offset < offset or rec.key is None:
                    continue
                count += 1
                key = tuple(json.loads(rec.key))
                if rec.value is None:
                    live.pop(key, None)
                else:
                    live[key] = json.loads(rec.value)
                offset = rec.offset + 1
        self.records_in_log = count
        if count >= COMPACT_MIN_RECORDS and count > 2 * len(live):
            self._rewrite(live)
        return live

    def _rewrite(self, live: dict[Key, Any]) -> None:
        tmp = self.dir.with_name(STORE_DIR + ".compact")
        shutil.rmtree(tmp, ignore_errors=True)
        fresh = PartitionLog(tmp, self.config, True)
        items = list(live.items())
        for i in range(0, len(items), 500):
            self._append_to(fresh, items[i : i + 500])
        fresh.close()
        for s in self.log.segments:
            s.close()
        old = self.dir.with_name(STORE_DIR + ".old")
        os.replace(self.dir, old)
        os.replace(tmp, self.dir)
        _fsync_dir(self.dir.parent)
        shutil.rmtree(old, ignore_errors=True)
        log.info("compacted group log: %d records -> %d live keys", self.records_in_log, len(live))
        self.log = PartitionLog(self.dir, self.config, True)
        self.records_in_log = len(live)

    @staticmethod
    def _append_to(plog: PartitionLog, items: list[Record]) -> None:
        recs = [
            NewRecord(json.dumps(list(k)).encode(), None if v is None else json.dumps(v).encode()) for k, v in items
        ]
        buf = bytearray(build_batch(recs))
        plog.append(buf, validate_produce(buf, 1 << 30))

    def append(self, items: list[Record]) -> PartitionLog:
        """Write records (value None deletes the key); the caller awaits the fsync policy."""
        if items:
            self._append_to(self.log, items)
            self.records_in_log += len(items)
        return self.log

    def close(self) -> None:
        self.log.close()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
