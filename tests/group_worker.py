"""One consumer-group member in its own process, for tests/test_groups.py (so a crash is a real SIGKILL).

    python tests/group_worker.py --client confluent|kafka-python|aiokafka --bootstrap B --topic T --group G
        [--strategy range|roundrobin|cooperative-sticky[,..]] [--instance-id I]
        [--session-timeout-ms N] [--heartbeat-interval-ms N] [--auto-offset-reset earliest|latest]

It subscribes to T as a member of G and runs until stdin says ``stop`` or closes, then closes the consumer
(which leaves the group, unless it is a static member). Options it is not given keep the client's defaults,
except that auto-commit is off: records are committed synchronously after each processed batch and again
when partitions are revoked. It prints one JSON object per line, the same lines as the Java client's
``ClientTool group-consume`` (tests/java/ClientTool.java), each with an "event" and the wall-clock "t" in ms:

    {"event": "subscribed"}                                   just before subscribe()
    {"event": "assigned" | "revoked" | "lost", "partitions": [P, ..]}   from the rebalance callbacks
                                                              (cooperative protocols: only the change)
    {"event": "generation", "generation": N, "member_id": S}  when it changes (clients that tell it)
    {"event": "record", "partition": P, "offset": O, "value": S}
    {"event": "committed", "offsets": {"P": NEXT_OFFSET}}     after each successful synchronous commit
    {"event": "commit_failed", "error": S}
    {"event": "closed"}                                       after close() returned
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
from typing import Any

CLIENTS = ("confluent", "kafka-python", "aiokafka")


def emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, "t": int(time.time() * 1000), **fields}) + "\n")
    sys.stdout.flush()


def stop_on_stdin(on_stop: Any = None) -> threading.Event:
    """An event set when stdin says "stop" or reaches its end (so an orphaned worker stops too)."""
    stop = threading.Event()

    def watch() -> None:
        try:
            for line in sys.stdin:
                if line.strip() == "stop":
                    break
        finally:
            stop.set()
            if on_stop is not None:
                on_stop()

    threading.Thread(target=watch, name="stdin-stop", daemon=True).start()
    return stop


def text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("utf-8", "replace")


# --------------------------------------------------------------------------------------- confluent-kafka


def run_confluent(a: argparse.Namespace) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    conf: dict[str, Any] = {
        "bootstrap.servers": a.bootstrap,
        "group.id": a.group,
        "enable.auto.commit": False,
        "auto.offset.reset": a.auto_offset_reset,
    }
    if a.instance_id:
        conf["group.instance.id"] = a.instance_id
    if a.group_protocol == "consumer":
        # KIP-848: assignment and timeouts are the broker's; only the server assignor may be chosen.
        conf["group.protocol"] = "consumer"
        if a.strategy:
            conf["group.remote.assignor"] = a.strategy
    else:
        if a.strategy:
            conf["partition.assignment.strategy"] = a.strategy
        if a.session_timeout_ms:
            conf["session.timeout.ms"] = a.session_timeout_ms
        if a.heartbeat_interval_ms:
            conf["heartbeat.interval.ms"] = a.heartbeat_interval_ms
    consumer = Consumer(conf)
    pending: dict[int, int] = {}

    def commit() -> None:
        if not pending:
            return
        offsets = dict(pending)
        try:
            consumer.commit(offsets=[TopicPartition(a.topic, p, o) for p, o in offsets.items()], asynchronous=False)
        except KafkaException as exc:
            emit("commit_failed", error=str(exc))
            return
        for p, o in offsets.items():
            if pending.get(p) == o:
                del pending[p]
        emit("committed", offsets={str(p): o for p, o in sorted(offsets.items())})

    def on_assign(_c: Any, parts: list[Any]) -> None:
        emit("assigned", partitions=sorted(tp.partition for tp in parts))

    def on_revoke(_c: Any, parts: list[Any]) -> None:
        commit()
        for tp in parts:
            pending.pop(tp.partition, None)
        emit("revoked", partitions=sorted(tp.partition for tp in parts))

    def on_lost(_c: Any, parts: list[Any]) -> None:
        for tp in parts:
            pending.pop(tp.partition, None)
        emit("lost", partitions=sorted(tp.partition for tp in parts))

    stop = stop_on_stdin()
    emit("subscribed")
    consumer.subscribe([a.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    while not stop.is_set():
        msgs = consumer.consume(num_messages=500, timeout=0.2)
        for m in msgs:
            if m.error() is not None:
                emit("error", error=str(m.error()))
                continue
            emit("record", partition=m.partition(), offset=m.offset(), value=text(m.value()))
            pending[m.partition()] = m.offset() + 1
        commit()
    commit()
    consumer.close()
    emit("closed")


# ------------------------------------------------------------------------------------------ kafka-python


def run_kafka_python(a: argparse.Namespace) -> None:
    from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition
    from kafka.consumer.subscription_state import ConsumerRebalanceListener
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
    from kafka.errors import KafkaError

    assignors = {
        "range": RangePartitionAssignor,
        "roundrobin": RoundRobinPartitionAssignor,
        "sticky": StickyPartitionAssignor,
        "cooperative-sticky": CooperativeStickyAssignor,
    }
    conf: dict[str, Any] = {
        "bootstrap_servers": a.bootstrap,
        "group_id": a.group,
        "enable_auto_commit": False,
        "auto_offset_reset": a.auto_offset_reset,
    }
    if a.strategy:
        conf["partition_assignment_strategy"] = [assignors[s.strip()] for s in a.strategy.split(",")]
    if a.instance_id:
        conf["group_instance_id"] = a.instance_id
    if a.session_timeout_ms:
        conf["session_timeout_ms"] = a.session_timeout_ms
    if a.heartbeat_interval_ms:
        conf["heartbeat_interval_ms"] = a.heartbeat_interval_ms
    consumer = KafkaConsumer(**conf)
    pending: dict[int, int] = {}

    def commit() -> None:
        if not pending:
            return
        offsets = dict(pending)
        try:
            consumer.commit({TopicPartition(a.topic, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()})
        except KafkaError as exc:
            emit("commit_failed", error=repr(exc))
            return
        for p, o in offsets.items():
            if pending.get(p) == o:
                del pending[p]
        emit("committed", offsets={str(p): o for p, o in sorted(offsets.items())})

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: Any) -> None:
            commit()
            for tp in revoked:
                pending.pop(tp.partition, None)
            emit("revoked", partitions=sorted(tp.partition for tp in revoked))

        def on_partitions_assigned(self, assigned: Any) -> None:
            emit("assigned", partitions=sorted(tp.partition for tp in assigned))

        def on_partitions_lost(self, lost: Any) -> None:
            for tp in lost:
                pending.pop(tp.partition, None)
            emit("lost", partitions=sorted(tp.partition for tp in lost))

    stop = stop_on_stdin()
    emit("subscribed")
    consumer.subscribe([a.topic], listener=Listener())
    generation = None
    while not stop.is_set():
        batches = consumer.poll(timeout_ms=200)
        gen = consumer._coordinator._generation  # not public API; only for the test's report
        if gen is not None and gen.generation_id != generation:
            generation = gen.generation_id
            emit("generation", generation=generation, member_id=gen.member_id)
        for tp, records in sorted(batches.items()):
            for r in records:
                emit("record", partition=tp.partition, offset=r.offset, value=text(r.value))
                pending[tp.partition] = r.offset + 1
        commit()
    commit()
    consumer.close()
    emit("closed")


# -------------------------------------------------------------------------------------------- aiokafka


async def run_aiokafka_async(a: argparse.Namespace) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
    from aiokafka.errors import KafkaError
    from aiokafka.structs import OffsetAndMetadata

    assignors = {
        "range": RangePartitionAssignor,
        "roundrobin": RoundRobinPartitionAssignor,
        "sticky": StickyPartitionAssignor,
    }
    conf: dict[str, Any] = {
        "bootstrap_servers": a.bootstrap,
        "group_id": a.group,
        "enable_auto_commit": False,
        "auto_offset_reset": a.auto_offset_reset,
    }
    if a.strategy:
        conf["partition_assignment_strategy"] = tuple(assignors[s.strip()] for s in a.strategy.split(","))
    if a.instance_id:
        conf["group_instance_id"] = a.instance_id
    if a.session_timeout_ms:
        conf["session_timeout_ms"] = a.session_timeout_ms
    if a.heartbeat_interval_ms:
        conf["heartbeat_interval_ms"] = a.heartbeat_interval_ms
    consumer = AIOKafkaConsumer(**conf)
    pending: dict[int, int] = {}

    async def commit() -> None:
        if not pending:
            return
        offsets = dict(pending)
        try:
            await consumer.commit({TopicPartition(a.topic, p): OffsetAndMetadata(o, "") for p, o in offsets.items()})
        except KafkaError as exc:
            emit("commit_failed", error=repr(exc))
            return
        for p, o in offsets.items():
            if pending.get(p) == o:
                del pending[p]
        emit("committed", offsets={str(p): o for p, o in sorted(offsets.items())})

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        async def on_partitions_revoked(self, revoked: Any) -> None:
            await commit()
            for tp in revoked:
                pending.pop(tp.partition, None)
            emit("revoked", partitions=sorted(tp.partition for tp in revoked))

        async def on_partitions_assigned(self, assigned: Any) -> None:
            emit("assigned", partitions=sorted(tp.partition for tp in assigned))

    loop = asyncio.get_running_loop()
    stopped = asyncio.Event()
    stop_on_stdin(lambda: loop.call_soon_threadsafe(stopped.set))
    await consumer.start()
    emit("subscribed")
    consumer.subscribe([a.topic], listener=Listener())
    generation = None
    try:
        while not stopped.is_set():
            batches = await consumer.getmany(timeout_ms=200)
            coord = consumer._coordinator  # not public API; only for the test's report
            if coord is not None and coord.generation != generation and coord.generation > 0:
                generation = coord.generation
                emit("generation", generation=generation, member_id=coord.member_id)
            for tp, records in sorted(batches.items()):
                for r in records:
                    emit("record", partition=tp.partition, offset=r.offset, value=text(r.value))
                    pending[tp.partition] = r.offset + 1
            await commit()
        await commit()
    finally:
        await consumer.stop()
    emit("closed")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--client", choices=CLIENTS, required=True)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--strategy")
    ap.add_argument("--instance-id")
    ap.add_argument("--session-timeout-ms", type=int)
    ap.add_argument("--heartbeat-interval-ms", type=int)
    ap.add_argument("--auto-offset-reset", default="earliest")
    ap.add_argument("--group-protocol", choices=["classic", "consumer"], default="classic")
    a = ap.parse_args()
    if a.client == "confluent":
        run_confluent(a)
    elif a.client == "kafka-python":
        run_kafka_python(a)
    else:
        asyncio.run(run_aiokafka_async(a))


if __name__ == "__main__":
    main()
