"""Durability promises on a real broker process: restarts, kill -9 under acks=all load, torn tails."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import confluent_kafka as ck

from logbroker_devtools.testing.process import BrokerProcess
from support import data_end


def consume_all(bootstrap: str, topic: str, partitions: int = 1, idle: float = 3.0) -> list[ck.Message]:
    c = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "durability-check",
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 1,
        }
    )
    c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)])
    out: list[ck.Message] = []
    last = time.monotonic()
    while time.monotonic() - last < idle:
        for m in c.consume(1000, 0.5):
            assert m.error() is None, m.error()
            out.append(m)
            last = time.monotonic()
    c.close()
    return out


def test_restart_keeps_all_data_and_sigterm_exits_zero(fresh_broker: BrokerProcess, topic: str) -> None:
    fresh_broker.start()
    p = ck.Producer({"bootstrap.servers": fresh_broker.bootstrap, "linger.ms": 5})
    for i in range(5000):
        p.produce(topic, key=str(i).encode(), value=f"value-{i}".encode(), headers=[("n", str(i).encode())])
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(30) == 0
    assert fresh_broker.stop() == 0
    assert (fresh_broker.data_dir / ".clean-shutdown").exists()
    fresh_broker.start()
    msgs = consume_all(fresh_broker.bootstrap, topic)
    assert [m.value() for m in msgs] == [f"value-{i}".encode() for i in range(5000)]
    assert [m.offset() for m in msgs] == list(range(5000))
    assert "unclean" not in fresh_broker.log_tail(5)


def test_kill_9_under_acks_all_load_loses_no_acknowledged_record(fresh_broker: BrokerProcess, topic: str) -> None:
    """An idempotent acks=all producer keeps producing while the broker is killed and restarted: every
    acknowledged record is there afterwards, once, in production order."""
    fresh_broker.start()
    acked: list[int] = []
    failed: list[str] = []
    stop = threading.Event()

    def on_delivery(err: ck.KafkaError | None, msg: ck.Message) -> None:
        if err is None:
            acked.append(int(msg.value()))
        else:
            failed.append(str(err))

    p = ck.Producer(
        {
            "bootstrap.servers": fresh_broker.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 2,
            "message.timeout.ms": 60000,
            "reconnect.backoff.ms": 20,
            "reconnect.backoff.max.ms": 200,
        }
    )

    def produce() -> None:
        i = 0
        while not stop.is_set():
            try:
                p.produce(topic, value=str(i).encode(), on_delivery=on_delivery)
                i += 1
            except BufferError:
                p.poll(0.01)
            if i % 100 == 0:
                p.poll(0)
                time.sleep(0.001)
        p.flush(60)

    t = threading.Thread(target=produce)
    t.start()
    try:
        for _ in range(3):
            deadline = time.monotonic() + 20
            start = len(acked)
            while len(acked) < start + 2000 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(acked) >= start + 2000, f"producer stalled:\n{fresh_broker.log_tail()}"
            fresh_broker.kill()
            time.sleep(0.2)
            fresh_broker.start()
        time.sleep(1)
    finally:
        stop.set()
        t.join(90)
    assert not t.is_alive()
    assert not failed, failed[:5]
    values = [int(m.value()) for m in consume_all(fresh_broker.bootstrap, topic)]
    assert len(values) == len(set(values)), "duplicates in the log"
    assert values == sorted(values), "records reordered"
    missing = set(acked) - set(values)
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:5]}"
    assert "recovered after unclean shutdown" in fresh_broker.log_path.read_text()


def test_truncated_and_corrupted_tail_is_repaired_on_start(fresh_broker: BrokerProcess, topic: str) -> None:
    fresh_broker.start()
    p = ck.Producer({"bootstrap.servers": fresh_broker.bootstrap})
    for i in range(100):
        p.produce(topic, value=f"v{i}".encode())
    assert p.flush(30) == 0
    fresh_broker.kill()
    seg = max((fresh_broker.data_dir / f"{topic}-0").glob("*.log"))
    size = data_end(seg)  # the file may run on with space reserved ahead (zeros): the torn batch goes after the data
    with open(seg, "r+b") as f:
        f.seek(size)
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x64\x00\x00\x01\x00" + b"torn" * 20)
    fresh_broker.start()
    assert seg.stat().st_size == size
    assert "truncated" in fresh_broker.log_tail()
    p = ck.Producer({"bootstrap.servers": fresh_broker.bootstrap})
    p.produce(topic, value=b"after-repair")
    assert p.flush(30) == 0
    values = [m.value() for m in consume_all(fresh_broker.bootstrap, topic)]
    assert values == [f"v{i}".encode() for i in range(100)] + [b"after-repair"]


def test_fsync_policies_are_accepted_and_bad_config_is_refused(tmp_path: Path, topic: str) -> None:
    for policy in ("interval", "never"):
        with BrokerProcess(tmp_path / policy, extra_args=["--fsync", policy]) as b:
            p = ck.Producer({"bootstrap.servers": b.bootstrap, "acks": "all"})
            p.produce(topic, value=b"x")
            assert p.flush(30) == 0
    bad = BrokerProcess(tmp_path / "bad", extra_args=["--fsync", "sometimes"])
    try:
        bad.start(timeout=10)
        raise AssertionError("a bad --fsync value must be refused")
    except RuntimeError as exc:
        assert "fsync" in str(exc)
