"""`logbroker.streams` on real brokers: the embedded broker and Apache Kafka (KRaft), no mocks."""

from __future__ import annotations

import asyncio
import gc
import random
import socket
import threading
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from prometheus_client.parser import text_string_to_metric_families

from logbroker.streams import (
    MsgpackSerializer,
    SequenceToken,
    SerializationError,
    StreamProvider,
    StreamsConfigError,
    Subscription,
    TokenExpiredError,
    UnknownNamespaceError,
)
from streams_backends import config, is_kafka, streams_backend, streams_embedded, streams_kafka, unique

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
            assert len(p._implicit_subs) == streams
            # caught-up subscriptions park no task: 10,000 idle streams cost objects, not tasks
            await until(lambda: all(s._task is None for s in p._implicit_subs.values()), what="idle subscriptions")

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
                agent = q.agents[qs.partition]
                await until(lambda: agent.next_offset is not None and agent.next_offset > toks[6].offset)
                assert agent.low() == toks[0].offset  # all cached
                got = [ev["i"] async for ev, _ in _take(qs.read(toks[2]), 5)]
                assert got == [2, 3, 4, 5, 6]

            # beyond the cache: p evicted everything (timespan passed, its only reader is past it)
            agent = p.agents[s.partition]
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


def metric(provider: StreamProvider, name: str, partition: int | None = None) -> float | None:
    """One sample of the provider's registry (``None`` when absent), read through prometheus-client's API."""
    assert provider.metrics is not None
    labels = {} if partition is None else {"partition": str(partition)}
    return provider.metrics.registry.get_sample_value(name, labels)


def parse_metrics(text: str) -> dict[tuple[str, str], float]:
    """Samples of an exposition page by (name, partition label or "")."""
    return {(s.name, s.labels.get("partition", "")): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}  # fmt: skip


def test_cache_pressure_pauses_fetching_and_drops_nothing(streams_backend: str) -> None:
    """A slow reader fills the cache: the agent pauses, memory stays bounded, every event still arrives."""
    size, total = 50, 600
    seen: list[int] = []
    max_cached = 0
    paused_seen = False
    max_pressure = 0.0
    max_gauge = 0.0

    async def main() -> None:
        nonlocal max_cached, paused_seen, max_pressure, max_gauge
        cfg = config(streams_backend, num_queues=1, cache_size=size, cache_timespan=0.0)
        async with StreamProvider(cfg) as p:
            await p.wait_assigned(1)
            s = p.stream("slow", "one")

            async def slow(ev: Any, _tok: SequenceToken) -> None:
                seen.append(ev)
                await asyncio.sleep(0.002)

            await s.subscribe(slow)
            await asyncio.gather(*(s.publish(i) for i in range(total)))
            agent = p.agents[0]
            while len(seen) < total:
                max_cached = max(max_cached, len(agent.messages))
                paused_seen |= agent.paused
                max_pressure = max(max_pressure, metric(p, "logbroker_streams_pressure_cursors", 0) or 0)
                max_gauge = max(max_gauge, metric(p, "logbroker_streams_cache_messages", 0) or 0)
                await asyncio.sleep(0.005)
            assert metric(p, "logbroker_streams_consumed_events_total") == total
            await until(lambda: not agent.paused, what="fetching resumed")
            assert metric(p, "logbroker_streams_fetch_paused", 0) == 0

    run(main())
    assert seen == list(range(total))
    assert paused_seen
    assert max_pressure >= 1  # the slow cursor is what holds the full cache
    assert size <= max_gauge <= 2 * size
    assert max_cached <= 2 * size  # the cache plus at most one fetch batch (capped at cache_size)


