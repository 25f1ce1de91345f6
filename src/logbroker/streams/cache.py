"""The per-partition cache of the pulling agents: cached messages, per-stream event lists, the agent record.

Shapes chosen for the garbage collector and for O(1) cursors, not for elegance: see each class. Everything
here lives on the provider's event loop and is touched by no other thread.
"""

from __future__ import annotations

import bisect
from array import array
from collections import deque
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, NamedTuple

from logbroker.streams.model import SequenceToken

__all__ = ["LAST", "Agent", "Cached", "StreamBuffer", "StreamId", "new_cached", "new_token"]

StreamId = tuple[str, str]
LAST = 2**62  # an index past any batch: Token(p, o, LAST) means "all of offset o"
new_token = new_cached = tuple.__new__  # named tuples without their Python-level __new__: one per event


class Cached(NamedTuple):
    """One cached message. A tuple of atoms (ints, a float, tuples of str/int) on purpose: the garbage
    collector stops tracking such tuples, so a full cache does not make every collection longer."""

    offset: int
    arrived: float
    sid: StreamId | None  # the stream of the message (one per message); None if it was not ours
    last: SequenceToken | None  # the stream's last event in this message


class StreamBuffer:
    """The cached events of one stream in one partition, oldest first.

    Lists with a moving head rather than a deque: cursors index them in O(1) (deque indexing is O(n)), and
    ``base + i`` is a stable position a cursor keeps between events, so delivery needs no search. An event's
    token is kept as its offset and index in two int arrays (the partition is the buffer's) and built when
    delivered: a cached token per event was one more object each full collection had to reach, and with a few
    hundred thousand events cached those walks were a third of the provider's time (issue 37).
    """

    __slots__ = ("base", "events", "head", "indices", "offsets", "partition", "raws")

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.offsets = array("q")  # per event: its message's offset
        self.indices = array("q")  # per event: its index in that message
        self.events: list[Any] = []
        # The message's encoded value, for an event not decoded yet (then ``events`` holds None): events are
        # decoded as they are delivered, so they die young instead of every full collection walking a
        # cache of decoded events.
        self.raws: list[bytes | None] = []
        self.head = 0  # [:head] are evicted
        self.base = 0  # absolute position of index 0

    def __len__(self) -> int:
        return len(self.offsets) - self.head

    @property
    def end(self) -> int:
        """Index past the newest event."""
        return len(self.offsets)

    def token(self, i: int) -> SequenceToken:
        return new_token(SequenceToken, (self.partition, self.offsets[i], self.indices[i]))

    def add(self, offset: int, n: int, events: list[Any] | None, value: bytes | None) -> None:
        """The ``n`` events of the message at ``offset``: decoded (``events``) or not yet (``value``)."""
        if n == 1:
            self.offsets.append(offset)
            self.indices.append(0)
        else:
            self.offsets.extend(repeat(offset, n))
            self.indices.extend(range(n))
        if events is None:
            self.events.extend(repeat(None, n))
            self.raws.extend(repeat(value, n))
        else:
            self.events.extend(events)
            self.raws.extend(repeat(None, n))

    def drop_upto(self, offset: int) -> None:
        """Evict the events of messages at or before ``offset``."""
        h = self.head
        upto = bisect.bisect_right(self.offsets, offset, lo=h)
        if upto > h:  # release the events now, not at the next compaction
            nones = [None] * (upto - h)
            self.events[h:upto] = nones
            self.raws[h:upto] = nones
            h = upto
        if h > 256 and 2 * h > len(self.offsets):  # compact now and then: amortised O(1) per event
            del self.offsets[:h]
            del self.indices[:h]
            del self.events[:h]
            del self.raws[:h]
            self.base += h
            h = 0
        self.head = h

    def _le(self, i: int, offset: int, index: int) -> bool:
        """Whether event ``i`` is at or before (``offset``, ``index``) of this partition."""
        o = self.offsets[i]
        return o < offset or (o == offset and self.indices[i] <= index)

    def locate(self, after: SequenceToken | None, hint: int | None) -> int:
        """Index of the first event after ``after`` (tokens order by partition, offset, index); the hint is
        checked, a bisect is the fallback."""
        head, end = self.head, len(self.offsets)
        if after is None:
            return head
        p, offset, index = after
        if p != self.partition:
            return head if p < self.partition else end
        if hint is not None:
            i = hint - self.base
            # The usual case: ``after`` is the event before the hint (the one just delivered); events are
            # strictly ordered, so the hint's event is the first after it.
            if head < i <= end and self.offsets[i - 1] == offset and self.indices[i - 1] == index:
                return i
            if head <= i <= end and (i == head or self._le(i - 1, offset, index)) and (
                    i == end or not self._le(i, offset, index)):  # fmt: skip
                return i
        lo = bisect.bisect_left(self.offsets, offset, lo=head)
        hi = bisect.bisect_right(self.offsets, offset, lo=lo)
        return bisect.bisect_right(self.indices, index, lo=lo, hi=hi)


@dataclass(eq=False)
class Agent:
    """Pulling agent of one owned partition: its cache, eviction, pressure and commit point."""

    partition: int
    messages: deque[Cached] = field(default_factory=deque)
    streams: dict[StreamId, StreamBuffer] = field(default_factory=dict)
    evicted_upto: int | None = None  # offset after the last message that left the cache
    next_offset: int | None = None
    paused: bool = False
    pressure_cursors: int = 0
    gauges: tuple[Any, ...] = ()  # its labelled children (in cache, pressure, paused): labels() is a lookup

    def low(self) -> int | None:
        return self.messages[0].offset if self.messages else (self.evicted_upto or self.next_offset)
