"""Side-by-side produce/consume throughput, acks=all latency, consumer-group and transactions benchmark.

Every target (logbroker itself and the reference peers Tansu and Apache Kafka) is driven by the
same confluent-kafka (librdkafka) client code with the same settings, one target after another,
so the numbers differ only by broker. Targets never overlap because the machines we run on have
two shared cores: a broker still running in the background would steal CPU from the next one.

``--bootstrap HOST:PORT`` adds a cluster that is already running (``cluster``), reached with the security
options of the client commands (``--command-config`` or flags: TLS, SASL PLAIN/SCRAM).

Workloads (``--workloads``, all by default):

* ``throughput``: produce then consume N records of 100 B and of 1 KB on a fresh 1-partition topic;
* ``latency``: sequential acks=all single-record produces (p50/p99);
* ``groups``: consumer-group coordination as a librdkafka consumer sees it, on fresh topics with a
  fresh group per sample (the median of the samples is reported):

  - *first assignment*: a lone consumer with default settings, already connected and holding
    the topic's metadata, from ``subscribe()`` until its first ``on_assign`` callback (after one
    unrecorded warm-up join, as a broker's first group may pay one-off costs). This includes
    the broker's initial rebalance delay (``group.initial.rebalance.delay.ms``: Kafka's default is
    3 s; logbroker's 100 ms; the test peer may lower it: the value in effect is in the target notes);
  - *rebalance 3+1*: three consumers share a 6-partition topic (stable, every partition owned);
    a fourth subscribes. The time runs from its ``subscribe()`` until every one of the four has
    received its new assignment (``on_assign`` of the new generation, partitions split 2/2/1/1).
    The members use ``heartbeat.interval.ms=100`` (else default settings): existing members learn
    of a rebalance from a heartbeat, and the default 3 s interval would add a random 0-3 s wait that
    buries the broker's share of the time.
* ``transactions``: committed transactions per second, each ``begin``, 10 produces of 1 KB and
  ``commit`` on one transactional producer, one after another (2000 of them, 200 with ``--quick``,
  at most 60 s), then a ``read_committed`` consumer reading them back (records/s, MB/s). An aborted
  transaction and a committed one follow the timed ones, untimed: the read-back fails if it sees a
  record of the aborted one or misses a committed one. A broker without transactions is noted
  ("transactions skipped") and its other numbers stand.

Two more workloads run when named, since they need a JVM or Go (``logbroker_devtools.bench.native``): a Python
client saturates long before the broker does, so here native clients make the load and every rate comes
with the broker process tree's CPU seconds per GB and per request (``procstat``):

* ``native``: Kafka's ``ProducerPerformance`` (1 KB, 1 partition, acks=all, ~1 MB batches; 100 B one
  record per request, checked by the producer's ``records-per-request-avg``) and ``ConsumerPerformance``
  (reading the 1 KB records back), and the franz-go generator ``lbload`` (``loadgen/``, built on first
  use): 8 partitions and 1,000 partitions with concurrent producers, and 500 connections;
* ``scale``: start-up, idle memory, then memory, readiness time and produce rate at 100 / 1,000 /
  10,000 partitions and 100 / 1,000 / 5,000 connections (``--quick`` stops at 1,000).

``--rounds N`` runs the targets N times, alternating, and reports the median (best in the JSON).

The library entry point is :func:`run_bench`; ``logbroker bench`` and ``benchmarks/run_bench.py``
are thin wrappers around it. Results land in ``OUT/results.json`` (machine, versions, parameters
and every number) and ``OUT/results.png``; a rich table is printed at the end.

This package is tooling, like ``logbroker_devtools.testing``: no product module imports it; the ``logbroker
bench`` command loads it when it runs. Modules: ``model`` (metrics, targets, parameters), ``clients``
(librdkafka settings, topic creation, readiness), ``workloads`` (the measurements), ``native`` and
``procstat`` (native load generators, the broker's CPU and memory), ``targets``
(logbroker and the peers), ``report`` (machine description, table, chart) and ``driver``
(:func:`run_bench`).
"""

from __future__ import annotations

from logbroker_devtools.bench.clients import create_topic, wait_ready
from logbroker_devtools.bench.driver import run_bench
from logbroker_devtools.bench.model import (
    ALL_TARGETS,
    DEFAULT_WORKLOADS,
    METRICS,
    REBALANCE_HEARTBEAT_MS,
    WORKLOADS,
    BenchError,
    Metric,
    Target,
    parse_targets,
    parse_workloads,
)
from logbroker_devtools.bench.report import _ratios, render_table, write_chart  # noqa: F401 - _ratios: tests rate synthetic results
from logbroker_devtools.bench.targets import cluster_target, kafka_target, logbroker_target, tansu_target
from logbroker_devtools.bench.workloads import percentile

__all__ = [
    "ALL_TARGETS",
    "DEFAULT_WORKLOADS",
    "METRICS",
    "REBALANCE_HEARTBEAT_MS",
    "WORKLOADS",
    "BenchError",
    "Metric",
    "Target",
    "cluster_target",
    "create_topic",
    "kafka_target",
    "logbroker_target",
    "parse_targets",
    "parse_workloads",
    "percentile",
    "render_table",
    "run_bench",
    "tansu_target",
    "wait_ready",
    "write_chart",
]
