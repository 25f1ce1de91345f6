"""A budget of open file descriptors for segment files.

Each segment has three files (log, offset index, time index); kept open, 10,000 partitions would need
30,000 descriptors, past most processes' limit, and the broker would fail to accept connections or
create topics. Segment files are instead opened on first use through a `FileCache` holding at most
`limit` descriptors; the least recently used is closed when another is needed. A descriptor written
since it was opened is fdatasync'ed before it is closed, so eviction never weakens the fsync policy:
a write acknowledged after the flusher took its descriptor was synced here first.
"""

from __future__ import annotations

import json
import logging
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any, NamedTuple

OPEN_FLAGS = os.O_RDWR | os.O_CREAT | os.O_APPEND
# A log file is written at its logical end (`pwrite`), which may lie before space reserved past it; on Linux
# O_APPEND would make every pwrite land at the file's physical end instead.
POSITIONED_FLAGS = os.O_RDWR | os.O_CREAT


class FileCache:
    """Open descriptors of segment files, at most `limit` at once (None: no limit, nothing is closed).

    Driven from one thread (the broker's event loop); only descriptors the caller took with `open_fd`
    are handed to the fsync thread, and closing one under it is safe (see the module docstring)."""

    def __init__(self, limit: int | None = None) -> None:
        if limit is not None and limit < 3:
            raise ValueError("a file cache needs room for at least one segment's three files")
        self.limit = limit
        self._open: OrderedDict[FileHandle, None] = OrderedDict()
        self.opens = 0
        self.evictions = 0

    def handle(self, path: Path, append: bool = True) -> FileHandle:
        """A handle on `path`, opened (and created) when first used; `append=False` for positioned writes."""
        return FileHandle(self, path, OPEN_FLAGS if append else POSITIONED_FLAGS)

    @property
    def open_count(self) -> int:
        return len(self._open)

    def _opened(self, h: FileHandle) -> int:
        if self.limit is not None:
            while len(self._open) >= self.limit:
                # The least recently used that no answer in flight is sending from (a pinned descriptor
                # stays open; with every one pinned the budget is exceeded until a pin goes).
                victim = next((v for v in self._open if not v.pins), None)
                if victim is None:
                    break
                del self._open[victim]
                self.evictions += 1
                victim._close(sync=True)
        fd = os.open(h.path, h.flags, 0o644)
        self.opens += 1
        if self.limit is not None:
            self._open[h] = None
        return fd

    def _touch(self, h: FileHandle) -> None:
        if self.limit is not None:
            self._open.move_to_end(h)

    def _forget(self, h: FileHandle) -> None:
        self._open.pop(h, None)


class FileHandle:
    """One segment file: `fd` opens it on demand; `written` says whether it holds writes no sync covered
    (`writes` counts them, `synced` is the count the last sync covered), which a close must then sync.
    Rounds of the fsync thread report what they covered (`covered`), so that closing a descriptor whose
    data a round already synced (the budget evicting it, usually) costs no second fdatasync.

    `pin` keeps the descriptor open for an answer being sent from it (sendfile): the cache does not
    evict it, and a close (retention, compaction, a deleted topic) waits for the last `unpin`, so the
    answer reads the very bytes it promised even from an unlinked file. Many answers from one segment
    share its descriptor: a pin costs no descriptor of its own."""

    __slots__ = ("_closing", "_fd", "cache", "flags", "path", "pins", "synced", "writes")

    def __init__(self, cache: FileCache, path: Path, flags: int = OPEN_FLAGS) -> None:
        self.cache = cache
        self.path = path
        self.flags = flags
        self._fd: int | None = None
        self.writes = 0
        self.synced = 0
        self.pins = 0
        self._closing = False  # closed while pinned: the descriptor goes with the last pin

    @property
    def fd(self) -> int:
        fd = self._fd
        if fd is None:
            fd = self._fd = self.cache._opened(self)
        else:
            self.cache._touch(self)
        return fd

    @property
    def written(self) -> bool:
        return self.writes != self.synced

    def wrote(self) -> None:
        self.writes += 1

    def covered(self, writes: int) -> None:
        """A sync that started when `writes` writes were made has completed."""
        if writes > self.synced:
            self.synced = writes

    @property
    def open_fd(self) -> int | None:
        """The descriptor if it is open now (for syncing: a closed one was synced when it was closed)."""
        return self._fd

    def pin(self) -> int:
        fd = self.fd
        self.pins += 1
        return fd

    def unpin(self) -> None:
        self.pins -= 1
        if not self.pins and self._closing:
            self._closing = False
            fd, self._fd = self._fd, None
            if fd is not None:
                os.close(fd)

    def sync(self) -> None:
        if self._fd is not None and self.written:
            writes = self.writes
            os.fdatasync(self._fd)
            self.covered(writes)

    def _close(self, sync: bool) -> None:
        if self.pins:  # an answer is being sent from it: closed with the last pin (see the class)
            self._closing = True
            if sync and self.written and self._fd is not None:
                os.fdatasync(self._fd)
                self.synced = self.writes
            return
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if sync and self.written:
                os.fdatasync(fd)
        finally:
            self.synced = self.writes
            os.close(fd)

    def close(self) -> None:
        """Close without syncing (the caller synced what the fsync policy asks for, or deletes the file)."""
        self.cache._forget(self)
        try:
            self._close(sync=False)
        except OSError:
            pass


class Unsynced(NamedTuple):
    """A descriptor handed to the fsync thread, and how many writes of its file the sync will cover."""

    fd: int
    handle: FileHandle
    writes: int

    def synced(self) -> None:
        """The sync succeeded (called back on the thread that owns the handle)."""
        self.handle.covered(self.writes)


def fsync_dir(path: Path) -> None:
    """Make a directory's entries (a rename, a new file) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes) -> None:
    """Replace `path` with `data` all or nothing: temp file, fsync, rename, fsync the directory.

    A full disk or a file-size limit shows as a short write: it raises (and the temp file goes) instead of
    renaming a cut file into place."""
    tmp = path.with_name(f".{path.name[:200]}.tmp")  # a 249-character topic's name leaves no room for more
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]  # a short write is retried, and then fails with the reason
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def read_json_object(path: Path, what: str) -> dict[str, Any] | None:
    """A small state file's JSON object, or None: missing (nothing stored yet), or damaged, which is logged
    (`what` names what falls back to its defaults) and never a reason for the broker not to start."""
    try:
        raw = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except ValueError as exc:
        logging.getLogger(__name__).error("%s is unreadable (%s); %s until changed again", path, exc, what)
        return None
    if not isinstance(raw, dict):
        logging.getLogger(__name__).error("%s does not hold an object; %s", path, what)
        return None
    return raw
