"""Share groups (KIP-932, Kafka 4's queues) with librdkafka's share consumer (confluent-kafka's
ShareConsumer), asserted alike on logbroker and Apache Kafka 4.4: records spread over members sharing one
partition, each delivered and acknowledged once; released records redelivered; a killed member's records
redelivered once its locks expire; a poison record archived at the delivery-count limit. logbroker only:
acknowledgements survive kill -9 of the broker.

Both brokers start a share-partition at the log end (`share.auto.offset.reset` latest), which Kafka does
a few seconds after the first member joins: each test first produces warm-up records until one arrives,
then the records it counts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from logbroker_devtools.testing.process import BrokerProcess
from support import both_targets, create_topic, eventually, kafka_peer, unique

ck = pytest.importorskip("confluent_kafka")
ShareConsumer = ck.ShareConsumer
AcknowledgeType = ck.AcknowledgeType

pytestmark = pytest.mark.timeout(300)
LOCK_MS = 3000  # group.share.record.lock.duration.ms on both brokers, so an abandoned lock expires soon
WARM = b"warm-up"


@pytest.fixture(scope="module", params=both_targets())
def bootstrap(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if request.param == "kafka":
        with kafka_peer(**{"group.share.record.lock.duration.ms": LOCK_MS,
                           "group.share.min.record.lock.duration.ms": 1000}) as kafka:  # fmt: skip
            yield kafka
        return
    proc = BrokerProcess(tmp_path_factory.mktemp("share") / "data",
                         env={"LOGBROKER_GROUP_SHARE_RECORD_LOCK_DURATION_MS": str(LOCK_MS)})  # fmt: skip
    proc.start()
    yield proc.bootstrap
    assert proc.stop() == 0, proc.log_tail()


def consumer(bootstrap: str, group: str, topic: str, explicit: bool = False) -> Any:
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3}
    if explicit:
        conf["share.acknowledgement.mode"] = "explicit"
    c = ShareConsumer(conf)
    c.subscribe([topic])
    return c


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for v in values:
        p.produce(topic, v, partition=0)
    assert p.flush(30) == 0


def warm_up(bootstrap: str, topic: str, consumers: list[Any], explicit: bool = False) -> None:
    """Produce warm-up records until one reaches a member: the share-partition has started."""
    p = Producer({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        p.produce(topic, WARM, partition=0)
        p.flush(10)
        for c in consumers:
            msgs = [m for m in c.poll(0.3) or [] if m.error() is None]
            if explicit:
                for m in msgs:
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
            if msgs:
                if explicit:
                    c.commit_sync(30)
                return
    raise AssertionError("no share-group member got a record within 60 s")


def drain(consumers: list[Any], want: int, timeout: float = 60, ack: Any = None) -> dict[int, list[Any]]:
    """Poll every consumer in turn until `want` counted (non-warm-up) records arrived; messages by consumer.
    With `ack`, explicit mode: ack(consumer, message) decides each message's acknowledgement."""
    got: dict[int, list[Any]] = {i: [] for i in range(len(consumers))}
    deadline = time.monotonic() + timeout
    while sum(map(len, got.values())) < want and time.monotonic() < deadline:
        for i, c in enumerate(consumers):
            msgs = [m for m in c.poll(0.2) or [] if m.error() is None]
            for m in msgs:
                if ack is not None:
                    c.acknowledge(m, ack(c, m) if m.value() != WARM else AcknowledgeType.ACCEPT)
                if m.value() != WARM:
                    got[i].append(m)
            if ack is not None and msgs:
                c.commit_sync(30)
    return got


def test_members_sharing_one_partition_get_every_record_once(bootstrap: str) -> None:
    topic = create_topic(bootstrap, unique("sh-three"))
    group = unique("sg")
    members = [consumer(bootstrap, group, topic) for _ in range(3)]
    try:
        warm_up(bootstrap, topic, members)
        values = [b"r%d" % i for i in range(300)]
        for chunk in range(0, 300, 30):  # in rounds, so every member's fetch finds records
            produce(bootstrap, topic, values[chunk : chunk + 30])
        got = drain(members, 300)
        offsets = [m.offset() for ms in got.values() for m in ms]
        assert sorted(m.value() for ms in got.values() for m in ms) == sorted(values)
        assert len(offsets) == len(set(offsets)), "a record was delivered twice"
        assert all(m.delivery_count() == 1 for ms in got.values() for m in ms)
        for c in members:  # implicit mode: what was delivered is accepted by the next poll or a commit
            c.commit_sync(30)
    finally:
        for c in members:
            c.close()
    # Everything was accepted: a new member gets nothing old.
    late = consumer(bootstrap, group, topic)
    try:
        produce(bootstrap, topic, [b"after"])
        again = drain([late], 1, timeout=30)
        assert [m.value() for m in again[0]] == [b"after"]
    finally:
        late.close()


