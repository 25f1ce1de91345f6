"""The asyncio broker: connections, one handler module per API, topics, durability policy."""

from .server import Broker

__all__ = ["Broker"]
