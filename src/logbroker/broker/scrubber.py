"""The scrubber: verifies the CRCs of closed segments in the background, at a bounded rate, and quarantines
damaged batches so that readers step over them instead of looping at their offset forever.

Kafka has no such thing: a replica repairs what rots on one disk. A single broker has no replica, so the
rot has to be found before a reader meets it, and fenced off when it is: the batches after a damaged one
stay readable (the damaged offsets become a gap, as a compacted range is). Reads run in a thread with the
segment's descriptor pinned (retention or compaction may drop the segment meanwhile: the result is then
discarded); the quarantine is recorded on the event loop, beside the segment (`<segment>.quarantine`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from logbroker.config import BrokerSettings
from logbroker.storage import LogManager, PartitionLog
from logbroker.storage.segment import Scrub, Segment, scrub_part

log = logging.getLogger("logbroker.scrubber")

STEP_BYTES = 4 << 20  # verified per thread hop


class Scrubber:
    def __init__(self, storage: Callable[[], LogManager], settings: BrokerSettings) -> None:
        self._storage = storage
        self.settings = settings
        self._task: asyncio.Task[None] | None = None
        self.bytes_verified = 0
        self.damaged_found = 0
        self._verified: set[tuple[str, int]] = set()  # (partition dir, segment base) checked this pass

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="scrubber")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # stopping: nothing to report
                pass

    async def _run(self) -> None:
        while True:
            s = self.settings
            if not s.log_scrubber_enable or s.log_scrubber_bytes_per_second <= 0:
                await asyncio.sleep(1.0)
                continue
            started = time.monotonic()
            for plog in list(self._storage().logs.values()):
                for seg in list(plog.segments[:-1]):  # closed segments: the active one is still written
                    key = (str(plog.dir), seg.base_offset)
                    if key not in self._verified:
                        try:
                            await self._scrub(plog, seg)
                        except asyncio.CancelledError:
                            raise
                        except Exception:  # one segment's trouble must not end scrubbing for good
                            log.exception("%s: scrubbing segment %d failed", plog.dir.name, seg.base_offset)
                        self._verified.add(key)
            self._verified.clear()
            rest = s.log_scrubber_interval_ms / 1000 - (time.monotonic() - started)
            await asyncio.sleep(max(rest, 1.0))

    async def _scrub(self, plog: PartitionLog, seg: Segment) -> None:
        state = Scrub(0, seg.base_offset, [])
        while state.position < seg.size:
            if not any(x is seg for x in plog.segments) or not self._served(plog):
                return  # retention, compaction or a deleted topic took it: nothing to fence off any more
            skip = {d.position: d for d in seg.quarantined}
            budget = min(STEP_BYTES, max(int(self.settings.log_scrubber_bytes_per_second), 1))
            handle = seg.handle
            fd = handle.pin()
            before = state.verified
            t0 = time.monotonic()
            read = asyncio.ensure_future(
                asyncio.to_thread(scrub_part, fd, state, seg.size, seg.next_offset, skip, budget)
            )
            # The descriptor stays pinned until the thread is done with it, even if this task is cancelled.
            read.add_done_callback(lambda _f, handle=handle: handle.unpin())
            try:
                state = await asyncio.shield(read)
            except OSError as exc:
                log.warning("%s: segment %d could not be scrubbed: %s", plog.dir.name, seg.base_offset, exc)
                return
            done = state.verified - before
            self.bytes_verified += done
            if state.found and any(x is seg for x in plog.segments):
                for d in seg.quarantine(state.found):
                    self.damaged_found += 1
                    log.warning(
                        "%s: segment %d: damaged stored bytes found by the scrubber and quarantined, %s; readers "
                        "step over the gap", plog.dir.name, seg.base_offset, d.describe(),
                    )  # fmt: skip
            state.found = []
            # The rate: this step's bytes take their share of a second.
            pause = done / max(self.settings.log_scrubber_bytes_per_second, 1) - (time.monotonic() - t0)
            if pause > 0:
                await asyncio.sleep(pause)

    def _served(self, plog: PartitionLog) -> bool:
        return any(x is plog for x in self._storage().logs.values())

    def quarantined(self) -> int:
        """Damaged stretches fenced off in the logs served now."""
        return sum(len(seg.quarantined) for plog in self._storage().logs.values() for seg in plog.segments)