def test_a_released_record_is_delivered_again(bootstrap: str) -> None:
    topic = create_topic(bootstrap, unique("sh-release"))
    group = unique("sg")
    c = consumer(bootstrap, group, topic, explicit=True)
    try:
        warm_up(bootstrap, topic, [c], explicit=True)
        produce(bootstrap, topic, [b"a", b"b", b"c"])
        released: set[bytes] = set()

        def ack(_c: Any, m: Any) -> Any:
            if m.value() == b"b" and m.value() not in released:
                released.add(m.value())
                return AcknowledgeType.RELEASE
            return AcknowledgeType.ACCEPT

        got = drain([c], 4, ack=ack)[0]
        assert sorted((m.value(), m.delivery_count()) for m in got) == [(b"a", 1), (b"b", 1), (b"b", 2), (b"c", 1)]
    finally:
        c.close()


def test_a_poison_record_is_archived_at_the_delivery_limit(bootstrap: str) -> None:
    """Released every time: delivered group.share.delivery.count.limit (5) times, then never again."""
    topic = create_topic(bootstrap, unique("sh-poison"))
    group = unique("sg")
    c = consumer(bootstrap, group, topic, explicit=True)
    try:
        warm_up(bootstrap, topic, [c], explicit=True)
        produce(bootstrap, topic, [b"poison", b"fine"])

        def ack(_c: Any, m: Any) -> Any:
            return AcknowledgeType.RELEASE if m.value() == b"poison" else AcknowledgeType.ACCEPT

        got = drain([c], 6, ack=ack)[0]
        assert Counter(m.value() for m in got) == {b"poison": 5, b"fine": 1}
        assert [m.delivery_count() for m in got if m.value() == b"poison"] == [1, 2, 3, 4, 5]
        produce(bootstrap, topic, [b"next"])
        assert [m.value() for m in drain([c], 1, ack=ack, timeout=30)[0]] == [b"next"]
    finally:
        c.close()


_HOLDER = textwrap.dedent(
    """
    import sys, time
    from confluent_kafka import ShareConsumer
    c = ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "log_level": 3,
                       "share.acknowledgement.mode": "explicit"})
    c.subscribe([sys.argv[3]])
    while True:
        msgs = [m for m in c.poll(0.5) or [] if m.error() is None and m.value() != b"warm-up"]
        if msgs:
            print(" ".join(m.value().decode() for m in msgs), flush=True)
            time.sleep(3600)  # holds its records until killed
    """
)


@pytest.mark.parametrize("lock", ["short", "long"])
def test_a_killed_members_records_are_redelivered(bootstrap: str, tmp_path: Path, lock: str) -> None:
    """A member killed while it holds records: they come back as a second delivery, once their lock expires
    (short: 3 s) or, sooner, once the broker sees its connection gone (long: a 60 s lock; Kafka 4.4
    measured 4.1 s, logbroker at once)."""
    topic = create_topic(bootstrap, unique("sh-kill"))
    group = unique("sg")
    if lock == "long":
        assert set_group_configs(bootstrap, group, share_record_lock_duration_ms="60000") == [(0, None)]
    script = tmp_path / "holder.py"
    script.write_text(_HOLDER)
    holder = subprocess.Popen([sys.executable, str(script), bootstrap, group, topic], stdout=subprocess.PIPE,
                              start_new_session=True)  # fmt: skip
    other = None
    try:
        # The holder alone in the group: records go to it until it has taken some (and holds them).
        assert holder.stdout is not None
        os.set_blocking(holder.stdout.fileno(), False)
        line = b""
        n = 0
        deadline = time.monotonic() + 60
        while not line and time.monotonic() < deadline:
            produce(bootstrap, topic, [b"k%d" % n])
            n += 1
            time.sleep(0.3)
            line = holder.stdout.readline()
        assert line, "the holder never got a record"
        held = line.split()
        other = consumer(bootstrap, group, topic, explicit=True)
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait(10)
        # `other` gets what it held, each as a second delivery.
        seen: dict[bytes, int] = {}
        deadline = time.monotonic() + (30 if lock == "long" else 60)
        while not set(held) <= set(seen) and time.monotonic() < deadline:
            for m in drain([other], 1, timeout=1, ack=lambda _c, _m: AcknowledgeType.ACCEPT)[0]:
                seen[m.value()] = m.delivery_count()
        assert {v: seen.get(v) for v in held} == dict.fromkeys(held, 2)
    finally:
        if holder.poll() is None:
            os.killpg(holder.pid, signal.SIGKILL)
            holder.wait(10)
        if other is not None:
            other.close()


