"""Old clients for tests of the protocol before Kafka 0.11: sarama speaking as a 0.9 or 0.10.2 client
(`sarama/main.go`, built once per source with the Go toolchain, like the load generator)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from logbroker_devtools.bench.native import ToolMissing, go_binary

__all__ = ["ToolMissing", "kafkago_commits", "sarama_round_trip"]

SARAMA_SRC = Path(__file__).with_name("sarama")
KAFKAGO_SRC = Path(__file__).with_name("kafkago")


def sarama_round_trip(bootstrap: str, version: str, topic: str, group: str, n: int = 1000,
                      compression: str = "none", timeout: float = 90.0) -> dict[str, Any]:  # fmt: skip
    """sarama with ``Version`` = ``version`` produces ``n`` keyed messages to partition 0's topic, reads
    them from the oldest offset (in a consumer group from 0.10.2 on; before that, the partition and an
    offset manager, as sarama allows), commits, and reads the commit back: its JSON report. Raises
    AssertionError with sarama's own error when a step fails."""
    binary = go_binary(SARAMA_SRC, "lbsarama", "the sarama test client")
    proc = subprocess.run(
        [str(binary), "-brokers", bootstrap, "-version", version, "-topic", topic, "-group", group, "-n", str(n),
         "-compression", compression, "-timeout", f"{int(timeout)}s"],
        capture_output=True, text=True, timeout=timeout + 60, check=False,
    )  # fmt: skip
    lines = proc.stdout.strip().splitlines()
    report: dict[str, Any] = json.loads(lines[-1]) if lines else {"error": proc.stderr[-2000:]}
    if proc.returncode != 0 or report.get("error"):
        raise AssertionError(f"sarama {version}: {report.get('error') or proc.stderr[-2000:]}")
    return report


def kafkago_commits(bootstrap: str, topic: str, group: str, n: int, timeout: float = 300.0) -> dict[str, Any]:
    """kafka-go (`kafkago/main.go`): a Writer produces ``n`` records to the one-partition ``topic``, then a
    Reader in ``group`` fetches them and calls CommitMessages after each, synchronously: its JSON report
    (records, produce_seconds, commit_seconds, committed). AssertionError with kafka-go's error on failure."""
    binary = go_binary(KAFKAGO_SRC, "lbkafkago", "the kafka-go client")
    proc = subprocess.run([str(binary), "-brokers", bootstrap, "-topic", topic, "-group", group, "-n", str(n),
                           "-timeout", f"{int(timeout)}s"], capture_output=True, text=True, timeout=timeout + 60,
                          check=False)  # fmt: skip
    lines = proc.stdout.strip().splitlines()
    report: dict[str, Any] = json.loads(lines[-1]) if lines else {"error": proc.stderr[-2000:]}
    if proc.returncode != 0 or report.get("error"):
        raise AssertionError(f"kafka-go: {report.get('error') or proc.stderr[-2000:]}")
    return report
