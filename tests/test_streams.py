"""`logbroker.streams` on real brokers: the embedded broker and Apache Kafka (KRaft), no mocks."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from logbroker.streams import (
    MsgpackSerializer,
    SequenceToken,
    SerializationError,
    StreamProvider,
    StreamsConfigError,
    TokenExpiredError,
    UnknownNamespaceError,
)
from streams_backends import config, streams_backend, streams_embedded, streams_kafka, unique

__all__ = ["streams_backend", "streams_embedded", "streams_kafka"]


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(coro)


async def until(cond: Callable[[], bool], timeout: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def high_watermark(bootstrap: str, topic: str, partition: int) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("probe")})
    try:
        return int(c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1])
    finally:
        c.close()


def test_ten_thousand_streams_keep_order(streams_backend: str) -> None:
    """10,000 virtual streams over 4 partitions: every event arrives, in order per stream, one at a time per key."""
    streams, per_stream = 10_000, 3
    got: dict[str, list[int]] = defaultdict(list)
    tokens: dict[str, list[SequenceToken]] = defaultdict(list)
    busy: set[str] = set()
    overlap: list[str] = []

    def factory(key: str) -> Any:
        async def handle(event: Any, token: SequenceToken) -> None:
            if key in busy:
                overlap.append(key)
            busy.add(key)
            got[key].append(event["n"])
            tokens[key].append(token)
            if event["n"] % 2:
                await asyncio.sleep(0)  # yield: another event of this key must not start meanwhile
            busy.discard(key)

        return handle

    async def main() -> None:
        async with StreamProvider(config(streams_backend, produce_wait_ms=5)) as p:
            p.implicit("orders", factory)
            assert await p.wait_assigned(4) == {0, 1, 2, 3}
            sem = asyncio.Semaphore(2000)

            async def one(k: int, n: int) -> None:
                async with sem:
                    await p.stream("orders", f"k{k}").publish({"n": n})

            for n in range(per_stream):
                await asyncio.gather(*(one(k, n) for k in range(streams)))
            await until(lambda: sum(map(len, got.values())) >= streams * per_stream, 120, "all events")
            parts = {p.ring.partition("orders", f"k{k}") for k in range(streams)}
            assert parts == {0, 1, 2, 3}

    run(main())
    assert len(got) == streams
    assert all(v == list(range(per_stream)) for v in got.values())
    assert all(t == sorted(t) for t in tokens.values())
    assert not overlap


def test_rewind_inside_and_beyond_cache(streams_backend: str) -> None:
    async def main() -> None:
        async with StreamProvider(config(streams_backend, cache_timespan=0.3)) as p:
            await p.wait_assigned(4)
            s = p.stream("ns", "rewind")
            live: list[tuple[Any, SequenceToken]] = []

            async def on_live(ev: Any, tok: SequenceToken) -> None:
                live.append((ev, tok))

            await s.subscribe(on_live)
            for i in range(5):
                await s.publish({"i": i})
            await s.publish([{"i": 5}, {"i": 6}], batch=True)
            await until(lambda: len(live) == 7, what="live delivery")
            toks = [t for _, t in live]
            assert toks == sorted(toks) and toks[5].offset == toks[6].offset and toks[6].index == 1

            # inside the cache: a long timespan provider keeps everything
            async with StreamProvider({**p.config.model_dump(), "consumer_group": unique("g"),
                                       "cache_timespan": 60}) as q:  # fmt: skip
                await q.wait_assigned(4)
                qs = q.stream("ns", "rewind")
                first = [ev["i"] async for ev, _ in _take(qs.read(), 0)]
                assert first == []
                agent = q._agents[qs.partition]
                await until(lambda: agent.next_offset is not None and agent.next_offset > toks[6].offset)
                assert agent.low() == toks[0].offset  # all cached
                got = [ev["i"] async for ev, _ in _take(qs.read(toks[2]), 5)]
                assert got == [2, 3, 4, 5, 6]

            # beyond the cache: p evicted everything (timespan passed, its only reader is past it)
            agent = p._agents[s.partition]
            await until(lambda: not agent.messages, what="eviction")
            got = [(ev["i"], t) async for ev, t in _take(s.read(toks[1]), 6)]
            assert [i for i, _ in got] == [1, 2, 3, 4, 5, 6]
            assert [t for _, t in got] == toks[1:]
            await s.publish({"i": 7})  # continues live after the rewind, without duplicates
            got = [ev["i"] async for ev, _ in _take(s.read(toks[4]), 4)]
            assert got == [4, 5, 6, 7]

    run(main())


async def _take(it: Any, n: int) -> Any:
    if n == 0:
        await it.aclose()
        return
    count = 0
    async for item in it:
        yield item
        count += 1
        if count == n:
            break
    await it.aclose()


def test_cache_pressure_pauses_fetching_and_drops_nothing(streams_embedded: Any) -> None:
    """A slow reader fills the cache: the agent pauses, memory stays bounded, every event still arrives."""
    size, total = 50, 600
    seen: list[int] = []
    max_cached = 0
    paused_seen = False

    async def main() -> None:
        nonlocal max_cached, paused_seen
        cfg = config(streams_embedded.bootstrap, num_queues=1, cache_size=size, cache_timespan=0.0)
        async with StreamProvider(cfg) as p:
            await p.wait_assigned(1)
            s = p.stream("slow", "one")

            async def slow(ev: Any, _tok: SequenceToken) -> None:
                seen.append(ev)
                await asyncio.sleep(0.002)

            await s.subscribe(slow)
            await asyncio.gather(*(s.publish(i) for i in range(total)))
            agent = p._agents[0]
            while len(seen) < total:
                max_cached = max(max_cached, len(agent.messages))
                paused_seen |= agent.paused
                await asyncio.sleep(0.005)
            text = p.metrics_text()
            assert 'logbroker_streams_fetch_paused{partition="0"}' in text

    run(main())
    assert seen == list(range(total))
    assert paused_seen
    assert max_cached <= 2 * size  # the cache plus at most one fetch batch (capped at cache_size)


def test_restart_resumes_from_committed_offsets_and_reports_metrics(streams_embedded: Any) -> None:
    boot = streams_embedded.bootstrap
    cfg = config(boot, num_queues=2, cache_timespan=0.05, metrics_port=0)
    first: list[int] = []
    second: list[int] = []

    def collect(into: list[int]) -> Any:
        def factory(_key: str) -> Any:
            async def handle(ev: Any, _tok: SequenceToken) -> None:
                into.append(ev)

            return handle

        return factory

    async def main() -> None:
        async with StreamProvider(cfg) as p:
            p.implicit("m", collect(first))
            await p.wait_assigned(2)
            await asyncio.gather(*(p.stream("m", f"k{i % 7}").publish(i) for i in range(100)))
            await until(lambda: len(first) == 100, what="first run")
            await until(lambda: all(not a.messages for a in p._agents.values()), what="eviction")
            await asyncio.sleep(0.3)  # the consumer thread commits evictions on its next round
            assert p.metrics is not None and p.metrics.port
            await until(lambda: 'logbroker_streams_lag{partition="0"} 0.0' in p.metrics_text(), what="lag gauge")
            body = urllib.request.urlopen(f"http://127.0.0.1:{p.metrics.port}/metrics", timeout=5).read().decode()
            assert "logbroker_streams_produced_events_total 100.0" in body
            assert "logbroker_streams_consumed_events_total 100.0" in body
            assert "logbroker_streams_cache_evictions_total" in body
            assert "logbroker_streams_active_receivers 2.0" in body
            assert "logbroker_streams_produce_batch_size_count 100.0" in body
            assert 'logbroker_streams_current_offset{partition="0"}' in body
            assert 'logbroker_streams_committed_offset{partition="0"}' in body
            assert "logbroker_streams_fetch_seconds_count" in body
            assert "logbroker_streams_commit_seconds_count" in body
        async with StreamProvider(cfg, consume=False) as pub:
            await asyncio.gather(*(pub.stream("m", f"k{i % 7}").publish(i) for i in range(100, 150)))
        async with StreamProvider(cfg) as p2:
            p2.implicit("m", collect(second))
            await until(lambda: len(second) >= 50, what="second run")
            await asyncio.sleep(0.3)

    run(main())
    assert sorted(second) == list(range(100, 150))  # nothing already committed comes back


def test_publish_refuses_unserialisable_event_and_sends_nothing(streams_embedded: Any) -> None:
    cfg = config(streams_embedded.bootstrap, num_queues=1)

    async def main() -> None:
        async with StreamProvider(cfg, consume=False) as p:
            with pytest.raises(SerializationError):
                await p.stream("x", "y").publish({"bad": {1, 2}})
            with pytest.raises(SerializationError):
                await p.stream("x", "y").publish(float("nan"))
        async with StreamProvider(cfg, MsgpackSerializer(), consume=False) as p:
            with pytest.raises(SerializationError):
                await p.stream("x", "y").publish(object())

    run(main())
    assert high_watermark(streams_embedded.bootstrap, cfg["topic"], 0) == 0


def test_unknown_namespace_and_expired_token(streams_embedded: Any) -> None:
    cfg = config(streams_embedded.bootstrap, num_queues=1)

    async def main() -> None:
        async with StreamProvider(cfg) as p:
            with pytest.raises(UnknownNamespaceError, match="nope"):
                p.remove_implicit("nope")
            with pytest.raises(TypeError):
                p.implicit("ns", "not callable")  # type: ignore[arg-type]
            s = p.stream("a", "b")
            for i in range(3):
                await s.publish(i)
            from confluent_kafka.admin import AdminClient

            admin = AdminClient({"bootstrap.servers": streams_embedded.bootstrap})
            fut = admin.delete_records([TopicPartition(cfg["topic"], 0, 2)])
            next(iter(fut.values())).result(10)
            with pytest.raises(TokenExpiredError, match="retention"):
                await s.subscribe(_noop, SequenceToken(0, 0, 0))

    run(main())


async def _noop(_ev: Any, _tok: SequenceToken) -> None:
    return None


def test_two_processes_share_partitions_and_survive_a_kill(
    streams_backend: str, tmp_path: Any, request: pytest.FixtureRequest
) -> None:
    """Two provider processes split the 4 partitions; SIGKILL one, the other takes over, no event is lost."""
    import subprocess
    import sys
    from pathlib import Path

    boot = streams_backend
    cfg = config(boot)
    kafka = request.node.callspec.params["streams_backend"] == "kafka"
    session_ms = "6000" if kafka else "3000"  # Kafka's group.min.session.timeout.ms is 6 s
    worker = str(Path(__file__).with_name("streams_worker.py"))
    outs = [tmp_path / "w1.txt", tmp_path / "w2.txt"]
    procs = [subprocess.Popen([sys.executable, worker, boot, cfg["topic"], cfg["consumer_group"], str(o), session_ms])
             for o in outs]  # fmt: skip

    def owned(i: int) -> set[int]:
        f = outs[i].with_suffix(".owned")
        return {int(x) for x in f.read_text().split()} if f.exists() else set()

    def received() -> dict[str, list[int]]:
        seen: dict[str, list[int]] = defaultdict(list)
        for o in outs:
            if o.exists():
                for line in o.read_text().splitlines():
                    key, seq, _tok = line.split()
                    seen[key].append(int(seq))
        return seen

    keys = [f"k{i}" for i in range(200)]

    async def publish(seqs: range) -> None:
        async with StreamProvider(cfg, consume=False) as pub:
            for seq in seqs:
                await asyncio.gather(*(pub.stream("w", k).publish({"seq": seq}) for k in keys))

    async def wait(cond: Callable[[], bool], what: str) -> None:
        try:
            await until(cond, 60, what)
        except AssertionError as exc:  # say where it stood
            seen = received()
            raise AssertionError(f"{exc}: exit codes {[pr.poll() for pr in procs]}, owned {owned(0)} {owned(1)}, "
                                 f"{len(seen)} keys, "
                                 f"{sum(map(len, seen.values()))} events") from None  # fmt: skip

    try:
        run(wait(lambda: len(owned(0)) == 2 and len(owned(1)) == 2, "both workers own two partitions"))
        run(publish(range(5)))
        run(wait(lambda: sum(map(len, received().values())) >= len(keys) * 5, "first half"))
        procs[0].kill()
        procs[0].wait()
        run(publish(range(5, 10)))
        run(wait(lambda: owned(1) == {0, 1, 2, 3}, "takeover"))
        run(wait(lambda: all(set(v) >= set(range(10)) for v in received().values()) and len(received()) == 200,
                 "every event"))  # fmt: skip
    finally:
        for pr in procs:
            pr.kill()
            pr.wait()
    seen = received()
    tokens: dict[tuple[str, str], set[str]] = defaultdict(set)
    for o in outs:
        for line in o.read_text().splitlines():
            key, seq, tok = line.split()
            tokens[key, seq].add(tok)
    assert all(len(t) == 1 for t in tokens.values())  # a redelivered event carries its original token
    for k in keys:
        dedup = list(dict.fromkeys(seen[k]))  # duplicates only across the crash
        assert sorted(dedup) == list(range(10)), (k, seen[k])


def test_unsubscribe_and_resume(streams_embedded: Any) -> None:
    """An unsubscribed cursor stops; resume() continues where it stopped, or from another token."""
    got: list[int] = []

    async def handle(ev: Any, _tok: SequenceToken) -> None:
        got.append(ev)

    async def main() -> None:
        async with StreamProvider(config(streams_embedded.bootstrap, num_queues=1)) as p:
            await p.wait_assigned(1)
            s = p.stream("r", "one")
            sub = await s.subscribe(handle)
            await s.publish(0)
            await until(lambda: got == [0], what="first event")
            await sub.unsubscribe()
            await s.publish(1)
            await s.publish(2)
            await asyncio.sleep(0.3)
            assert got == [0]
            await sub.resume()
            await until(lambda: got == [0, 1, 2], what="resumed")
            await sub.resume(SequenceToken(s.partition, 0, 0))
            await until(lambda: got == [0, 1, 2, 0, 1, 2], what="resumed from a token")
            assert p.stream("r", "one").partition == s.partition

    run(main())


def test_num_queues_must_match_the_topic(streams_embedded: Any) -> None:
    cfg = config(streams_embedded.bootstrap, num_queues=2)

    async def main() -> None:
        async with StreamProvider(cfg, consume=False):
            pass
        with pytest.raises(StreamsConfigError, match=r"streams\.num_queues"):
            await StreamProvider({**cfg, "num_queues": 3}).start()

    run(main())