def test_acknowledgements_survive_kill_9_of_the_broker(tmp_path: Path) -> None:
    """logbroker only (Kafka's durability is its own): accepted records are never delivered again after a
    crash; what a member held unacknowledged is delivered again."""
    proc = BrokerProcess(tmp_path / "data")
    proc.start()
    try:
        bs = proc.bootstrap
        topic = create_topic(bs, unique("sh-crash"))
        group = unique("sg")
        c = consumer(bs, group, topic, explicit=True)
        warm_up(bs, topic, [c], explicit=True)
        produce(bs, topic, [b"x%d" % i for i in range(10)])
        accepted: list[bytes] = []

        def ack(_c: Any, m: Any) -> Any:
            if len(accepted) < 6:
                accepted.append(m.value())
                return AcknowledgeType.ACCEPT
            return AcknowledgeType.RELEASE

        drain([c], 10, ack=ack, timeout=30)
        assert len(accepted) == 6
        proc.kill()  # SIGKILL: no clean shutdown
        c.close()
        proc.start()
        c = consumer(bs, group, topic, explicit=True)
        try:
            got = drain([c], 4, timeout=60, ack=lambda _c, _m: AcknowledgeType.ACCEPT)[0]
            values = sorted(m.value() for m in got)
            assert values == sorted({b"x%d" % i for i in range(10)} - set(accepted))
        finally:
            c.close()
    finally:
        proc.kill()


