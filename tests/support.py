"""Helpers shared by test modules (fixtures themselves live in conftest.py)."""

from __future__ import annotations

import os

import pytest

# Which broker the target-switchable suites run against: logbroker (default) or Apache Kafka.
TEST_TARGET = os.environ.get("LOGBROKER_TEST_TARGET", "logbroker").strip().lower() or "logbroker"
TEST_TARGETS = ("logbroker", "kafka")


def missing_tool(reason: str) -> None:
    """Skip for a genuinely missing tool; fail under CI, whose runner installs every tool."""
    if os.environ.get("CI", "").lower() == "true" or os.environ.get("LOGBROKER_REQUIRE_PEERS"):
        pytest.fail(f"{reason} (CI must provide it)")
    pytest.skip(reason)
