"""Synchronous offset commits from kafka-go, side by side on logbroker and Apache Kafka, in one run.

    .venv/bin/python benchmarks/kafkago_commits.py [--records 10000] [--rounds 3] [--no-kafka] [--json out.json]

A kafka-go Reader in a consumer group fetches `records` records of one partition and calls CommitMessages after
every one (kafka-go sends each as its own OffsetCommit v2 and waits for the answer): the seconds from the first
record to the last commit, and the commits per second. Each round uses a fresh topic and group; the brokers run
with their default durability (logbroker: fsync=always with offsets_commit_sync=shared, a commit answered once
written and synced within 100 ms; Kafka: no fsync, answered once in the log). The Go client is
`logbroker_devtools/testing/kafkago/main.go`, built once. `--fsync never` measures logbroker without syncs;
LOGBROKER_OFFSETS_COMMIT_SYNC=own in the environment, with each commit's own sync.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from logbroker_devtools.testing.old_clients import kafkago_commits
from logbroker_devtools.testing.process import BrokerProcess

BROKER_ENV: dict[str, str] = {}


def one_round(bootstrap: str, records: int) -> dict[str, Any]:
    topic, group = f"kg-{uuid.uuid4().hex[:8]}", f"kg-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result()
    report = kafkago_commits(bootstrap, topic, group, records, timeout=600)
    report["commits_per_second"] = round(records / report["commit_seconds"])
    return report


@contextlib.contextmanager
def logbroker() -> Iterator[str]:
    with tempfile.TemporaryDirectory() as d:
        env = {**BROKER_ENV, **{k: v for k, v in os.environ.items() if k.startswith("LOGBROKER_OFFSETS_")}}
        proc = BrokerProcess(Path(d) / "data", own_session=True, env=env)
        proc.start()
        try:
            yield proc.bootstrap
        finally:
            proc.stop()


@contextlib.contextmanager
def kafka() -> Iterator[str]:
    from logbroker_devtools.testing import peers

    with peers.KafkaPeer(server_properties={"group.initial.rebalance.delay.ms": 0}) as peer:
        yield peer.bootstrap


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--kafka", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--fsync", choices=["always", "interval", "never"], help="logbroker's policy (default always)")
    args = ap.parse_args()
    if args.fsync:
        BROKER_ENV["LOGBROKER_FSYNC"] = args.fsync
    results: dict[str, list[dict[str, Any]]] = {}
    for name, start in [("logbroker", logbroker)] + ([("kafka", kafka)] if args.kafka else []):
        with start() as bootstrap:
            results[name] = [one_round(bootstrap, args.records) for _ in range(args.rounds)]
    for name, rounds in results.items():
        secs = [r["commit_seconds"] for r in rounds]
        print(
            f"{name:<10} commit loop s: {', '.join(f'{s:.2f}' for s in secs)}  best {min(secs):.2f} "
            f"({args.records / min(secs):,.0f} commits/s)"
        )
    if "kafka" in results:
        best = {name: min(r["commit_seconds"] for r in rounds) for name, rounds in results.items()}
        ratio = best["kafka"] / best["logbroker"]
        print(f"logbroker vs Kafka: {ratio:.2f}x (best rounds; >1 is faster)")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
