"""Producer ids that stay unique across restarts: ids are handed out from durably reserved blocks.

The file `__producer_ids` holds the reservation limit (no id at or above it was ever handed out) twice, in
two checksummed slots, and each reservation overwrites the older slot. So a torn write or a damaged byte
costs at most one slot, and the other one bounds the truth: the lost slot held that value or one block
more, and starting one block above the survivor can never hand out an id twice (a skipped block costs
nothing: ids are 64-bit). Only when neither slot is readable does the broker refuse to start: any id it
then picked could repeat one a client still holds. The first version's file (the limit as decimal text)
is read and converted on the next reservation.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from crc32c import crc32c

from logbroker.storage.files import fsync_dir

BLOCK = 1000
MAGIC = b"LBPI"
_SLOT = struct.Struct(">4sqI")  # magic, limit, CRC32C of magic + limit


class ProducerIdStateError(RuntimeError):
    """The reservation file is unreadable: handing out ids could repeat one."""


def _pack(limit: int) -> bytes:
    head = MAGIC + limit.to_bytes(8, "big", signed=True)
    return _SLOT.pack(MAGIC, limit, crc32c(head))


def _unpack(raw: bytes) -> int | None:
    if len(raw) != _SLOT.size:
        return None
    magic, limit, crc = _SLOT.unpack(raw)
    if magic != MAGIC or crc != crc32c(raw[:12]) or limit < 0:
        return None
    return limit


class ProducerIdAllocator:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._slots: list[int | None] = [None, None]  # what each slot on disk holds (None: nothing valid)
        self._limit = self._read()
        self._next = self._limit

    def _read(self) -> int:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return 0
        text = raw.strip()
        if text.isdigit() and len(text) <= 18:  # the first version's format: the limit as text
            return int(text)
        slots = [_unpack(raw[i * _SLOT.size : (i + 1) * _SLOT.size]) for i in range(2)]
        good = [v for v in slots if v is not None]
        if not good:
            raise ProducerIdStateError(
                f"{self.path} is damaged (no readable producer-id reservation): refusing to start, since any "
                f"producer id handed out now could repeat one a client holds. Write into it, as decimal text, "
                f"a number above every producer id this broker handed out (e.g. the largest producerId in the "
                f"partitions' producer-state.json files plus 1000000), then start again"
            )
        self._slots = slots
        if len(good) == 2:
            return max(good)
        return good[0] + BLOCK  # the other slot held this value or one block more

    def _reserve(self) -> None:
        """Make `_next + BLOCK` the durable limit before any id below it is handed out."""
        new_limit = self._next + BLOCK
        if None in self._slots or not self.path.exists():
            # New, converted or partly damaged file: write both slots whole, atomically.
            tmp = self.path.with_suffix(".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                _write_all(fd, _pack(new_limit) * 2, 0)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
            fsync_dir(self.path.parent)
            self._slots = [new_limit, new_limit]
        else:
            older = 0 if (self._slots[0] or 0) <= (self._slots[1] or 0) else 1
            fd = os.open(self.path, os.O_WRONLY)
            try:
                _write_all(fd, _pack(new_limit), older * _SLOT.size)
                os.fdatasync(fd)
            finally:
                os.close(fd)
            self._slots[older] = new_limit
        self._limit = new_limit

    def next_id(self) -> int:
        if self._next >= self._limit:
            self._reserve()
        pid = self._next
        self._next += 1
        return pid


def _write_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n