def test_restart_resumes_from_committed_offsets_and_reports_metrics(streams_backend: str) -> None:
    """Evicted messages are committed; a restarted provider continues there. The endpoint shows every series."""
    cfg = config(streams_backend, num_queues=2, cache_timespan=0.05, metrics_port=0)
    first: list[int] = []
    second: list[int] = []

    def collect(into: list[int]) -> Any:
        def factory(_key: str) -> Any:
            async def handle(ev: Any, _tok: SequenceToken) -> None:
                into.append(ev)

            return handle

        return factory

    async def high(parts: range) -> dict[int, int]:
        return {q: await asyncio.to_thread(high_watermark, streams_backend, cfg["topic"], q) for q in parts}

    async def main() -> None:
        async with StreamProvider(cfg) as p:
            p.implicit("m", collect(first))
            await p.wait_assigned(2)
            await asyncio.gather(*(p.stream("m", f"k{i % 7}").publish(i) for i in range(100)))
            hw = await high(range(2))
            assert sum(hw.values()) == 100
            await until(lambda: len(first) == 100, what="first run")

            def settled() -> bool:  # evicted, committed, and the lag gauges refreshed
                return all(metric(p, "logbroker_streams_committed_offset", q) == hw[q]
                           and metric(p, "logbroker_streams_current_offset", q) == hw[q]
                           and metric(p, "logbroker_streams_lag", q) == 0 for q in hw)  # fmt: skip

            await until(settled, what="commits and lag gauges")
            assert p.metrics is not None and p.metrics.port
            url = f"http://127.0.0.1:{p.metrics.port}/metrics"
            body = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read().decode())
            m = parse_metrics(body)
            assert m["logbroker_streams_produced_events_total", ""] == 100
            assert m["logbroker_streams_consumed_events_total", ""] == 100
            assert m["logbroker_streams_cache_evictions_total", ""] == 100  # one event per message here
            assert m["logbroker_streams_active_receivers", ""] == 2
            for q in hw:
                assert m["logbroker_streams_cache_messages", str(q)] == 0
                assert m["logbroker_streams_pressure_cursors", str(q)] == 0
                assert m["logbroker_streams_current_offset", str(q)] == hw[q]
                assert m["logbroker_streams_lag", str(q)] == 0
                assert m["logbroker_streams_committed_offset", str(q)] == hw[q]
            assert m["logbroker_streams_produce_batch_size_sum", ""] == 100
            assert 1 <= m["logbroker_streams_produce_batch_size_count", ""] <= 100
            assert m["logbroker_streams_messages_per_fetch_sum", ""] >= 100
            for timer in ("produce", "fetch", "commit"):
                assert m[f"logbroker_streams_{timer}_seconds_count", ""] >= 1
        async with StreamProvider(cfg, consume=False) as pub:
            await asyncio.gather(*(pub.stream("m", f"k{i % 7}").publish(i) for i in range(100, 150)))
        hw = await high(range(2))
        async with StreamProvider(cfg) as p2:
            p2.implicit("m", collect(second))
            await p2.wait_assigned(2)
            # every message up to the end is fetched, and each key's newest event delivered: a redelivered
            # older event of a key would have come before it
            await until(lambda: all(a.next_offset == hw[q] for q, a in p2.agents.items()) and len(second) >= 50,
                        what="second run")  # fmt: skip
            assert metric(p2, "logbroker_streams_consumed_events_total") == 50

    run(main())
    assert sorted(second) == list(range(100, 150))  # nothing already committed comes back


def test_concurrent_publishes_share_produce_batches(streams_backend: str) -> None:
    """produce_wait_ms is librdkafka's linger: concurrent publish() calls leave in shared batches, and each
    still resolves only once acknowledged."""
    cfg = config(streams_backend, num_queues=1, produce_wait_ms=1000, produce_batch_size=1000)

    async def main() -> None:
        async with StreamProvider(cfg, consume=False) as p:
            s = p.stream("b", "one")
            await asyncio.gather(*(s.publish(i) for i in range(50)))
            assert metric(p, "logbroker_streams_produced_events_total") == 50
            assert metric(p, "logbroker_streams_produce_batch_size_sum") == 50
            batches = metric(p, "logbroker_streams_produce_batch_size_count")
            assert batches is not None and batches < 50  # not one request per event
        assert await asyncio.to_thread(high_watermark, streams_backend, cfg["topic"], 0) == 50

    run(main())


