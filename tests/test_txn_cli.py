"""`logbroker consume` on topics with transactions, on both brokers: read_committed by default (as kcat,
librdkafka), aborted records only with --isolation read_uncommitted, and `-e` ends at the end even when
the last offsets are markers (a position taken from the last record would stop short of them)."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import confluent_kafka as ck
import pytest

from support import both_targets, create_topic, target_bootstrap

pytestmark = pytest.mark.timeout(120)

CLI = [sys.executable, "-m", "logbroker"]


@pytest.fixture(scope="module", params=both_targets())
def bootstrap(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from target_bootstrap(request)


def _transactions(bootstrap: str, topic: str) -> None:
    p = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": f"cli-{uuid.uuid4().hex[:8]}"})
    p.init_transactions(30)
    for outcome, values in (("commit", [b"c1", b"c2"]), ("abort", [b"a1", b"a2"]), ("commit", [b"c3"])):
        p.begin_transaction()
        for v in values:
            p.produce(topic, value=v, partition=0)
        p.flush(30)
        if outcome == "commit":
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)


def _consume(bootstrap: str, topic: str, *extra: str) -> tuple[list[str], float]:
    start = time.monotonic()
    r = subprocess.run([*CLI, "consume", "-b", bootstrap, "-t", topic, "--from-beginning", "-e",
                        "--idle-timeout", "20", *extra], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return r.stdout.split(), time.monotonic() - start


def test_consume_reads_committed_by_default_and_ends_past_markers(bootstrap: str) -> None:
    topic = create_topic(bootstrap, f"txcli-{uuid.uuid4().hex[:8]}")
    _transactions(bootstrap, topic)
    committed, took = _consume(bootstrap, topic)
    assert committed == ["c1", "c2", "c3"]
    assert took < 15, "-e waited for the idle timeout: the end position stopped short of a marker"
    everything, _ = _consume(bootstrap, topic, "--isolation", "read_uncommitted")
    assert everything == ["c1", "c2", "a1", "a2", "c3"]
