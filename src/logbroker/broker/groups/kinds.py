"""Every kind of group the coordinator keeps, as one type (streams groups live in `streams`, on `model`'s base)."""

from __future__ import annotations

from .model import ClassicGroup, ConsumerGroup
from .streams import StreamsGroup

AnyGroup = ClassicGroup | ConsumerGroup | StreamsGroup

__all__ = ["AnyGroup"]
