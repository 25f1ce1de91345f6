"""ListOffsets' special timestamps, asserted alike on logbroker and Apache Kafka 4 (the reference)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, OffsetSpec

from support import both_targets, create_topic, target_bootstrap, unique

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module", params=both_targets())
def bootstrap(request: pytest.FixtureRequest) -> Iterator[str]:
    """The broker under test (the param id names it); Kafka starts once for the module."""
    yield from target_bootstrap(request)


def _produce_batch(bootstrap: str, topic: str, stamps: list[int]) -> None:
    """One record batch (lingering until flush) whose records carry these CreateTime timestamps."""
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5000, "batch.num.messages": 10_000})
    for i, ts in enumerate(stamps):
        p.produce(topic, value=f"v{i}".encode(), partition=0, timestamp=ts)
    assert p.flush(30) == 0


def _max_timestamp(admin: AdminClient, topic: str) -> tuple[int, int]:
    """Retried while the answer is a retriable error: Kafka answers UNKNOWN_LEADER_EPOCH for a moment after a
    topic is created, until its broker has caught up with the leader epoch the admin client learnt."""
    tp = ck.TopicPartition(topic, 0)
    deadline = time.monotonic() + 30
    while True:
        try:
            info = admin.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(30)
            return info.offset, info.timestamp
        except ck.KafkaException as exc:
            err = exc.args[0]
            transient = err.retriable() or err.code() == ck.KafkaError.UNKNOWN_LEADER_EPOCH
            if not transient or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_max_timestamp_is_the_first_record_carrying_it(bootstrap: str) -> None:
    topic = create_topic(bootstrap, unique("maxts"))
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert _max_timestamp(admin, topic)[0] == -1  # empty partition: no offset
    t = int(time.time() * 1000) - 60_000
    _produce_batch(bootstrap, topic, [t + 1, t + 5, t + 3, t + 5, t + 2])  # offsets 0-4
    # Inside a batch: the first record with the batch's max timestamp, not the batch's last offset.
    assert _max_timestamp(admin, topic) == (1, t + 5)
    _produce_batch(bootstrap, topic, [t + 5, t + 4])  # offsets 5-6: equal, not larger
    assert _max_timestamp(admin, topic) == (1, t + 5)
    _produce_batch(bootstrap, topic, [t + 2, t + 9, t + 9])  # offsets 7-9
    assert _max_timestamp(admin, topic) == (8, t + 9)
