"""The broker's seams, written down: what handlers and coordinators may use of the rest of the broker.

Each seam is a Protocol; `BrokerContext` (the composition root) provides an object for each, and tests can
provide their own. Handlers import the broker's parts through this module and `context`, never storage:
what crosses from storage (partition logs, their errors) is named here.
"""

from __future__ import annotations

from typing import Protocol


class Durability(Protocol):
    """The fsync policy: every log tells it of its writes as they are made (PartitionLog.on_append)."""

    async def commit(self) -> None:
        """Return once every write made so far is durable under the policy."""