def test_the_java_share_consumer_gets_every_record_and_a_released_one_again(bootstrap: str) -> None:
    """Kafka 4.4's KafkaShareConsumer (ShareFetch v2 with the record-limit and renew fields, explicit
    acknowledgements): every record once, and the one it releases a second time."""
    from support import java_client_tool

    topic = create_topic(bootstrap, unique("sh-java"))
    group = unique("sg")
    tool = java_client_tool()
    proc = subprocess.Popen(
        tool.command("share-consume", "--bootstrap", bootstrap, "--topic", topic, "--group", group,
                     "--count", "10", "--release", "j3", "--timeout-ms", "90000"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        os.set_blocking(proc.stdout.fileno(), False)
        rows: list[dict[str, Any]] = []
        deadline = time.monotonic() + 90
        p = Producer({"bootstrap.servers": bootstrap})
        while not rows and time.monotonic() < deadline and proc.poll() is None:  # warm up
            p.produce(topic, WARM, partition=0)
            p.flush(10)
            time.sleep(0.3)
            rows += [json.loads(ln) for ln in proc.stdout.readlines() if ln.strip()]
        assert rows, "the Java share consumer never got a record"
        produce(bootstrap, topic, [b"j%d" % i for i in range(10)])
        out, err = proc.communicate(timeout=90)
        assert proc.returncode == 0, err[-2000:]
        rows += [json.loads(ln) for ln in out.splitlines() if ln.strip()]
        got = sorted((r["value"], r["delivery_count"]) for r in rows if r["value"] != WARM.decode())
        assert got == sorted([(f"j{i}", 1) for i in range(10)] + [("j3", 2)])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def set_group_configs(bootstrap: str, group: str, **configs: str) -> list[tuple[int, str | None]]:
    """IncrementalAlterConfigs SET on the GROUP resource (type 32), as `kafka-configs --entity-type groups`."""
    from logbroker.protocol import ApiKey, api
    from support import Wire

    incremental = api(ApiKey.IncrementalAlterConfigs).request
    res = incremental.AlterConfigsResource
    entries = [res.AlterableConfig(name=k.replace("_", "."), config_operation=0, value=v) for k, v in configs.items()]
    with Wire(bootstrap, timeout=30) as wire:
        resp = wire.call(ApiKey.IncrementalAlterConfigs, 1, incremental(resources=[
            res(resource_type=32, resource_name=group, configs=entries)], validate_only=False))  # fmt: skip
    return [(r.error_code, r.error_message) for r in resp.responses]


def group_configs(bootstrap: str, group: str, *keys: str) -> dict[str, tuple[str, int]]:
    from logbroker.protocol import ApiKey, api
    from support import Wire

    describe = api(ApiKey.DescribeConfigs).request
    with Wire(bootstrap, timeout=30) as wire:
        resp = wire.call(ApiKey.DescribeConfigs, 4, describe(resources=[describe.DescribeConfigsResource(
            resource_type=32, resource_name=group, configuration_keys=list(keys))], include_synonyms=False,
            include_documentation=False))  # fmt: skip
    [res] = resp.results
    assert res.error_code == 0, res
    return {c.name: (c.value, c.config_source) for c in res.configs}


def test_group_configs_set_where_a_share_group_starts_and_its_delivery_limit(bootstrap: str) -> None:
    """share.auto.offset.reset=earliest delivers what was there before the group; share.delivery.count.limit
    lowers the limit for this group only. A bad value is INVALID_CONFIG with Kafka's message."""
    topic = create_topic(bootstrap, unique("sh-configs"))
    group = unique("sg")
    assert set_group_configs(bootstrap, group, share_auto_offset_reset="earliest",
                             share_delivery_count_limit="2") == [(0, None)]  # fmt: skip
    assert set_group_configs(bootstrap, group, share_delivery_count_limit="11") == [
        (40, "share.delivery.count.limit must be in the range 2 to 10 inclusive.")]  # fmt: skip
    assert group_configs(bootstrap, group, "share.auto.offset.reset", "share.delivery.count.limit") == {
        "share.auto.offset.reset": ("earliest", 8), "share.delivery.count.limit": ("2", 8)}  # fmt: skip
    produce(bootstrap, topic, [b"before", b"poison"])
    c = consumer(bootstrap, group, topic, explicit=True)
    try:

        def ack(_c: Any, m: Any) -> Any:
            return AcknowledgeType.RELEASE if m.value() == b"poison" else AcknowledgeType.ACCEPT

        got = drain([c], 3, ack=ack, timeout=60)[0]
        assert Counter(m.value() for m in got) == {b"before": 1, b"poison": 2}
        produce(bootstrap, topic, [b"next"])
        assert [m.value() for m in drain([c], 1, ack=ack, timeout=30)[0]] == [b"next"]
    finally:
        c.close()


def test_a_read_committed_share_group_never_delivers_aborted_records(bootstrap: str) -> None:
    topic = create_topic(bootstrap, unique("sh-txn"))
    group = unique("sg")
    assert set_group_configs(bootstrap, group, share_auto_offset_reset="earliest",
                             share_isolation_level="read_committed") == [(0, None)]  # fmt: skip
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("tx")})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"aborted-1", partition=0)
    p.produce(topic, b"aborted-2", partition=0)
    p.flush(30)
    p.abort_transaction(30)
    produce(bootstrap, topic, [b"plain"])
    p.begin_transaction()
    p.produce(topic, b"committed", partition=0)
    p.commit_transaction(30)
    c = consumer(bootstrap, group, topic, explicit=True)
    try:
        got = drain([c], 2, ack=lambda _c, _m: AcknowledgeType.ACCEPT, timeout=60)[0]
        assert sorted(m.value() for m in got) == [b"committed", b"plain"]
        produce(bootstrap, topic, [b"last"])
        assert [m.value() for m in drain([c], 1, ack=lambda _c, _m: AcknowledgeType.ACCEPT)[0]] == [b"last"]
    finally:
        c.close()


def test_group_configs_survive_kill_9(tmp_path: Path) -> None:
    proc = BrokerProcess(tmp_path / "data")
    proc.start()
    try:
        group = unique("sg")
        assert set_group_configs(proc.bootstrap, group, share_delivery_count_limit="7") == [(0, None)]
        proc.kill()
        proc.start()
        assert group_configs(proc.bootstrap, group, "share.delivery.count.limit") == {
            "share.delivery.count.limit": ("7", 8)}  # fmt: skip
    finally:
        proc.kill()


