"""MsgStream: Milvus' multi-channel stream on top of Client (produce packs, broadcast, consume, seek)."""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Self

from logbroker.mq.client import Client, Consumer, Delivery, InitialPosition, Message, Producer
from logbroker.mq.errors import MQClosedError, MQError
from logbroker.mq.ids import MessageID


@dataclass(slots=True)
class StreamMessage:
    """A message to produce: payload, properties (headers) and the key the repack function hashes."""

    payload: bytes
    properties: dict[str, str] = field(default_factory=dict)
    hash_key: int | str | None = None


@dataclass(slots=True)
class MsgPack:
    msgs: list[StreamMessage]
    begin_ts: int = 0
    end_ts: int = 0


@dataclass(frozen=True, slots=True)
class MsgPosition:
    """Where a channel's consumer should continue (Milvus' MsgPosition: channel name + message ID)."""

    channel: str
    msg_id: MessageID


RepackFunc = Callable[[Sequence[StreamMessage], int], dict[int, list[StreamMessage]]]


def default_repack(msgs: Sequence[StreamMessage], channels: int) -> dict[int, list[StreamMessage]]:
    """Hash each message's key (or its position in the pack) onto a channel index; order is kept per channel."""
    out: dict[int, list[StreamMessage]] = {}
    for i, m in enumerate(msgs):
        k = m.hash_key if m.hash_key is not None else i
        h = k if isinstance(k, int) else zlib.crc32(k.encode())
        out.setdefault(h % channels, []).append(m)
    return out


class MsgStream:
    """Producer side over several channels, consumer side over several channels, or both."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._producers: dict[str, Producer] = {}
        self._channels: list[str] = []
        self._consumers: dict[str, Consumer] = {}
        self._repack: RepackFunc = default_repack
        self._rr = 0
        self._closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise MQClosedError("msgstream is closed")

    # -- producing

    def as_producer(self, channels: Sequence[str], compression: bool | str = False) -> None:
        self._check_open()
        for ch in channels:
            if ch not in self._producers:
                self._producers[ch] = self._client.create_producer(ch, compression)
                self._channels.append(ch)

    def set_repack_func(self, fn: RepackFunc) -> None:
        self._repack = fn

    def produce_channels(self) -> list[str]:
        return list(self._channels)

    def _send_all(self, plan: dict[str, list[StreamMessage]]) -> dict[str, list[MessageID]]:
        futs: dict[str, list[Delivery]] = {
            ch: [self._producers[ch].send_async(m.payload, m.properties) for m in msgs] for ch, msgs in plan.items()
        }
        return {ch: [f.result() for f in fs] for ch, fs in futs.items()}

    def produce(self, pack: MsgPack) -> dict[str, list[MessageID]]:
        """Repack onto the producer channels and send; blocks until every message is acknowledged."""
        self._check_open()
        if not self._channels:
            raise MQError("produce before as_producer()")
        groups = self._repack(pack.msgs, len(self._channels))
        bad = [i for i in groups if not 0 <= i < len(self._channels)]
        if bad:
            raise MQError(f"repack function returned channel indexes {bad} outside 0..{len(self._channels) - 1}")
        return self._send_all({self._channels[i]: msgs for i, msgs in groups.items()})

    def broadcast(self, pack: MsgPack) -> dict[str, list[MessageID]]:
        """Send every message to every producer channel."""
        self._check_open()
        return self._send_all({ch: list(pack.msgs) for ch in self._channels})

    # -- consuming

    def as_consumer(
        self,
        channels: Sequence[str],
        subscription: str,
        initial_position: InitialPosition = InitialPosition.LATEST,
        buffer_size: int = 1024,
    ) -> None:
        self._check_open()
        for ch in channels:
            if ch not in self._consumers:
                self._consumers[ch] = self._client.subscribe(ch, subscription, initial_position, buffer_size)

    def seek(self, positions: Sequence[MsgPosition], include_current: bool = False) -> None:
        """Position each listed channel's consumer (before consumption starts)."""
        self._check_open()
        for pos in positions:
            c = self._consumers.get(pos.channel)
            if c is None:
                raise MQError(f"seek on channel {pos.channel!r}, which this stream does not consume")
            c.seek(pos.msg_id, include_current)

    def receive(self, timeout: float | None = None) -> Message | None:
        """Next message from any channel (round robin between channels that have one ready)."""
        self._check_open()
        if not self._consumers:
            raise MQError("receive before as_consumer()")
        cs = list(self._consumers.values())
        deadline = None if timeout is None else time.monotonic() + timeout
        slice_s = 0.0
        while True:
            for _ in range(len(cs)):
                c = cs[self._rr % len(cs)]
                self._rr += 1
                m = c.receive(slice_s)
                if m is not None:
                    return m
            if deadline is not None and time.monotonic() >= deadline:
                return None
            slice_s = 0.05 / len(cs)

    def __iter__(self) -> Iterator[Message]:
        while not self._closed:
            try:
                m = self.receive(0.5)
            except MQClosedError:
                return
            if m is not None:
                yield m

    def ack(self, msg: Message) -> None:
        self._consumers[msg.topic].ack(msg)

    def latest_message_id(self, channel: str, partition: int = 0) -> MessageID:
        return self._consumers[channel].latest_message_id(partition)

    def check_topic_valid(self, channel: str) -> None:
        self._consumers[channel].check_topic_valid()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for p in self._producers.values():
            p.close()
        for c in self._consumers.values():
            c.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