def test_publish_refuses_unserialisable_event_and_sends_nothing(streams_backend: str) -> None:
    cfg = config(streams_backend, num_queues=1)

    async def main() -> None:
        async with StreamProvider(cfg, consume=False) as p:
            with pytest.raises(SerializationError):
                await p.stream("x", "y").publish({"bad": {1, 2}})
            with pytest.raises(SerializationError):
                await p.stream("x", "y").publish(float("nan"))
            with pytest.raises(SerializationError):  # one bad event refuses the whole batch
                await p.stream("x", "y").publish([{"ok": 1}, {"bad": object()}], batch=True)
            assert metric(p, "logbroker_streams_produced_events_total") == 0
        async with StreamProvider(cfg, MsgpackSerializer(), consume=False) as p:
            with pytest.raises(SerializationError):
                await p.stream("x", "y").publish(object())

    run(main())
    assert high_watermark(streams_backend, cfg["topic"], 0) == 0


def test_unknown_namespace_and_expired_token(streams_backend: str) -> None:
    """No handler for a namespace: an error where one is asked for, and its events neither stall nor hold the cache."""
    cfg = config(streams_backend, num_queues=1, cache_timespan=0.05)
    got: list[Any] = []

    def factory(_key: str) -> Any:
        async def handle(ev: Any, _tok: SequenceToken) -> None:
            got.append(ev)

        return handle

    async def main() -> None:
        async with StreamProvider(cfg) as p:
            with pytest.raises(UnknownNamespaceError, match="nope"):
                p.remove_implicit("nope")
            with pytest.raises(TypeError):
                p.implicit("ns", "not callable")  # type: ignore[arg-type]
            p.implicit("known", factory)
            await p.wait_assigned(1)
            for i in range(3):
                await p.stream("unknown", "a").publish(i)
                await p.stream("known", "b").publish(i)
            await until(lambda: got == [0, 1, 2], what="the known namespace's events")
            await until(lambda: metric(p, "logbroker_streams_committed_offset", 0) == 6, what="all committed")

            s = p.stream("a", "b")
            await s.publish("x")
            admin = AdminClient({"bootstrap.servers": streams_backend})
            fut = admin.delete_records([TopicPartition(cfg["topic"], 0, 2)])
            await asyncio.to_thread(next(iter(fut.values())).result, 30)
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
    session_ms = "6000" if is_kafka(request) else "3000"  # Kafka's group.min.session.timeout.ms is 6 s
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