def test_a_share_group_id_is_no_other_kind_of_group(bootstrap: str) -> None:
    """ListGroups lists it as a share group; JoinGroup, ConsumerGroupHeartbeat and OffsetCommit refuse its
    id; DeleteGroups refuses it while it has members and deletes it once empty."""
    from logbroker.protocol import ApiKey, api
    from support import Wire

    topic = create_topic(bootstrap, unique("sh-kind"))
    group = unique("sg")
    c = consumer(bootstrap, group, topic)
    try:
        warm_up(bootstrap, topic, [c])
        with Wire(bootstrap, timeout=30) as wire:
            listed = wire.call(ApiKey.ListGroups, 5, states_filter=[], types_filter=["share"]).groups
            assert [(g.protocol_type, g.group_state, g.group_type) for g in listed if g.group_id == group] == [
                ("share", "Stable", "share")]  # fmt: skip
            assert [r.error_code for r in wire.call(ApiKey.DeleteGroups, 2, groups_names=[group]).results] == [68]
            J = api(ApiKey.JoinGroup).request
            range_protocol = J.JoinGroupRequestProtocol(name="range", metadata=b"")
            joined = wire.call(ApiKey.JoinGroup, 9, J(
                group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
                group_instance_id=None, protocol_type="consumer", reason=None, protocols=[range_protocol]))  # fmt: skip
            assert joined.error_code == 23  # INCONSISTENT_GROUP_PROTOCOL
            H = api(ApiKey.ConsumerGroupHeartbeat).request
            hb = wire.call(ApiKey.ConsumerGroupHeartbeat, 1, H(
                group_id=group, member_id="m" * 22, member_epoch=0, instance_id=None, rack_id=None,
                rebalance_timeout_ms=10000, subscribed_topic_names=[topic], subscribed_topic_regex=None,
                server_assignor=None, topic_partitions=[]))  # fmt: skip
            assert (hb.error_code, hb.error_message) == (69, f"Group {group} is not a consumer group.")
            C = api(ApiKey.OffsetCommit).request
            CT = C.OffsetCommitRequestTopic
            part = CT.OffsetCommitRequestPartition(partition_index=0, committed_offset=1, committed_leader_epoch=-1,
                                                   committed_metadata="")  # fmt: skip
            committed = wire.call(ApiKey.OffsetCommit, 9, C(
                group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                topics=[CT(name=topic, partitions=[part])]))  # fmt: skip
            assert [p.error_code for t in committed.topics for p in t.partitions] == [69]
    finally:
        c.close()
    with Wire(bootstrap, timeout=30) as wire:

        def empty() -> None:
            listed = wire.call(ApiKey.ListGroups, 5, states_filter=[], types_filter=["share"]).groups
            assert [g.group_state for g in listed if g.group_id == group] == ["Empty"]

        eventually(empty, timeout=30)
        assert [r.error_code for r in wire.call(ApiKey.DeleteGroups, 2, groups_names=[group]).results] == [0]
        listed = wire.call(ApiKey.ListGroups, 5, states_filter=[], types_filter=["share"]).groups
        assert group not in [g.group_id for g in listed]


def test_start_offsets_are_described_reset_and_deleted(bootstrap: str) -> None:
    """Describe/Alter/DeleteShareGroupOffsets (`kafka-share-groups --describe --offsets / --reset-offsets /
    --delete-offsets`): the lag left after some records were accepted, a reset refused while the group
    has members and applied once it is empty, then the state deleted."""
    from logbroker.protocol import ApiKey, api
    from support import Wire

    D = api(ApiKey.DescribeShareGroupOffsets).request
    A = api(ApiKey.AlterShareGroupOffsets).request
    X = api(ApiKey.DeleteShareGroupOffsets).request
    topic = create_topic(bootstrap, unique("sh-offsets"))
    group = unique("sg")
    assert set_group_configs(bootstrap, group, share_auto_offset_reset="earliest") == [(0, None)]
    produce(bootstrap, topic, [b"o%d" % i for i in range(10)])

    def describe(wire: Wire) -> list[tuple[int, int]]:  # (partition, lag) of the group's topic
        resp = wire.call(ApiKey.DescribeShareGroupOffsets, 1, D(groups=[D.DescribeShareGroupOffsetsRequestGroup(
            group_id=group, topics=None)]))  # fmt: skip
        [g] = resp.groups
        assert g.error_code == 0, g
        return [(p.partition_index, p.lag) for t in g.topics if t.topic_name == topic for p in t.partitions]

    def alter(wire: Wire, offset: int) -> Any:
        part = A.AlterShareGroupOffsetsRequestTopic.AlterShareGroupOffsetsRequestPartition(
            partition_index=0, start_offset=offset)  # fmt: skip
        return wire.call(ApiKey.AlterShareGroupOffsets, 0, A(group_id=group, topics=[
            A.AlterShareGroupOffsetsRequestTopic(topic_name=topic, partitions=[part])]))  # fmt: skip

    c = consumer(bootstrap, group, topic, explicit=True)
    try:
        accepted: list[bytes] = []

        def ack(_c: Any, m: Any) -> Any:
            if len(accepted) < 4:
                accepted.append(m.value())
                return AcknowledgeType.ACCEPT
            return AcknowledgeType.RELEASE

        drain([c], 10, ack=ack, timeout=30)
        with Wire(bootstrap, timeout=30) as wire:
            assert describe(wire) == [(0, 6)]
            refused = alter(wire, 0)
            assert (refused.error_code, refused.error_message) == (68, "The group is not empty.")
    finally:
        c.close()
    with Wire(bootstrap, timeout=30) as wire:

        def reset() -> None:  # the group empties once the member's leave is through
            done = alter(wire, 2)
            assert done.error_code == 0, done
            assert [(p.partition_index, p.error_code) for t in done.responses for p in t.partitions] == [(0, 0)]

        eventually(reset, timeout=30)
        assert describe(wire) == [(0, 8)]
        deleted = wire.call(ApiKey.DeleteShareGroupOffsets, 0, X(group_id=group, topics=[
            X.DeleteShareGroupOffsetsRequestTopic(topic_name=topic)]))  # fmt: skip
        assert (deleted.error_code, [(t.topic_name, t.error_code) for t in deleted.responses]) == (0, [(topic, 0)])
        assert describe(wire) == []
        missing = wire.call(ApiKey.DeleteShareGroupOffsets, 0, X(group_id=unique("nosuch"), topics=[]))
        assert missing.error_code == 69


