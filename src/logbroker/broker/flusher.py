"""Durability policy: group commit for fsync=always, a timer for interval, nothing for never.

Under `always`, every acks!=0 produce awaits `commit()`; all produces that arrive while one fdatasync
round is running share the next round, so concurrent producers pay for one sync, not one each.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor

from logbroker.config import FsyncPolicy
from logbroker.storage import PartitionLog

from .metrics import FlushStats

log = logging.getLogger(__name__)


def _sync_fds(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.fdatasync(fd)
        except OSError as exc:
            # A segment deleted by retention after it was written: its data is gone anyway.
            if exc.errno != 9:  # EBADF
                raise


class Flusher:
    def __init__(self, policy: FsyncPolicy, interval_ms: int, stats: FlushStats | None = None) -> None:
        self.policy = policy
        self.stats = stats or FlushStats()  # rounds and their time, for the broker's metrics
        self.interval = interval_ms / 1000
        self._dirty: set[PartitionLog] = set()
        self._waiters: list[asyncio.Future[None]] = []
        self._wake = asyncio.Event()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fsync")
        self._task: asyncio.Task[None] | None = None
        self.rounds = 0
        self.synced_waiters = 0

    def start(self) -> None:
        if self.policy is FsyncPolicy.ALWAYS:
            self._task = asyncio.create_task(self._group_commit_loop(), name="fsync-group-commit")
        elif self.policy is FsyncPolicy.INTERVAL:
            self._task = asyncio.create_task(self._interval_loop(), name="fsync-interval")

    def written(self, plog: PartitionLog) -> None:
        self._dirty.add(plog)

    async def commit(self) -> None:
        """Return once everything written before this call is on disk (fsync=always only)."""
        if self.policy is not FsyncPolicy.ALWAYS:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        self._wake.set()
        await fut

    def _take(self) -> list[int]:
        fds: list[int] = []
        for plog in self._dirty:
            fds.extend(plog.take_unsynced())
        self._dirty.clear()
        return fds

    async def _group_commit_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            waiters, self._waiters = self._waiters, []
            fds = self._take()
            try:
                if fds:
                    await self._sync(fds)
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

    async def _sync(self, fds: list[int]) -> None:
        """One fdatasync round over `fds` on the fsync thread, timed (a failed round counts as an error)."""
        start = time.monotonic()
        try:
            await asyncio.get_running_loop().run_in_executor(self._pool, _sync_fds, fds)
        except OSError:
            self.stats.errors += 1
            raise
        self.stats.rounds.observe(time.monotonic() - start)

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