def test_events_decoded_on_delivery_and_records_of_other_writers(streams_embedded: Any) -> None:
    """A record's events stay encoded in the cache until delivered (its "n" header counts them); records
    without the header (other writers, older versions) are decoded on arrival; a count that is not a number
    or that the value cannot hold is not trusted; an undecodable value and the events a count promised but the
    value lacks are skipped without stalling the stream; a cursor rewound inside the cache decodes again."""
    from confluent_kafka import Producer

    from logbroker.streams.model import JsonSerializer

    got: list[int] = []
    again: list[int] = []
    decoded: list[bytes] = []

    class Counting(JsonSerializer):
        def loads(self, data: bytes) -> list[Any]:
            decoded.append(data)
            return super().loads(data)

    async def main() -> None:
        cfg = config(streams_embedded.bootstrap, num_queues=1)
        async with StreamProvider(cfg, serializer=Counting()) as p:
            await p.wait_assigned(1)
            quiet = p.stream("w", "nobody listens")
            for i in range(3):
                await quiet.publish([i, i], batch=True)
            await until(lambda: p.agents[0].next_offset == 3, what="three records fetched")
            assert decoded == []  # cached, not decoded: nobody has read them
            s = p.stream("w", "one")
            await s.subscribe(lambda ev, _tok: _append(got, ev))
            ids = [("ns", b"w"), ("key", b"one")]
            producer = Producer({"bootstrap.servers": streams_embedded.bootstrap})
            for headers, value in [
                (ids, b"[1,2]"),  # no count: decoded when fetched
                ([*ids, ("n", b"3")], b"[3]"),  # two events promised and missing: skipped
                ([*ids, ("n", b"2")], b"not json"),  # undecodable: skipped, logged
                ([*ids, ("n", b"x")], b"[4]"),  # a count that is no number: decoded when fetched
                ([*ids, ("n", b"1000")], b"[5]"),  # more events than bytes: decoded when fetched
            ]:
                producer.produce(cfg["topic"], value, partition=0, headers=headers)
            assert producer.flush(10) == 0
            await s.publish([6, 7], batch=True)
            await s.publish(8)
            await until(lambda: got == [1, 2, 3, 4, 5, 6, 7, 8], what=f"every event once, got {got}")
            await s.subscribe(lambda ev, _tok: _append(again, ev), SequenceToken(s.partition, 0, 0))
            await until(lambda: again == got, what=f"the rewound cursor, got {again}")
            seen: list[int] = []
            await quiet.subscribe(lambda ev, _tok: _append(seen, ev), SequenceToken(s.partition, 0, 0))
            await until(lambda: seen == [0, 0, 1, 1, 2, 2], what=f"the quiet stream from the start, got {seen}")
            assert decoded.count(b"[0,0]") == 1  # one decode per record and cursor, not per event

    run(main())


async def _append(out: list[Any], ev: Any) -> None:
    out.append(ev)


def test_num_queues_must_match_the_topic(streams_backend: str) -> None:
    cfg = config(streams_backend, num_queues=2)

    async def main() -> None:
        async with StreamProvider(cfg, consume=False):
            pass
        with pytest.raises(StreamsConfigError, match=r"streams\.num_queues"):
            await StreamProvider({**cfg, "num_queues": 3, "metrics_port": 0}).start()

    run(main())