def test_kafka_share_groups_lists_describes_resets_and_deletes(bootstrap: str) -> None:
    """Kafka's own operator tool, `kafka-share-groups` (4.3), against the group."""
    from support import kafka_tool

    topic = create_topic(bootstrap, unique("sh-tool"))
    group = unique("sg")
    assert set_group_configs(bootstrap, group, share_auto_offset_reset="earliest") == [(0, None)]
    produce(bootstrap, topic, [b"t%d" % i for i in range(10)])
    c = consumer(bootstrap, group, topic, explicit=True)

    def rows(*args: str) -> list[list[str]]:
        out = kafka_tool("kafka-share-groups", bootstrap, *args)
        assert out.returncode == 0, out.output
        return [ln.split() for ln in out.stdout.splitlines() if ln.startswith(group)]

    try:
        drain([c], 10, ack=lambda _c, m: AcknowledgeType.ACCEPT if int(m.value()[1:]) < 4 else AcknowledgeType.RELEASE,
              timeout=30)  # fmt: skip
        listed = kafka_tool("kafka-share-groups", bootstrap, "--list").stdout.splitlines()
        assert group in [ln.strip() for ln in listed]
        [offsets] = rows("--describe", "--group", group)
        assert (offsets[1], offsets[2], offsets[-1]) == (topic, "0", "6")  # topic, partition, lag
        [member] = rows("--describe", "--group", group, "--members")
        assert member[-1] == f"{topic}:0"
        [state] = rows("--describe", "--group", group, "--state")
        assert state[-2:] == ["Stable", "1"]
    finally:
        c.close()

    def reset() -> None:
        assert rows("--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute") == [
            [group, topic, "0", "0"]]  # fmt: skip

    eventually(reset, timeout=30)
    out = kafka_tool("kafka-share-groups", bootstrap, "--delete", "--group", group)
    assert out.returncode == 0 and "was successful" in out.stdout, out.output


def test_two_members_split_a_four_partition_topic(bootstrap: str) -> None:
    """Kafka's simple assignor spreads partitions over the members: two librdkafka share consumers of one
    group on four partitions both get records (Kafka 4.4 split 400 as 199/201)."""
    topic = create_topic(bootstrap, unique("sh-four"), partitions=4)
    group = unique("sg")
    members = [consumer(bootstrap, group, topic) for _ in range(2)]
    try:
        deadline = time.monotonic() + 60
        p = Producer({"bootstrap.servers": bootstrap})
        started: set[int] = set()
        while len(started) < 4 and time.monotonic() < deadline:  # every share-partition started
            for part in range(4):
                if part not in started:
                    p.produce(topic, WARM, partition=part)
            p.flush(10)
            for c in members:
                started |= {m.partition() for m in c.poll(0.3) or [] if m.error() is None}
        assert len(started) == 4, f"share-partitions started: {sorted(started)}"
        # Each member must hold its own partitions before the records come: a member learns its new assignment
        # at its next heartbeat, and until then reads all it had (described assignments are what was sent).
        disjoint = False
        while not disjoint and time.monotonic() < deadline:
            for c in members:
                c.poll(0.2)
            disjoint = _assignments_disjoint(bootstrap, group, 2)
        assert disjoint, "the members never held partitions of their own"
        time.sleep(1.5)  # share fetches sent before the new assignment end within their wait
        values = [b"r%d" % i for i in range(400)]
        for i, v in enumerate(values):
            p.produce(topic, v, key=b"k%d" % i)
        assert p.flush(30) == 0
        got = drain(members, 400)
        counts = [len(ms) for ms in got.values()]
        assert sum(counts) == 400 and sorted(m.value() for ms in got.values() for m in ms) == sorted(values)
        assert min(counts) > 0, f"one member got every record: {counts}"
    finally:
        for c in members:
            c.close()


