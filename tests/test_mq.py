"""`logbroker.mq` on all three backends: Milvus' Kafka consumer tests as the reference, plus our improvements."""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import time
import weakref
from collections.abc import Callable

import pytest
from confluent_kafka.admin import AdminClient

from logbroker.mq import (
    Client,
    InitialPosition,
    Message,
    MessageID,
    MessageTooLarge,
    MQClosedError,
    MQError,
    MsgPack,
    MsgPosition,
    MsgStream,
    SeekError,
    StreamMessage,
    TopicNotEmpty,
    TopicNotFound,
)
from logbroker.mq import client as mq_client
from mq_backends import *  # noqa: F403 - the backend fixtures
from mq_backends import unique

MakeClient = Callable[..., Client]


def drain(consumer: object, n: int, timeout: float = 15.0) -> list[Message]:
    out: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        m = consumer.receive(0.5)  # type: ignore[attr-defined]
        if m is not None:
            out.append(m)
    return out


def test_send_receive_properties(make_client: MakeClient) -> None:
    c = make_client()
    topic = unique()
    with c.create_producer(topic) as p:
        ids = [p.send(f"m{i}".encode(), {"msg_type": "insert", "i": str(i)}) for i in range(3)]
    assert [i.offset for i in ids] == [0, 1, 2] and all(i.topic == topic and i.partition == 0 for i in ids)
    with c.subscribe(topic, unique("sub"), InitialPosition.EARLIEST) as cons:
        got = drain(cons, 3)
    assert [m.payload for m in got] == [b"m0", b"m1", b"m2"]
    assert [m.id for m in got] == ids
    assert got[2].properties == {"msg_type": "insert", "i": "2"}


def test_send_batch(make_client: MakeClient) -> None:
    """The bulk path: one handle per batch, IDs in order, on one partition or spread by the partitioner."""
    c = make_client(num_partitions=2)
    topic = unique()
    with c.create_producer(topic) as p:
        ids = p.send_batch([b"b%d" % i for i in range(50)], {"k": "v"}, partition=1).result(30)
        assert len(ids) == 50 and [i.offset for i in ids] == list(range(50)) and ids[-1] == MessageID(topic, 1, 49)
        spread = p.send_batch([b"s"] * 20).result(30)
        assert len(spread) == 20 and {i.partition for i in spread} <= {0, 1}
    with c.subscribe(topic, unique("sub"), InitialPosition.EARLIEST) as cons:
        got = drain(cons, 70)
    assert len(got) == 70 and got[0].properties in ({"k": "v"}, {})


def test_seek_inclusive_exclusive_once(make_client: MakeClient) -> None:
    """Milvus' TestKafkaConsumer_Seek: seek(1) gives 222 inclusive, 333 exclusive; a second seek fails."""
    c = make_client()
    topic = unique()
    with c.create_producer(topic) as p:
        ids = [p.send(v) for v in (b"111", b"222", b"333")]
    for inclusive, want in ((True, b"222"), (False, b"333")):
        cons = c.subscribe(topic, unique("sub"), InitialPosition.UNKNOWN)
        with pytest.raises(MQError, match="no position"):
            cons.receive(0.1)
        cons.seek(c.message_id_from_bytes(ids[1].serialize()), inclusive)
        with pytest.raises(SeekError, match="already sought"):
            cons.seek(ids[1], inclusive)
        m = cons.receive(10)
        assert m is not None and m.payload == want
        with pytest.raises(SeekError, match="consumption started"):
            cons.seek(ids[0])
        cons.close()
    cons = c.subscribe(topic, unique("sub"), InitialPosition.UNKNOWN)
    cons.seek(c.earliest_message_id())
    m = cons.receive(10)
    assert m is not None and m.payload == b"111" and m.id.at_earliest_position()
    other = unique()
    c.ensure_topic(other)
    foreign = c.subscribe(other, unique("sub"), InitialPosition.UNKNOWN)
    with pytest.raises(SeekError, match="belongs to topic"):
        foreign.seek(ids[1])


def test_latest_id_and_topic_validity(make_client: MakeClient) -> None:
    c = make_client()
    topic = unique()
    cons = c.subscribe(topic, unique("sub"), InitialPosition.UNKNOWN)
    cons.check_topic_valid()
    latest = cons.latest_message_id()
    assert latest.offset == 0 and latest.at_earliest_position()  # Milvus: 0 for an empty topic
    with c.create_producer(topic) as p:
        ids = [p.send(b"x") for _ in range(3)]
    deadline = time.monotonic() + 10
    while cons.latest_message_id() != ids[-1] and time.monotonic() < deadline:
        time.sleep(0.1)  # Tansu's high watermark trails acknowledged produces
    assert cons.latest_message_id() == ids[-1]
    with pytest.raises(TopicNotEmpty):
        cons.check_topic_valid()
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.delete_topics([topic])[topic].result(30)
    deadline = time.monotonic() + 10
    while c.partitions(topic) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    with pytest.raises(TopicNotFound):
        cons.check_topic_valid()