def test_busy_metrics_port_is_a_clear_error(streams_embedded: Any) -> None:
    """A chosen port that is taken fails start() naming the key, and leaves nothing running behind."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cfg = config(streams_embedded.bootstrap, num_queues=1, metrics_port=port)
        before = threading.active_count()

        async def main() -> None:
            p = StreamProvider(cfg)
            with pytest.raises(StreamsConfigError, match=rf"streams\.metrics_port: .*{port}"):
                await p.start()
            await p.close()

        run(main())
        assert threading.active_count() == before


@pytest.mark.parametrize("key", ["producer", "consumer"])
def test_bad_librdkafka_pass_through_names_the_key(streams_embedded: Any, key: str) -> None:
    """librdkafka checks pass-through settings only when the client is built: still one error naming the key."""
    cfg = config(streams_embedded.bootstrap, num_queues=1, **{key: {"no.such.property": 1}})

    async def main() -> None:
        with pytest.raises(StreamsConfigError, match=rf"^streams\.{key}: .*no\.such\.property"):
            await StreamProvider(cfg).start()

    run(main())


class Tracked:
    """An implicit handler with ``on_deactivate()``: records per key which activation saw what, and when."""

    def __init__(self, key: str, log: dict[str, list[tuple[str, int, Any]]], generations: dict[str, int]) -> None:
        generations[key] += 1
        self.key, self.log, self.gen = key, log, generations[key]
        self.busy = False

    async def __call__(self, event: Any, token: SequenceToken) -> None:
        assert not self.busy, "one event at a time per key"
        self.busy = True
        self.log[self.key].append(("event", self.gen, event))
        await asyncio.sleep(0)  # yield: nothing of this key may run meanwhile
        self.busy = False

    async def on_deactivate(self) -> None:
        await asyncio.sleep(0.01)  # slow on purpose: the key's next activation must wait for it
        self.log[self.key].append(("deactivated", self.gen, None))


def subscription_objects() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, Subscription))


def test_idle_implicit_subscriptions_retire_and_come_back(streams_backend: str) -> None:
    """Many keys idle past implicit_idle_timeout: all retire (gauge 0, counter, no Subscription objects left,
    nothing holds the commit point); a retired key's next events go to a fresh handler, once each, in order,
    after the old handler's on_deactivate() finished."""
    keys, timeout = 2000, 0.5
    log: dict[str, list[tuple[str, int, Any]]] = defaultdict(list)
    generations: dict[str, int] = defaultdict(int)

    async def main() -> None:
        before = subscription_objects()
        async with StreamProvider(config(streams_backend, implicit_idle_timeout=timeout)) as p:
            p.implicit("idle", lambda key: Tracked(key, log, generations))
            await p.wait_assigned(4)
            sem = asyncio.Semaphore(500)

            async def one(key: str, n: int) -> None:
                async with sem:
                    await p.stream("idle", key).publish(n)

            await asyncio.gather(*(one(f"k{i}", 0) for i in range(keys)))
            await until(lambda: sum(len(v) for v in log.values()) >= keys, what="first events")
            assert 1 <= (metric(p, "logbroker_streams_implicit_subscriptions") or 0) <= keys
            # the timeout itself is what we wait for: polled with a deadline
            await until(lambda: not p._implicit_subs, timeout=timeout + 60, what="retirement")
            await until(lambda: sum(len(v) for v in log.values()) >= 2 * keys, what="on_deactivate calls")
            assert metric(p, "logbroker_streams_implicit_subscriptions") == 0
            assert metric(p, "logbroker_streams_implicit_retirements_total") == keys
            assert not p.subscribers and not p._idle_heap
            assert subscription_objects() == before  # bounded: the cursors are gone, not just idle
            for agent in p.agents.values():  # retired keys hold neither the cache nor the commit point
                assert p._readers_past(agent) == agent.next_offset
                assert agent.pressure_cursors == 0

            again = [f"k{i}" for i in range(0, keys, 20)]
            for n in (1, 2):
                await asyncio.gather(*(one(k, n) for k in again))
            await until(lambda: all(len(log[k]) >= 4 for k in again), what="events of re-activated keys")
            # active now, or retired again since (a slow run may idle past the timeout before this line)
            active = metric(p, "logbroker_streams_implicit_subscriptions") or 0
            assert active + (metric(p, "logbroker_streams_implicit_retirements_total") or 0) - keys == len(again)

    run(main())
    for i in range(keys):
        key = f"k{i}"
        expected = [("event", 1, 0), ("deactivated", 1, None)]
        if i % 20 == 0:
            expected += [("event", 2, 1), ("event", 2, 2), ("deactivated", 2, None)]  # the last one at close()
        assert log[key] == expected, key