def _assignments_disjoint(bootstrap: str, group: str, members: int) -> bool:
    """ShareGroupDescribe shows `members` members, each with partitions, none shared."""
    from logbroker.protocol import ApiKey, api
    from support import Wire

    D = api(ApiKey.ShareGroupDescribe).request
    with Wire(bootstrap, timeout=30) as wire:
        [g] = wire.call(ApiKey.ShareGroupDescribe, 1, D(group_ids=[group], include_authorized_operations=False)).groups
    held = [(t.topic_id, p) for m in g.members for t in m.assignment.topic_partitions for p in t.partitions]
    each = [bool(m.assignment.topic_partitions) for m in g.members]
    return len(each) == members and all(each) and len(held) == len(set(held))


def test_acknowledgements_sent_after_leaving_the_group_are_taken(bootstrap: str) -> None:
    """A closing share consumer may leave the group (heartbeat epoch -1) before its last ShareAcknowledge
    (session epoch -1) arrives: the share session outlives the membership, so those acknowledgements are
    taken and the records do not come back to the next member."""
    import uuid as _uuid

    from logbroker.protocol import ApiKey, api
    from logbroker_devtools.client.connection import Connection, parse_bootstrap

    HB, SF, SA = (api(k).request for k in (ApiKey.ShareGroupHeartbeat, ApiKey.ShareFetch, ApiKey.ShareAcknowledge))
    topic = create_topic(bootstrap, unique("sh-leave"))
    group = unique("sg")
    assert set_group_configs(bootstrap, group, share_auto_offset_reset="earliest") == [(0, None)]
    produce(bootstrap, topic, [b"l%d" % i for i in range(5)])

    def member(c: Connection) -> tuple[str, Any]:
        """Join and heartbeat until partition 0 of the topic is assigned: (member id, topic id)."""
        mid = str(_uuid.uuid4())
        epoch, deadline = 0, time.monotonic() + 30
        while time.monotonic() < deadline:
            r = c.do(HB(group_id=group, member_id=mid, member_epoch=epoch, rack_id=None,
                        subscribed_topic_names=[topic] if epoch == 0 else None), 1)  # fmt: skip
            assert r.error_code == 0, r
            epoch = r.member_epoch
            if r.assignment is not None and r.assignment.topic_partitions:
                return mid, r.assignment.topic_partitions[0].topic_id
            time.sleep(0.2)
        raise AssertionError("no assignment within 30 s")

    def fetch(c: Connection, mid: str, tid: Any, epoch: int) -> list[int]:
        part = SF.FetchTopic.FetchPartition(partition_index=0, acknowledgement_batches=[])
        r = c.do(SF(group_id=group, member_id=mid, share_session_epoch=epoch, max_wait_ms=500, min_bytes=1,
                    max_bytes=1 << 20, max_records=100, batch_size=100,
                    topics=[SF.FetchTopic(topic_id=tid, partitions=[part])], forgotten_topics_data=[]), 1)  # fmt: skip
        assert r.error_code == 0, r
        offsets = []
        for t in r.responses:
            for p in t.partitions:
                for a in p.acquired_records:
                    offsets += range(a.first_offset, a.last_offset + 1)
        return offsets

    with Connection(*parse_bootstrap(bootstrap)) as c:
        mid, tid = member(c)
        got: list[int] = []
        epoch = 0
        deadline = time.monotonic() + 30
        while len(got) < 5 and time.monotonic() < deadline:
            got += fetch(c, mid, tid, epoch)
            epoch += 1
        assert got == [0, 1, 2, 3, 4]
        left = c.do(HB(group_id=group, member_id=mid, member_epoch=-1, rack_id=None, subscribed_topic_names=None), 1)
        assert left.error_code == 0
        ack = SA.AcknowledgeTopic.AcknowledgePartition(partition_index=0, acknowledgement_batches=[
            SA.AcknowledgeTopic.AcknowledgePartition.AcknowledgementBatch(first_offset=0, last_offset=4,
                                                                          acknowledge_types=[1])])  # fmt: skip
        r = c.do(SA(group_id=group, member_id=mid, share_session_epoch=-1,
                    topics=[SA.AcknowledgeTopic(topic_id=tid, partitions=[ack])]), 1)  # fmt: skip
        assert (r.error_code, [(p.partition_index, p.error_code) for t in r.responses for p in t.partitions]) == (
            0, [(0, 0)])  # fmt: skip
    produce(bootstrap, topic, [b"after"])
    with Connection(*parse_bootstrap(bootstrap)) as c:
        mid, tid = member(c)
        seen: list[int] = []
        epoch = 0
        deadline = time.monotonic() + 30
        while 5 not in seen and time.monotonic() < deadline:
            seen += fetch(c, mid, tid, epoch)
            epoch += 1
        assert seen == [5], "accepted records came back"


