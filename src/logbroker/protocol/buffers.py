"""Reusable buffers for large response frames.

A fresh megabyte-sized buffer per fetch response costs more than the copies it replaced: the allocator
hands large blocks back to the kernel on free, so every new one is zeroed and page-faulted again
(measured: 0.2 ms per 1 MB response, a quarter of the broker's fetch CPU). Frames are taken here when
encoded and given back once the transport has taken them (asyncio copies whatever it does not send at
once), so a busy broker keeps reusing a few warm buffers. A pool belongs to one event loop (one broker): it is
not thread-safe, and several embedded brokers may run in one process.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable
from typing import Any

POOLED_MIN = 64 * 1024  # smaller frames are cheap to allocate fresh


def anonymous(size: int) -> mmap.mmap:
    """Private anonymous memory: pages are committed only as bytes land in them, so an idle connection
    costs a page or two rather than its whole staging buffer (10,000 zero-filled 256 KiB buffers were
    2.5 GB), and a large frame only what has arrived of it."""
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE)


class BufferPool:
    """Free buffers by capacity (powers of two), bounded in count and total bytes; `allocate` makes a new
    one (bytearray, or anonymous memory for request frames)."""

    def __init__(
        self, max_bytes: int = 128 << 20, max_buffers: int = 16, allocate: Callable[[int], Any] = bytearray
    ) -> None:
        self.max_bytes = max_bytes
        self.max_buffers = max_buffers
        self._allocate = allocate
        self._free: list[bytearray] = []
        self._bytes = 0

    def take(self, size: int) -> Any:
        """A buffer of at least `size` bytes (contents undefined)."""
        best = -1
        for i, buf in enumerate(self._free):
            if len(buf) >= size and (best < 0 or len(buf) < len(self._free[best])):
                best = i
        if best >= 0:
            buf = self._free.pop(best)
            self._bytes -= len(buf)
            return buf
        return self._allocate(max(POOLED_MIN, 1 << (size - 1).bit_length()))

    def give(self, buf: Any) -> None:
        """Return a buffer nobody references any more."""
        n = len(buf)
        if n < POOLED_MIN or n > self.max_bytes:
            return
        while self._free and (len(self._free) >= self.max_buffers or self._bytes + n > self.max_bytes):
            self._bytes -= len(self._free.pop(0))  # the oldest goes
        self._free.append(buf)
        self._bytes += n

    @property
    def pooled_bytes(self) -> int:
        return self._bytes
