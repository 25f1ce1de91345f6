"""Per-partition turns for appends, taken in arrival order.

A produce request reserves a turn on each of its partitions at once, before it awaits anything, and then
appends partition by partition, yielding to other clients after large batches. Reserving all turns in one
step keeps every partition's appends in the order the requests arrived (a connection's pipelined
idempotent produces depend on it), and cannot deadlock: on every partition an earlier request is ahead of
a later one. Requests on other partitions never wait, unlike under one broker-wide lock.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Hashable, Iterable


class Turn:
    """One reserved place in a partition's queue."""

    __slots__ = ("_owner", "_ready", "key")

    def __init__(self, owner: AppendTurns, key: Hashable, ready: asyncio.Future[None]) -> None:
        self.key = key
        self._ready = ready
        self._owner: AppendTurns | None = owner

    async def wait(self) -> None:
        """Return once every earlier turn on this partition is released."""
        if not self._ready.done():
            await asyncio.shield(self._ready)

    def release(self) -> None:
        """Give the partition to the next turn; a turn released twice, or before it came, just leaves."""
        if self._owner is not None:
            self._owner._release(self)
            self._owner = None


class AppendTurns:
    def __init__(self) -> None:
        self._queues: dict[Hashable, deque[Turn]] = {}

    def reserve(self, keys: Iterable[Hashable]) -> list[Turn]:
        """A turn per key, in order (a key named twice gets two consecutive turns); without awaiting."""
        loop = asyncio.get_running_loop()
        turns = []
        for key in keys:
            queue = self._queues.setdefault(key, deque())
            ready: asyncio.Future[None] = loop.create_future()
            if not queue:
                ready.set_result(None)
            turn = Turn(self, key, ready)
            queue.append(turn)
            turns.append(turn)
        return turns

    def _release(self, turn: Turn) -> None:
        queue = self._queues[turn.key]
        if queue[0] is turn:
            queue.popleft()
            if queue:
                queue[0]._ready.set_result(None)
            else:
                del self._queues[turn.key]
        else:  # given up before its turn came (a cancelled request)
            queue.remove(turn)

    def waiting(self) -> int:
        """Turns reserved and not yet released, over all partitions."""
        return sum(len(q) for q in self._queues.values())
