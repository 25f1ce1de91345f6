"""Durability policy: group commit for fsync=always, a timer for interval, nothing for never.

Under `always`, every acks!=0 produce awaits `commit()`; all produces that arrive while one fdatasync
round is running share the next round, so concurrent producers pay for one sync, not one each.

A round runs on the fsync thread so the event loop keeps serving while the disk works. Handing it there
and back costs more than the sync itself on a small write (a thread wake-up, the loop's self-pipe, two
more loop turns: measured ~150 µs of CPU per request against a ~220 µs fdatasync), so a commit with
nobody to share it (`solo()`: no other request in progress, no round running or queued) of a small write
(under `INLINE_MAX_BYTES` since the last round) syncs inline. A large write's sync takes milliseconds,
during which the loop had better be receiving the next batch: it stays on the thread.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from logbroker.config import FsyncPolicy
from logbroker.storage import PartitionLog
from logbroker.storage.files import Unsynced

from .metrics import FlushStats

log = logging.getLogger(__name__)


# A round with more files than this syncs each file system once (syncfs) instead of each file: a
# round over 1,000 partitions was 1,000 fdatasyncs (each a journal commit and a cache flush).
SYNCFS_MIN_FILES = 16
INLINE_MAX_BYTES = 64 * 1024


def _libc_syncfs() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.syncfs
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn  # type: ignore[no-any-return]


_syncfs = _libc_syncfs()


def _sync_fds(fds: list[int]) -> None:
    if _syncfs is not None and len(fds) > SYNCFS_MIN_FILES:
        devices: dict[int, int] = {}
        for fd in fds:
            try:
                devices.setdefault(os.fstat(fd).st_dev, fd)
            except OSError as exc:
                if exc.errno != 9:  # EBADF: deleted by retention meanwhile, as below
                    raise
        for fd in devices.values():
            # Writes back every dirty file of the file system and commits its journal; since Linux 5.8 it
            # also reports a write-back error of any of them, as fdatasync would.
            if _syncfs(fd) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"syncfs: {os.strerror(err)}")
        return
    for fd in fds:
        try:
            os.fdatasync(fd)
        except OSError as exc:
            # A segment deleted by retention after it was written: its data is gone anyway.
            if exc.errno != 9:  # EBADF
                raise


class Flusher:
    def __init__(
        self,
        policy: FsyncPolicy,
        interval_ms: int,
        stats: FlushStats | None = None,
        solo: Callable[[], bool] | None = None,
    ) -> None:
        self.policy = policy
        self.stats = stats or FlushStats()  # rounds and their time, for the broker's metrics
        self.interval = interval_ms / 1000
        self._dirty: set[PartitionLog] = set()
        self._dirty_bytes = 0  # written since the last round (as far as writers say)
        self._waiters: list[asyncio.Future[None]] = []
        self._wake = asyncio.Event()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fsync")
        self._task: asyncio.Task[None] | None = None
        self.rounds = 0
        self.synced_waiters = 0
        self.inline_rounds = 0
        self._solo = solo  # True when no other produce is in progress (None: always use the thread)
        self._running = False  # a round is on the fsync thread
        self._deferred: asyncio.TimerHandle | None = None  # a round promised to `defer` callers

    def start(self) -> None:
        if self.policy is FsyncPolicy.ALWAYS:
            self._task = asyncio.create_task(self._group_commit_loop(), name="fsync-group-commit")
        elif self.policy is FsyncPolicy.INTERVAL:
            self._task = asyncio.create_task(self._interval_loop(), name="fsync-interval")

    def written(self, plog: PartitionLog, nbytes: int = 0) -> None:
        self._dirty.add(plog)
        self._dirty_bytes += nbytes

    async def commit(self) -> None:
        """Return once everything written before this call is on disk (fsync=always only)."""
        if self.policy is not FsyncPolicy.ALWAYS:
            return
        if (
            self._solo is not None
            and self._dirty_bytes < INLINE_MAX_BYTES
            and not (self._waiters or self._running or self._wake.is_set())
            and self._solo()
        ):
            self._sync_inline(self._take())
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        self._wake.set()
        await fut

    def defer(self, delay: float) -> None:
        """Under `always`, a round within ``delay`` seconds covers everything written so far (any round that
        starts before then does); the caller does not wait. Other policies sync on their own schedule."""
        if self.policy is not FsyncPolicy.ALWAYS or self._deferred is not None:
            return
        self._deferred = asyncio.get_running_loop().call_later(delay, self._deferred_round)

    def _deferred_round(self) -> None:
        self._deferred = None
        if self._dirty:
            self._wake.set()

    def _take(self) -> list[Unsynced]:
        targets: list[Unsynced] = []
        for plog in self._dirty:
            targets.extend(plog.take_unsynced())
        self._dirty.clear()
        self._dirty_bytes = 0
        return targets

    async def _group_commit_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            waiters, self._waiters = self._waiters, []
            fds = self._take()
            try:
                if fds:
                    self._running = True
                    try:
                        await self._sync(fds)
                    finally:
                        self._running = False
                self.rounds += 1
                self.synced_waiters += len(waiters)
                self.stats.waiters += len(waiters)
                for w in waiters:
                    if not w.done():
                        w.set_result(None)
            except OSError as exc:
                log.error("fdatasync failed: %s", exc)
                for w in waiters:
                    if not w.done():
                        w.set_exception(exc)

    async def _sync(self, targets: list[Unsynced]) -> None:
        """One fdatasync round over `targets` on the fsync thread, timed (a failed round counts as an error).
        Once it succeeded, the files know which of their writes it covered (a later close need not sync)."""
        start = time.monotonic()
        try:
            await asyncio.get_running_loop().run_in_executor(self._pool, _sync_fds, [t.fd for t in targets])
        except OSError:
            self.stats.errors += 1
            raise
        for t in targets:
            t.synced()
        self.stats.rounds.observe(time.monotonic() - start)

    def _sync_inline(self, targets: list[Unsynced]) -> None:
        """One round on the event loop's own thread (see the module docstring); errors as `_sync`'s."""
        start = time.monotonic()
        try:
            _sync_fds([t.fd for t in targets])
        except OSError as exc:
            self.stats.errors += 1
            log.error("fdatasync failed: %s", exc)
            raise
        for t in targets:
            t.synced()
        self.stats.rounds.observe(time.monotonic() - start)
        self.rounds += 1
        self.inline_rounds += 1
        self.synced_waiters += 1
        self.stats.waiters += 1

    async def _interval_loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            fds = self._take()
            if fds:
                try:
                    await self._sync(fds)
                except OSError as exc:
                    log.error("fdatasync failed: %s", exc)

    async def close(self) -> None:
        """Final sync of everything outstanding, whatever the policy."""
        if self._deferred is not None:
            self._deferred.cancel()
            self._deferred = None
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        fds = self._take()
        if fds:
            await self._sync(fds)
        for w in self._waiters:
            if not w.done():
                w.set_result(None)
        self._pool.shutdown(wait=True)
