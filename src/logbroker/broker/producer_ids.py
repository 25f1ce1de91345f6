"""Producer ids that stay unique across restarts: ids are handed out from durably reserved blocks."""

from __future__ import annotations

import os
from pathlib import Path

BLOCK = 1000


class ProducerIdAllocator:
    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._limit = int(path.read_text())
        except (FileNotFoundError, ValueError):
            self._limit = 0
        self._next = self._limit

    def _reserve(self) -> None:
        new_limit = self._next + BLOCK
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, str(new_limit).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        self._limit = new_limit

    def next_id(self) -> int:
        if self._next >= self._limit:
            self._reserve()
        pid = self._next
        self._next += 1
        return pid
