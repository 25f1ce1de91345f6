#!/usr/bin/env python3
"""Run the logbroker benchmark from a checkout: a thin argparse wrapper over run_bench().

Same options as ``logbroker bench``; see ``logbroker_devtools.bench.run_bench`` for what is measured.
Example: ``python benchmarks/run_bench.py --targets logbroker,tansu --quick``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

try:
    from logbroker_devtools.bench import ALL_TARGETS, parse_targets, parse_workloads, run_bench
except ImportError:  # not installed: fall back to the source tree next to this script
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from logbroker_devtools.bench import ALL_TARGETS, parse_targets, parse_workloads, run_bench


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", default=",".join(ALL_TARGETS), help="comma list of %(default)s")
    ap.add_argument("--workloads", default="throughput,latency,groups", help="comma list of %(default)s")
    ap.add_argument("--quick", action="store_true", help="about 10x fewer records")
    ap.add_argument("--records-100b", type=int, help="100-byte records to produce/consume")
    ap.add_argument("--records-1kb", type=int, help="1 KB records to produce/consume")
    ap.add_argument("--latency-samples", type=int, help="sequential acks=all produces")
    ap.add_argument("--out", default="bench-results", help="output directory (default %(default)s)")
    ap.add_argument("--fsync", default="always", help="logbroker serve --fsync policy")
    ap.add_argument("--profile", action="store_true", help="run the logbroker server under cProfile")
    ap.add_argument("--kafka-jar-dir", help="Apache Kafka jars (default: .ci/cache/jars/kafka)")
    ap.add_argument("--no-chart", action="store_true", help="skip the PNG")
    args = ap.parse_args(argv)
    try:
        targets = parse_targets(args.targets)
        workloads = parse_workloads(args.workloads)
    except ValueError as exc:
        ap.error(str(exc))
    results = run_bench(
        targets,
        quick=args.quick,
        records_100b=args.records_100b,
        records_1kb=args.records_1kb,
        latency_samples=args.latency_samples,
        out_dir=args.out,
        fsync=args.fsync,
        profile=args.profile,
        kafka_jar_dir=args.kafka_jar_dir,
        chart=not args.no_chart,
        workloads=workloads,
    )
    failed = [n for n, r in results["targets"].items() if r["status"] not in ("ok", "skipped")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
