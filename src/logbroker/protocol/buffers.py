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
from collections import deque
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
    one (bytearray, or anonymous memory for request frames). Buffers are kept per size class, so a take
    looks at a dozen classes at most however many are pooled; over a bound, the oldest given goes."""

    def __init__(
        self, max_bytes: int = 128 << 20, max_buffers: int = 16, allocate: Callable[[int], Any] = bytearray
    ) -> None:
        self.max_bytes = max_bytes
        self.max_buffers = max_buffers
        self._allocate = allocate
        self._free: dict[int, deque[tuple[int, Any]]] = {}  # capacity -> (when given, buffer), oldest first
        self._count = 0
        self._bytes = 0
        self._given = 0
        self._idle = 0  # the fewest buffers free since the last `trim`: that many were never needed

    def take(self, size: int) -> Any:
        """A buffer of at least `size` bytes (contents undefined): the warmest of the smallest class that fits."""
        cap = max(POOLED_MIN, 1 << (size - 1).bit_length())
        if self._count:
            c = cap
            while c <= self.max_bytes:
                free = self._free.get(c)
                if free:
                    buf = free.pop()[1]
                    self._count -= 1
                    self._bytes -= c
                    self._idle = min(self._idle, self._count)
                    return buf
                c <<= 1
        return self._allocate(cap)

    def give(self, buf: Any) -> None:
        """Return a buffer nobody references any more."""
        n = len(buf)
        if n < POOLED_MIN or n > self.max_bytes or n & (n - 1):
            return
        while self._count and (self._count >= self.max_buffers or self._bytes + n > self.max_bytes):
            self._drop_oldest()
        self._given += 1
        self._free.setdefault(n, deque()).append((self._given, buf))
        self._count += 1
        self._bytes += n

    def trim(self) -> int:
        """Let go of as many buffers as stayed free since the last trim (the oldest): a burst's buffers
        go back to the system once it is over, while a steady load keeps what it uses. Returns how many."""
        dropped = self._idle
        for _ in range(dropped):
            self._drop_oldest()
        self._idle = self._count
        return dropped

    def _drop_oldest(self) -> None:
        free = min((q for q in self._free.values() if q), key=lambda q: q[0][0])
        n = len(free.popleft()[1])
        self._count -= 1
        self._bytes -= n
        self._idle = min(self._idle, self._count)

    @property
    def pooled_bytes(self) -> int:
        return self._bytes

    @property
    def pooled(self) -> int:
        return self._count
