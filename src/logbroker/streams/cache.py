"""The per-partition cache of the pulling agents: cached messages, per-stream event lists, the agent record.

Shapes chosen for the garbage collector and for O(1) cursors, not for elegance: see each class. Everything
here lives on the provider's event loop and is touched by no other thread.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass, field
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
    ``base + i`` is a stable position a cursor keeps between events, so delivery needs no search. Tokens
    and events are parallel lists, not pairs: one object less per cached event for the collector.
    """

    __slots__ = ("base", "events", "head", "raws", "tokens")

    def __init__(self) -> None:
        self.tokens: list[SequenceToken] = []
        self.events: list[Any] = []
        # The message's encoded value, for an event not decoded yet (then ``events`` holds None): events are
        # decoded as they are delivered, so they die young instead of every full collection walking a
        # cache of decoded events.
        self.raws: list[bytes | None] = []
        self.head = 0  # [:head] are evicted
        self.base = 0  # absolute position of index 0

    def __len__(self) -> int:
        return len(self.tokens) - self.head

    def drop_upto(self, offset: int) -> None:
        """Evict the events of messages at or before ``offset``."""
        tokens, h = self.tokens, self.head
        while h < len(tokens) and tokens[h][1] <= offset:
            self.events[h] = self.raws[h] = None  # release the event now, not at the next compaction
            h += 1
        if h > 256 and 2 * h > len(tokens):  # compact now and then: amortised O(1) per event
            del tokens[:h]
            del self.events[:h]
            del self.raws[:h]
            self.base += h
            h = 0
        self.head = h

    def locate(self, after: SequenceToken | None, hint: int | None) -> int:
        """Index of the first event after ``after``; the hint is checked, a bisect is the fallback."""
        tokens, head = self.tokens, self.head
        if after is None:
            return head
        if hint is not None:
            i = hint - self.base
            if head <= i <= len(tokens) and (i == head or tokens[i - 1] <= after) and (
                    i == len(tokens) or tokens[i] > after):  # fmt: skip
                return i
        return bisect.bisect_right(tokens, after, lo=head)


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
