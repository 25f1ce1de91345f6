"""Durable group state: an internal log of offset-commit and group-metadata records.

Each record's key names what it describes (`["o", group, topic, partition]`, `["g", group]`, or
`["t", group, producer id, topic, partition]` for a transaction's pending offset) and its value is JSON, or
null for a deletion. The log is a `storage.internal.InternalLog` under `<data>/__groups/`:
replayed on start (last record per key wins), rewritten when it holds many superseded records, and
recovered from damage (a damaged batch is skipped and reported, never a reason not to start). Appends go
through the same partition log and fsync policy as topic data, so an acknowledged commit survives kill -9.
"""

from __future__ import annotations

from pathlib import Path

from logbroker.storage.internal import COMPACT_MIN_RECORDS, InternalLog, Key, Record

__all__ = ["COMPACT_MIN_RECORDS", "STORE_DIR", "GroupStore", "Key", "Record", "group_key", "offset_key", "pending_key"]

STORE_DIR = "__groups"


def offset_key(group_id: str, topic: str, partition: int) -> Key:
    return ("o", group_id, topic, partition)


def pending_key(group_id: str, producer_id: int, topic: str, partition: int) -> Key:
    return ("t", group_id, producer_id, topic, partition)


def group_key(group_id: str) -> Key:
    return ("g", group_id)


class GroupStore(InternalLog):
    """The groups' internal log in `<data>/__groups`."""

    def __init__(self, data_dir: Path, clean_shutdown: bool, segment_bytes: int = 64 << 20) -> None:
        super().__init__(data_dir / STORE_DIR, clean_shutdown, segment_bytes)
