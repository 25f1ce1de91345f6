"""A consume-transform-produce application (confluent-kafka) for test_transactions: reads --input as a member of
--group (read_committed, static membership so a restarted instance takes over at once), writes `out-<value>` to
the same partition of --output and commits its input offsets in the same transaction
(send_offsets_to_transaction). Exits 0 once the group's committed offsets reach the end of every input partition
(several workers may share the group).

It prints one line per step so a test can kill -9 it at a chosen point: `assigned`, `begin N`, `committed N
<records>`, `done`, and with --hang-in-batch N, `hanging` after batch N's first half reached the broker (flushed,
uncommitted); it then sleeps until killed.
"""

from __future__ import annotations

import argparse
import sys
import time

import confluent_kafka as ck


def main() -> int:
    ap = argparse.ArgumentParser()
    for name in ("bootstrap", "input", "output", "group", "transactional-id"):
        ap.add_argument(f"--{name}", required=True)
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--hang-in-batch", type=int, default=0)
    ap.add_argument("--idle-timeout", type=float, default=60.0)
    ap.add_argument("--batch-delay", type=float, default=0.0, help="seconds to sleep after each committed batch")
    ap.add_argument("--session-timeout-ms", type=int, default=10_000)
    ap.add_argument("--transaction-timeout-ms", type=int, default=60_000)
    args = ap.parse_args()

    def say(line: str) -> None:
        print(line, flush=True)

    consumer = ck.Consumer({
        "bootstrap.servers": args.bootstrap, "group.id": args.group, "group.instance.id": args.transactional_id,
        "isolation.level": "read_committed", "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "session.timeout.ms": args.session_timeout_ms, "heartbeat.interval.ms": 500,
    })  # fmt: skip
    producer = ck.Producer({"bootstrap.servers": args.bootstrap, "transactional.id": args.transactional_id,
                            "linger.ms": 5, "transaction.timeout.ms": args.transaction_timeout_ms,
                            "message.timeout.ms": args.transaction_timeout_ms})  # fmt: skip
    producer.init_transactions(60)
    consumer.subscribe([args.input])
    batches = 0
    deadline = time.monotonic() + args.idle_timeout
    announced = False
    while time.monotonic() < deadline:
        msgs = [m for m in consumer.consume(args.batch, 0.5) if m.error() is None]
        assignment = consumer.assignment()
        if assignment and not announced:
            say("assigned")
            announced = True
        if not msgs:
            if _caught_up(consumer, args.input):
                say("done")
                return 0
            continue
        batches += 1
        say(f"begin {batches}")
        producer.begin_transaction()
        for i, m in enumerate(msgs):
            producer.produce(args.output, b"out-" + m.value(), partition=m.partition())
            if batches == args.hang_in_batch and i == len(msgs) // 2:
                assert producer.flush(30) == 0
                say("hanging")
                time.sleep(3600)
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), 30)  # fmt: skip
        producer.commit_transaction(60)
        say(f"committed {batches} {len(msgs)}")
        time.sleep(args.batch_delay)
        deadline = time.monotonic() + args.idle_timeout
    say("idle timeout")
    return 1


def _caught_up(consumer: ck.Consumer, topic: str) -> bool:
    """The group's committed offset of every partition of the input is its end (read_committed: the LSO), so
    with several workers each runs until the whole input is done, taking over a dead one's partitions."""
    partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
    try:
        committed = consumer.committed([ck.TopicPartition(topic, p) for p in partitions], timeout=5)
    except ck.KafkaException:  # e.g. UNSTABLE_OFFSET_COMMIT: another worker's transaction is still open
        return False
    for tp in committed:
        _, high = consumer.get_watermark_offsets(tp, timeout=30, cached=False)
        if tp.offset < high:
            return False
    return True


if __name__ == "__main__":
    sys.exit(main())
