#!/usr/bin/env python3
"""Throughput over PLAINTEXT, SSL and SASL_SSL (SCRAM-SHA-256), logbroker against Apache Kafka set up alike.

See ``logbroker_devtools.bench.security``. Example: ``python benchmarks/security_bench.py --records 100000``.
Not part of CI.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

try:
    from logbroker_devtools.bench.security import run_security_bench
except ImportError:  # not installed: the source tree next to this script
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from logbroker_devtools.bench.security import run_security_bench


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000, help="records per protocol (default %(default)s)")
    ap.add_argument("--size", type=int, default=1024, help="record size in bytes (default %(default)s)")
    ap.add_argument("--targets", default="logbroker,kafka", help="comma list of %(default)s")
    ap.add_argument("--fsync", default="never", help="logbroker --fsync (default %(default)s: as Kafka, page cache)")
    ap.add_argument("--out", default="bench-results", help="output directory (default %(default)s)")
    args = ap.parse_args(argv)
    targets = tuple(t.strip() for t in args.targets.split(",") if t.strip())
    run_security_bench(args.records, args.size, args.out, args.fsync, targets)
    return 0


if __name__ == "__main__":
    sys.exit(main())