def test_latest_sees_only_new_and_earliest_rereads(make_client: MakeClient) -> None:
    """From Latest only what is sent after subscribe; with nothing committed a subscription re-reads."""
    c = make_client(ack_commit="off")
    topic = unique()
    sub = unique("sub")
    with c.create_producer(topic) as p:
        p.send(b"old")
        latest = c.subscribe(topic, unique("sub"), InitialPosition.LATEST)
        p.send(b"new")
        m = latest.receive(10)
        assert m is not None and m.payload == b"new"
        assert latest.receive(0.3) is None
        for _ in range(2):
            with c.subscribe(topic, sub, InitialPosition.EARLIEST) as cons:
                got = drain(cons, 2)
                assert [g.payload for g in got] == [b"old", b"new"]
                for g in got:
                    cons.ack(g)  # off: no commit


@pytest.mark.parametrize("mode", ["message", "batch"])
def test_ack_commits(make_client: MakeClient, mode: str) -> None:
    """ack() commits (Milvus' is a no-op): a subscription resumes after the last acked message."""
    c = make_client(ack_commit=mode, commit_interval_ms=100)
    topic = unique()
    sub = unique("sub")
    with c.create_producer(topic) as p:
        for i in range(4):
            p.send(b"%d" % i)
    with c.subscribe(topic, sub, InitialPosition.EARLIEST) as cons:
        got = drain(cons, 2)
        for m in got:
            cons.ack(m)
    with c.subscribe(topic, sub, InitialPosition.LATEST) as cons:
        assert cons.committed() == {0: 2}
        assert [m.payload for m in drain(cons, 2)] == [b"2", b"3"]


def test_partitions(make_client: MakeClient) -> None:
    c = make_client(num_partitions=3)
    topic = unique()
    assert c.ensure_topic(topic) == [0, 1, 2]
    with c.create_producer(topic) as p:
        ids = [p.send(b"p%d" % i, partition=i % 3) for i in range(6)]
    assert [(i.partition, i.offset) for i in ids] == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1)]
    with pytest.raises(ValueError, match="different partitions"):
        _ = ids[0] <= ids[1]
    assert ids[0] <= ids[3] and ids[0] < ids[3] and not ids[3] <= ids[0]
    with c.subscribe(topic, unique("sub"), InitialPosition.EARLIEST) as cons:
        got = drain(cons, 6)
        assert sorted(m.id.serialize() for m in got) == sorted(i.serialize() for i in ids)
        assert cons.latest_message_id(2) == ids[5]
    with c.subscribe(topic, unique("sub"), InitialPosition.UNKNOWN) as cons:
        cons.seek(ids[2], inclusive=False)  # partition 2 only, after its first message
        got = drain(cons, 1)
        assert [m.id for m in got] == [ids[5]] and cons.receive(0.3) is None
        with pytest.raises(SeekError):
            cons.seek(MessageID(topic, 7, 0))


def test_async_send_and_iteration(make_client: MakeClient) -> None:
    c = make_client()
    topic = unique()

    async def main() -> list[bytes]:
        p = c.create_producer(topic)
        ids = await asyncio.gather(*(p.asend(b"a%d" % i) for i in range(5)))
        assert sorted(i.offset for i in ids) == [0, 1, 2, 3, 4]
        p.close()
        cons = c.subscribe(topic, unique("sub"), InitialPosition.EARLIEST)
        got: list[bytes] = []
        async for m in cons:
            got.append(m.payload)
            if len(got) == 5:
                break
        cons.close()
        return got

    assert asyncio.run(asyncio.wait_for(main(), 30)) == [b"a%d" % i for i in range(5)]


