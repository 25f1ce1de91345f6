"""`logbroker demo`: the whole stack on one machine, from notifications to a chart.

It starts the embedded broker in this process, publishes an OpenStack-like notification stream
through `logbroker.notify` (simulated event time, an incident, a few late events), runs the
built-in `archive` and `rollup` Spark pipelines over it, checks what they wrote, and prints a
summary and the paths of the Parquet archive, the rollup and a PNG chart. Everything it starts is
stopped again, also on Ctrl-C or an error.

A run owns a fixed set of paths under OUT (see `OWNED`) and resets only those, so repeated runs
give the same result and nothing else in OUT is touched.

Modules: `generator` (the notification stream), `run` (`run_demo` and its stages), `report` (the
summary read back from the outputs, the chart, the table). The `logbroker demo` command itself is
`logbroker.cli.demo`.
"""

from __future__ import annotations

from logbroker.demo.generator import (
    DEFAULT_MINUTES,
    DEFAULT_NOTIFICATIONS,
    DEFAULT_SEED,
    MAX_LATENESS_S,
    PRIORITY_ORDER,
    TOPIC,
    Event,
    generate,
    incident_window,
)
from logbroker.demo.report import DemoResult, print_summary, write_chart
from logbroker.demo.run import MARKER, OWNED, DemoError, check_prerequisites, reset_outputs, run_demo

__all__ = [
    "DEFAULT_MINUTES",
    "DEFAULT_NOTIFICATIONS",
    "DEFAULT_SEED",
    "MARKER",
    "MAX_LATENESS_S",
    "OWNED",
    "PRIORITY_ORDER",
    "TOPIC",
    "DemoError",
    "DemoResult",
    "Event",
    "check_prerequisites",
    "generate",
    "incident_window",
    "print_summary",
    "reset_outputs",
    "run_demo",
    "write_chart",
]
