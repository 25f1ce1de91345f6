"""Notifications/s sent and dispatched by logbroker.notify, next to raw confluent-kafka, in one run.

Against a real `logbroker serve` child process (default) or any broker (`--bootstrap`). Three rows:
raw confluent-kafka written by hand (each notification built and JSON-encoded per send, decoded per read: the
x raw baseline), the same without JSON (one value, nothing decoded: the ceiling), notify with oslo's default options
(each send confirmed by the broker, linger 0; then the same unconfirmed, which is how oslo's own
driver sends), and notify with batching (pipelined sends, 5 ms linger, batch listener of 100).
Dispatch rates are measured from the first to the last notification dispatched.

    .venv/bin/python benchmarks/notify_bench.py [--n 50000] [--confirmed-n 2000] [--bootstrap host:port]
"""

from __future__ import annotations

import argparse

from logbroker_devtools.bench.faces.notify import notify, raw
from logbroker_devtools.testing.process import BrokerProcess


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=50000, help="notifications for raw and batching rows")
    ap.add_argument("--confirmed-n", type=int, default=2000, help="notifications for the oslo-defaults row")
    ap.add_argument("--bootstrap", help="use this broker instead of starting `logbroker serve`")
    args = ap.parse_args()
    proc = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        proc = BrokerProcess().start()
        bootstrap = proc.bootstrap
    try:
        raw_s, raw_d = raw(bootstrap, args.n, by_hand=True)
        ceiling = raw(bootstrap, args.n)
        linger0 = raw(bootstrap, args.n, by_hand=True, linger_ms=0, read=False)  # oslo's default linger
        rows = [("raw, by hand", args.n, raw_s, raw_d), ("raw, no JSON", args.n, *ceiling),
                ("raw, by hand, linger 0", args.n, *linger0),
                ("notify, oslo defaults", args.confirmed_n, *notify(bootstrap, args.confirmed_n, False, True)),
                ("  same, unconfirmed", args.n, *notify(bootstrap, args.n, False, False)),
                ("notify, batching", args.n, *notify(bootstrap, args.n, True, False))]  # fmt: skip
    finally:
        if proc is not None:
            proc.stop()
            proc.cleanup()
    print(f"broker: {'logbroker serve (child process)' if proc else bootstrap}")
    print(f"{'row':<24}{'n':>8}{'sent/s':>12}{'x raw':>8}{'dispatched/s':>15}{'x raw':>8}")
    for label, n, s, d in rows:
        print(f"{label:<24}{n:>8}{s:>12,.0f}{s / raw_s:>8.3f}{d:>15,.0f}{d / raw_d:>8.3f}")


if __name__ == "__main__":
    main()