def test_offsets_set_for_a_share_group_before_any_member(bootstrap: str) -> None:
    """AlterShareGroupOffsets for a group no member has joined yet (kadm and `kafka-share-groups
    --reset-offsets` before the first consumer): Kafka makes the group's state, so the first member starts
    there, the offsets are described and the group can be deleted."""
    from logbroker.protocol import ApiKey, api
    from support import Wire

    A = api(ApiKey.AlterShareGroupOffsets).request
    D = api(ApiKey.DescribeShareGroupOffsets).request
    topic = create_topic(bootstrap, unique("sh-pre"))
    group = unique("sg")
    produce(bootstrap, topic, [b"p%d" % i for i in range(10)])
    part = A.AlterShareGroupOffsetsRequestTopic.AlterShareGroupOffsetsRequestPartition(partition_index=0,
                                                                                       start_offset=7)  # fmt: skip
    with Wire(bootstrap, timeout=30) as wire:
        deadline = time.monotonic() + 30
        while True:  # Kafka's share coordinator loads its state topic first (COORDINATOR_LOAD_IN_PROGRESS)
            r = wire.call(ApiKey.AlterShareGroupOffsets, 0, A(group_id=group, topics=[
                A.AlterShareGroupOffsetsRequestTopic(topic_name=topic, partitions=[part])]))  # fmt: skip
            if r.error_code != 14 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert (r.error_code, [(p.partition_index, p.error_code) for t in r.responses for p in t.partitions]) == (
            0, [(0, 0)]), r  # fmt: skip
        resp = wire.call(ApiKey.DescribeShareGroupOffsets, 1, D(groups=[D.DescribeShareGroupOffsetsRequestGroup(
            group_id=group, topics=None)]))  # fmt: skip
        [g] = resp.groups
        assert [(t.topic_name, [(p.partition_index, p.start_offset, p.lag) for p in t.partitions])
                for t in g.topics] == [(topic, [(0, 7, 3)])]  # fmt: skip
    c = consumer(bootstrap, group, topic)
    try:
        got = drain([c], 3, timeout=30)
        assert sorted(m.offset() for m in got[0]) == [7, 8, 9]
    finally:
        c.close()
    DG = api(ApiKey.DeleteGroups).request
    with Wire(bootstrap, timeout=30) as wire:

        def deleted() -> None:  # the group empties once the member's leave is through
            r = wire.call(ApiKey.DeleteGroups, 2, DG(groups_names=[group]))
            assert [(x.group_id, x.error_code) for x in r.results] == [(group, 0)]

        eventually(deleted, timeout=30)


def test_franz_go_share_consumers_split_the_records_and_kadm_sets_and_deletes_offsets(bootstrap: str) -> None:
    """franz-go as a Go user runs it: two kgo share consumers of one group on four partitions, both assigned
    before 400 records are produced, both get records, each exactly once, and no acknowledgement (the last ones
    are sent while closing) comes back an error; kadm sets a start offset for a group no member has joined,
    describes it and deletes it."""
    from logbroker_devtools.testing.franz import ToolMissing, franz_share
    from support import missing_tool

    topic = create_topic(bootstrap, unique("sh-franz"), partitions=4)
    group = unique("sg")
    try:
        report = franz_share("consume", bootstrap, group, topic, "-members", "2", "-n", "400")
    except ToolMissing as exc:
        missing_tool(str(exc))
    assert report["distinct"] == 400 and report["repeated"] == 0, report
    assert min(report["counts"]) > 0, f"one member got every record: {report}"
    assert report["ack_errors"] == [], report["ack_errors"]

    admin_group, admin_topic = unique("sg"), create_topic(bootstrap, unique("sh-kadm"))
    produce(bootstrap, admin_topic, [b"k%d" % i for i in range(10)])
    got = franz_share("admin", bootstrap, admin_group, admin_topic, "-start", "7")
    assert got == {"alter": "", "start_offset": 7, "lag": 3, "state": "Empty", "delete": "",
                   "partitions_after_delete": 0}, got  # fmt: skip
