"""The broker's log cleaner: picks the dirtiest compacted partition, has a worker process clean it and swaps
the result in on the event loop (renames only), as Kafka's LogCleaner threads do.

The worker is a process, not a thread: cleaning decodes and re-encodes every record, which would hold the
GIL against produce and fetch. It must never outlive the broker (a kill -9 would otherwise leave it, and
multiprocessing's resource tracker that waits on it, running with pid 1 as parent): the kernel kills it when
the broker dies (PR_SET_PDEATHSIG), a watchdog thread where that is missing; and it holds its partition's
cleaning lock, so a restarted broker never writes beside a worker that is still exiting.

Settings are read at every round, so dynamic changes of log.cleaner.* apply at once; a topic's config is read
from its log at every plan.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import multiprocessing
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from logbroker.config import BrokerSettings
from logbroker.storage import LogManager, PartitionLog
from logbroker.storage import compaction as c

log = logging.getLogger("logbroker.cleaner")

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with(parent: int) -> None:
    """Worker initializer: end this process when the broker `parent` ends, however it ends."""
    armed = False
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            armed = libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
        except (OSError, AttributeError):
            armed = False
    if os.getppid() != parent:  # the broker died before the signal was armed
        os._exit(1)
    if not armed:
        threading.Thread(target=_watch_parent, args=(parent,), name="parent-watch", daemon=True).start()


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(0.2)
    os._exit(1)


class LogCleaner:
    def __init__(self, storage: Callable[[], LogManager], settings: BrokerSettings) -> None:
        self._storage = storage
        self.settings = settings
        self._pool: ProcessPoolExecutor | None = None
        self._workers = 0
        self._task: asyncio.Task[None] | None = None
        self._busy: set[int] = set()  # id() of logs being cleaned
        self._wake = asyncio.Event()
        self.cleanings = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="log-cleaner")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # stopping: nothing to report
                pass
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def kick(self) -> None:
        """Look for work now (a config changed) rather than after the backoff."""
        self._wake.set()

    def _executor(self) -> ProcessPoolExecutor:
        n = self.settings.log_cleaner_threads
        if self._pool is None or self._workers != n:
            if self._pool is not None:
                self._pool.shutdown(wait=False)
            # Workers start from the event loop's thread (submit spawns them), which lives as long as the
            # broker: PR_SET_PDEATHSIG follows the thread that made the child, not the process.
            self._pool = ProcessPoolExecutor(
                n, mp_context=multiprocessing.get_context("spawn"), initializer=_die_with, initargs=(os.getpid(),)
            )
            self._workers = n
        return self._pool

    async def _run(self) -> None:
        running: set[asyncio.Task[None]] = set()
        while True:
            s = self.settings
            started = 0
            if s.log_cleaner_enable:
                for plog, p in self._candidates():
                    if len(running) >= s.log_cleaner_threads:
                        break
                    self._busy.add(id(plog))
                    task = asyncio.create_task(self._clean(plog, p))
                    running.add(task)
                    task.add_done_callback(running.discard)
                    started += 1
            if running:
                await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                continue
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), s.log_cleaner_backoff_ms / 1000)
            except TimeoutError:
                pass

    def _candidates(self) -> list[tuple[PartitionLog, c.Plan]]:
        """Compacted logs that need cleaning, dirtiest first (Kafka's choice)."""
        now = int(time.time() * 1000)
        max_keys = max(self.settings.log_cleaner_dedupe_buffer_size // c.KEY_ENTRY_BYTES, 1)
        rate = self.settings.log_cleaner_io_max_bytes_per_second
        out = []
        for plog in list(self._storage().logs.values()):
            if id(plog) in self._busy or not plog.config.cleanup_compact:
                continue
            try:
                p = c.plan(plog, now, max_keys, rate)
            except OSError as exc:
                log.warning("%s: cannot plan a cleaning: %s", plog.dir.name, exc)
                continue
            if p is not None:
                out.append((plog, p))
        out.sort(key=lambda item: -item[1].ratio)
        return out

    async def _clean(self, plog: PartitionLog, p: c.Plan) -> None:
        try:
            loop = asyncio.get_running_loop()
            try:
                result = await loop.run_in_executor(self._executor(), c.clean_segments, p.job)
            except BrokenProcessPool:
                self._pool = None
                raise
            if not self._still_served(plog):
                for g in result.groups:
                    shutil.rmtree(g.staging, ignore_errors=True)
                return
            swapped = 0
            for group in result.groups:
                if c.swap(plog, group):
                    swapped += 1
            if swapped == len(result.groups):
                c.write_checkpoint(plog, result.end, result.tombstones_kept_until_ms)
            self.cleanings += 1
            mb = result.bytes_read / 1e6
            log.info(
                "cleaned %s offsets up to %d (%s): %.1f MB read, %.1f MB written, %d records kept, %d removed, "
                "%.2f s (%.1f MB/s)%s",
                plog.dir.name, result.end, p.reason, mb, result.bytes_written / 1e6, result.records_kept,
                result.records_removed, result.seconds, mb / max(result.seconds, 1e-6),
                "" if swapped == len(result.groups) else "; the log changed meanwhile: some work discarded",
            )  # fmt: skip
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # one partition's failure must not stop the cleaner
            log.warning("%s: cleaning failed: %s", plog.dir.name, exc)
            for staging in plog.dir.glob(f"{c.STAGING_PREFIX}*"):
                if not (staging / c.MARKER).exists():
                    shutil.rmtree(staging, ignore_errors=True)
        finally:
            self._busy.discard(id(plog))

    def _still_served(self, plog: PartitionLog) -> bool:
        return any(x is plog for x in self._storage().logs.values())
