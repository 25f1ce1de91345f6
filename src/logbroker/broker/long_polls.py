"""Long polls: Fetch and ShareFetch requests waiting for data on their partitions (or their incremental
fetch session's), woken by every append to them, by a topic's deletion and by the broker stopping."""

from __future__ import annotations

import asyncio
import itertools

from .fetch_sessions import FetchSession, FetchSessionCache

PartitionKey = tuple[str, int]


class LongPolls:
    def __init__(self, sessions: FetchSessionCache) -> None:
        self.sessions = sessions  # incremental fetch sessions (KIP-227): broker-wide, in memory, as Kafka's
        self._waiters: dict[PartitionKey, set[asyncio.Future[None]]] = {}
        self._stopping = False

    @property
    def stopping(self) -> bool:
        """Set once the broker stops: no new waits, so connections drain."""
        return self._stopping

    def stop(self) -> None:
        """Answer every long poll now, and every later one at once."""
        self._stopping = True
        for fut in itertools.chain.from_iterable(self._waiters.values()):
            if not fut.done():
                fut.set_result(None)
        self.sessions.wake_all()

    def wake(self, key: PartitionKey) -> None:
        """The partition got data (or went): its long polls answer now."""
        waiters = self._waiters.pop(key, None)
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)
        if self.sessions.watchers:
            self.sessions.wake(key)

    async def wait_for_session_data(self, session: FetchSession, keys: list[PartitionKey], timeout: float) -> None:
        """Long poll of an incremental fetch: wake when any partition of its session gets data (or the session
        goes), or after `timeout` seconds. A session gone meanwhile waits on `keys`, as a sessionless fetch."""
        if timeout <= 0 or self._stopping:
            return
        fut = self.sessions.watch(session)
        if fut is None:
            await self.wait_for_data(keys, timeout)
            return
        try:
            await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            pass
        finally:
            self.sessions.unwait(session, fut)

    async def wait_for_data(self, keys: list[PartitionKey], timeout: float) -> None:
        """Long poll: wake when any of these partitions gets data, or after `timeout` seconds."""
        if timeout <= 0 or not keys or self._stopping:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for k in keys:
            self._waiters.setdefault(k, set()).add(fut)
        try:
            await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            pass
        finally:
            for k in keys:
                s = self._waiters.get(k)
                if s is not None:
                    s.discard(fut)
                    if not s:
                        del self._waiters[k]