def test_no_event_lost_when_retirement_races_publishes(streams_backend: str) -> None:
    """Bursts separated by gaps around a tiny idle timeout: keys retire and re-activate between and during
    bursts, and every event is still delivered exactly once, in order, one handler at a time per key."""
    keys, bursts, timeout = 20, 30, 0.05
    log: dict[str, list[tuple[str, int, Any]]] = defaultdict(list)
    generations: dict[str, int] = defaultdict(int)
    rnd = random.Random(7)

    async def main() -> None:
        async with StreamProvider(config(streams_backend, implicit_idle_timeout=timeout, produce_wait_ms=1)) as p:
            p.implicit("race", lambda key: Tracked(key, log, generations))
            await p.wait_assigned(4)
            n = 0
            for _ in range(bursts):
                size = rnd.randint(1, 4)
                await asyncio.gather(*(p.stream("race", f"r{k}").publish(n + j) for k in range(keys)
                                       for j in range(size)))  # fmt: skip
                n += size
                await asyncio.sleep(rnd.uniform(0, 3 * timeout))  # load shape: gaps shorter and longer than it
            await until(lambda: all(sum(e[0] == "event" for e in log[f"r{k}"]) >= n for k in range(keys)),
                        what="every event")  # fmt: skip
            await until(lambda: not p._implicit_subs, what="final retirement")
            for agent in p.agents.values():
                assert p._readers_past(agent) == agent.next_offset
            total.append(n)

    total: list[int] = []
    run(main())
    reactivated = 0
    for k in range(keys):
        events = log[f"r{k}"]
        assert [e[2] for e in events if e[0] == "event"] == list(range(total[0])), f"r{k}: lost, repeated or reordered"
        # each generation's events come before its deactivation, which comes before the next generation
        gens = [e[1] for e in events]
        assert gens == sorted(gens)
        for g in set(gens):
            assert [e[0] for e in events if e[1] == g][-1] == "deactivated"
        reactivated += max(gens) > 1
    assert reactivated >= keys // 2  # the timeout really raced the bursts


def test_implicit_subscriptions_of_a_revoked_partition_retire(streams_backend: str) -> None:
    """A partition moves to another member: its implicit subscriptions in the old owner go idle and retire
    (nothing pending: the new owner starts from the committed offset), the new owner delivers; when the
    partition comes back, a fresh handler takes the key's next event. Every event once, in order."""
    timeout = 0.5
    seen: dict[str, list[tuple[str, int]]] = defaultdict(list)

    def factory(who: str) -> Callable[[str], Any]:
        def make(key: str) -> Any:
            async def handle(event: Any, _token: SequenceToken) -> None:
                seen[key].append((who, event))

            return handle

        return make

    async def main() -> None:
        cfg = config(streams_backend, implicit_idle_timeout=timeout, session_timeout_ms=6000)
        keys = [f"m{i}" for i in range(40)]
        async with StreamProvider(cfg) as p1:
            p1.implicit("moves", factory("p1"))
            await p1.wait_assigned(4)
            await asyncio.gather(*(p1.stream("moves", k).publish(0) for k in keys))
            await until(lambda: all(len(seen[k]) == 1 for k in keys), what="first events")
            assert len(p1._implicit_subs) == len(keys)
            async with StreamProvider(cfg) as p2:
                p2.implicit("moves", factory("p2"))
                await until(lambda: len(p1.owned) == 2 and len(p2.owned) == 2, what="rebalance")
                moved = [k for k in keys if p1.ring.partition("moves", k) in p2.owned]
                assert moved
                await until(lambda: not p1._implicit_subs, timeout=timeout + 60, what="retirement in p1")
                assert metric(p1, "logbroker_streams_implicit_subscriptions") == 0
                await asyncio.gather(*(p1.stream("moves", k).publish(1) for k in keys))
                await until(lambda: all(len(seen[k]) == 2 for k in keys), what="second events")
                assert all(seen[k][1][0] == "p2" for k in moved)
                assert all(seen[k][1][0] == "p1" for k in keys if k not in moved)
                await until(lambda: not p2._implicit_subs, timeout=timeout + 60, what="retirement in p2")
            await until(lambda: len(p1.owned) == 4, what="partitions back")
            await asyncio.gather(*(p1.stream("moves", k).publish(2) for k in keys))
            await until(lambda: all(len(seen[k]) >= 3 for k in keys), what="third events")
            assert all(seen[k][2][0] == "p1" for k in keys)
            await until(lambda: not p1._implicit_subs, timeout=timeout + 60, what="final retirement")
            for agent in p1.agents.values():
                assert p1._readers_past(agent) == agent.next_offset

    run(main())
    assert all([e for _, e in v] == [0, 1, 2] for v in seen.values()), dict(seen)