@pytest.fixture(params=["compiled", "python"])
def handle_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Producers made under it hand out the compiled handle (mq/_delivery.c) or the Python one."""
    if request.param == "python":
        monkeypatch.setattr(mq_client, "CompiledDelivery", None)
    elif mq_client.CompiledDelivery is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("mq/_delivery.c was not built by pip install (CI has gcc and the Python headers)")
        pytest.skip("the compiled handle is not built here")
    return str(request.param)


def test_send_async_handles(make_client: MakeClient, handle_kind: str, request: pytest.FixtureRequest) -> None:
    """Per-message handles: MessageIDs in send order, callbacks before and after the answer (each once, with
    the handle), the delivery error as the mq error, and the producer collected once its handles are dropped.
    The compiled handle is invisible to the garbage collector, the Python one is not."""
    c = make_client()
    topic = unique()
    p = c.create_producer(topic)
    handles = [p.send_async(b"h%d" % i, {"i": str(i)} if i % 2 else None) for i in range(300)]
    assert gc.is_tracked(handles[0]) is (handle_kind == "python")
    early: list[object] = []
    handles[-1].add_done_callback(early.append)  # usually still pending here: runs on the poll thread
    ids = [h.result(30) for h in handles[:-1]] + [handles[-1].result(timeout=30)]
    assert [i.offset for i in ids] == list(range(300)) and {(i.topic, i.partition) for i in ids} == {(topic, 0)}
    deadline = time.monotonic() + 10
    while not early and time.monotonic() < deadline:
        time.sleep(0.01)
    late: list[object] = []
    handles[0].add_done_callback(late.append)  # answered already: runs at once, here
    assert early == [handles[-1]] and late == [handles[0]] and all(h.done() for h in handles)
    assert repr(handles[5]).endswith("offset=5>") or handle_kind == "python"
    if request.node.callspec.params["mq_backend"] != "tansu":  # Tansu enforces no message.max.bytes
        big = p.send_async(b"x" * (2 * 1024 * 1024))
        failed: list[object] = []
        big.add_done_callback(failed.append)
        with pytest.raises(MessageTooLarge, match="too large"):
            big.result(30)
        deadline = time.monotonic() + 10
        while not failed and time.monotonic() < deadline:
            time.sleep(0.01)
        assert failed == [big] and big.done()
    with pytest.raises(TypeError):
        handles[0].result(1, 2)  # type: ignore[call-arg]
    alive = weakref.ref(p)
    p.close()
    assert handles[7].result().offset == 7  # still answers after close
    del p, handles, ids, early, late
    if request.node.callspec.params["mq_backend"] != "tansu":
        del big, failed
    gc.collect()
    assert alive() is None, "a closed producer outlived its handles (or stayed in the client's list)"


def test_close_while_receiving(make_client: MakeClient) -> None:
    """close() from another thread ends a blocking receive/iteration instead of racing librdkafka."""
    c = make_client()
    cons = c.subscribe(unique(), unique("sub"), InitialPosition.LATEST)
    seen: list[object] = []
    t = threading.Thread(target=seen.extend, args=(cons,))  # blocks: nothing arrives
    t.start()
    time.sleep(0.3)
    cons.close()
    t.join(5)
    assert not t.is_alive() and seen == []
    alive = weakref.ref(cons)
    del cons, t
    gc.collect()
    assert alive() is None, "a closed consumer stayed in the client's list"


def test_msgstream(make_client: MakeClient) -> None:
    c = make_client()
    chans = [unique("ch"), unique("ch")]
    with MsgStream(c) as prod:
        prod.as_producer(chans)
        pack = MsgPack([StreamMessage(b"m%d" % i, {"i": str(i)}, hash_key=i) for i in range(4)])
        placed = prod.produce(pack)
        assert {ch: len(ids) for ch, ids in placed.items()} == {chans[0]: 2, chans[1]: 2}
        prod.set_repack_func(lambda msgs, n: {1: list(msgs)})
        assert list(prod.produce(MsgPack([StreamMessage(b"only1")]))) == [chans[1]]
        everywhere = prod.broadcast(MsgPack([StreamMessage(b"all")]))
        assert sorted(everywhere) == sorted(chans)
    with MsgStream(c) as cons:
        cons.as_consumer(chans, unique("sub"), InitialPosition.EARLIEST)
        got = drain(cons, 7)
        assert sorted(m.payload for m in got) == sorted([b"m0", b"m1", b"m2", b"m3", b"only1", b"all", b"all"])
    with MsgStream(c) as cons:
        cons.as_consumer(chans, unique("sub"), InitialPosition.UNKNOWN)
        cons.seek([MsgPosition(ch, ids[-1]) for ch, ids in everywhere.items()], include_current=True)
        assert sorted((m.topic, m.payload) for m in drain(cons, 2)) == sorted((ch, b"all") for ch in chans)


def test_bad_input(make_client: MakeClient, request: pytest.FixtureRequest) -> None:
    strict = make_client(auto_create_topics=False)
    missing = unique()
    with pytest.raises(TopicNotFound, match="auto_create_topics is off"):
        strict.create_producer(missing)
    with pytest.raises(TopicNotFound):
        strict.subscribe(missing, unique("sub"))
    c = make_client()
    topic = unique()
    p = c.create_producer(topic)
    backend = request.node.callspec.params["mq_backend"]
    if backend == "tansu":  # Tansu enforces no message.max.bytes: the broker's "limit" accepts 2 MB
        assert p.send(b"x" * (2 * 1024 * 1024)).offset == 0
    else:
        with pytest.raises(MessageTooLarge, match="too large"):
            p.send(b"x" * (2 * 1024 * 1024))
    with pytest.raises(MessageTooLarge):  # over the producer's own 10 MiB limit, refused before the wire
        p.send(b"x" * (11 * 1024 * 1024))
    assert p.send(b"small").offset == (1 if backend == "tansu" else 0)  # still usable
    cons = c.subscribe(topic, unique("sub"), InitialPosition.EARLIEST)
    p.close()
    cons.close()
    with pytest.raises(MQClosedError):
        p.send(b"late")
    with pytest.raises(MQClosedError):
        cons.receive(0.1)
    with pytest.raises(MQClosedError):
        cons.ack(MessageID(topic, 0, 0))
    c.close()
    with pytest.raises(MQClosedError):
        c.create_producer(topic)
