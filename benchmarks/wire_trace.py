"""Wire tracer: a TCP proxy in front of a broker that records every request/response pair, to see where a
client's wall time goes (broker time vs client idle time) on logbroker and on Apache Kafka alike.

    .venv/bin/python benchmarks/wire_trace.py spark [--records 200000] [--targets logbroker,kafka] [--json out]
    .venv/bin/python benchmarks/wire_trace.py proxy --listen PORT --upstream HOST:PORT --out trace.jsonl
    .venv/bin/python benchmarks/wire_trace.py report trace.jsonl [--since T --until T]

The proxy forwards bytes unchanged (frame by frame) and writes one JSON line per request: connection id,
client id, api key/version, correlation id, request and response bytes, when the request was forwarded
(``fwd``), when the response's first and last bytes came back from the broker (``first``, ``done``), all in
`time.monotonic()` seconds (one clock for every process on the machine). Fetch and ListOffsets requests and
Fetch responses are decoded with logbroker's protocol package (per partition: offset asked, record bytes,
batches and records returned, high watermark). Brokers must advertise the proxy's address so that every
connection a client opens after bootstrap passes through it too.

`spark` runs Spark's archive (as benchmarks/spark_bench.py does: 4 partitions of 1 KiB records, local[2], a
warm-up archive on the first target) with each broker behind its own proxy process, then prints, for the
timed archive only: a summary per API, Fetch sizes, long polls (> 100 ms), ListOffsets queued behind a
Fetch, and where each data connection's wall time went.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from logbroker.protocol import ApiSpec, api
from logbroker.protocol.messages import decode_body, decode_response, is_flexible, parse_request_header
from logbroker.protocol.primitives import skip_tagged_fields
from logbroker.protocol.records import iter_headers

FETCH, LIST_OFFSETS = 1, 2
API_NAMES: dict[int, str] = {}
_I32 = struct.Struct(">i")
_HDR = struct.Struct(">hhi")
LONG_POLL = 0.1  # seconds: a Fetch answered later than this waited for data (or for max_wait_ms)


def api_name(key: int) -> str:
    if key not in API_NAMES:
        try:
            API_NAMES[key] = api(key).name
        except LookupError:
            API_NAMES[key] = f"api{key}"
    return API_NAMES[key]


def _spec(key: int) -> ApiSpec:
    a = api(key)
    return ApiSpec(a, 0, a.codec_max_version)


# ------------------------------------------------------------------------------------------ decoding


def describe_request(frame: bytes) -> dict[str, Any]:
    """Header fields always; for Fetch and ListOffsets the body's fields a consumer's timing depends on."""
    header, pos = parse_request_header(memoryview(frame))
    out: dict[str, Any] = {"api": header.api_key, "v": header.api_version, "corr": header.correlation_id,
                           "client": header.client_id}  # fmt: skip
    if header.api_key not in (FETCH, LIST_OFFSETS):
        return out
    try:
        spec = _spec(header.api_key)
        mv = memoryview(frame)
        if is_flexible(spec, header.api_version):
            pos = skip_tagged_fields(mv, pos)
        body = decode_body(spec, header.api_version, mv, pos)
    except Exception as exc:  # a tracer reports what it cannot read rather than stop forwarding
        out["decode_error"] = repr(exc)
        return out
    if header.api_key == FETCH:
        out["max_wait"] = body.max_wait_ms
        out["min_bytes"] = body.min_bytes
        out["max_bytes"] = getattr(body, "max_bytes", None)
        out["isolation"] = getattr(body, "isolation_level", None)
        out["session"] = [getattr(body, "session_id", 0), getattr(body, "session_epoch", -1)]
        out["parts"] = [[_topic(t), p.partition, p.fetch_offset, p.partition_max_bytes]
                        for t in body.topics for p in t.partitions]  # fmt: skip
        forgotten = getattr(body, "forgotten_topics_data", None) or []
        if forgotten:
            out["forgotten"] = sum(len(t.partitions) for t in forgotten)
    else:
        out["isolation"] = getattr(body, "isolation_level", None)
        out["parts"] = [[t.name, p.partition_index, p.timestamp] for t in body.topics for p in t.partitions]
    return out


def _topic(t: Any) -> str:
    name = getattr(t, "topic", None)
    if name:
        return str(name)
    tid = getattr(t, "topic_id", None)
    return f"id:{str(tid)[:8]}" if tid is not None else "?"


def describe_fetch_response(frame: bytes, version: int) -> dict[str, Any]:
    """Per partition: error, high watermark, record bytes, batches and records returned."""
    try:
        _, resp = decode_response(_spec(FETCH), version, frame)
    except Exception as exc:
        return {"decode_error": repr(exc)}
    parts = []
    for t in resp.responses:
        for p in t.partitions:
            records = p.records or b""
            batches = count = 0
            last = -1
            for h in iter_headers(records):
                batches += 1
                count += h.records_count
                last = h.last_offset
            parts.append([_topic(t), p.partition_index, p.error_code, p.high_watermark, len(records), batches,
                          count, last])  # fmt: skip
    return {"error": resp.error_code, "session_id": getattr(resp, "session_id", 0), "rparts": parts}


def describe_list_offsets_response(frame: bytes, version: int) -> dict[str, Any]:
    try:
        _, resp = decode_response(_spec(LIST_OFFSETS), version, frame)
    except Exception as exc:
        return {"decode_error": repr(exc)}
    return {"rparts": [[t.name, p.partition_index, p.error_code, p.offset] for t in resp.topics for p in t.partitions]}


# --------------------------------------------------------------------------------------------- proxy


class Proxy:
    """Forwards frames both ways unchanged; pairs each response with its request by correlation id."""

    def __init__(self, upstream: tuple[str, int], out: TextIO, decode: bool) -> None:
        self.upstream = upstream
        self.out = out
        self.decode = decode
        self.next_conn = 0

    async def handle(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        conn = self.next_conn
        self.next_conn += 1
        try:
            ureader, uwriter = await asyncio.open_connection(*self.upstream, limit=1 << 26)
        except OSError:
            cwriter.close()
            return
        pending: dict[int, dict[str, Any]] = {}
        opened = time.monotonic()
        self._write({"conn": conn, "event": "open", "t": opened})

        async def requests() -> None:
            while True:
                head = await creader.readexactly(4)
                t_first = time.monotonic()
                frame = await creader.readexactly(_I32.unpack(head)[0])
                t_read = time.monotonic()
                key, version, corr = _HDR.unpack_from(frame, 0)
                pending[corr] = rec = {"api": key, "v": version, "corr": corr}
                uwriter.write(head + frame)
                rec.update(conn=conn, first_req=t_first, read=t_read, fwd=time.monotonic(), req_bytes=4 + len(frame))
                await uwriter.drain()
                rec.update(describe_request(frame))  # after forwarding: decoding costs the client nothing

        async def responses() -> None:
            while True:
                head = await ureader.readexactly(4)
                t_first = time.monotonic()
                frame = await ureader.readexactly(_I32.unpack(head)[0])
                t_done = time.monotonic()
                cwriter.write(head + frame)
                await cwriter.drain()
                t_sent = time.monotonic()
                corr = _I32.unpack_from(frame, 0)[0]
                rec = pending.pop(corr, None)
                if rec is None:
                    continue
                rec.update(first=t_first, done=t_done, sent=t_sent, resp_bytes=4 + len(frame))
                if self.decode and rec["api"] == FETCH:
                    rec.update(describe_fetch_response(frame, rec["v"]))
                elif self.decode and rec["api"] == LIST_OFFSETS:
                    rec.update(describe_list_offsets_response(frame, rec["v"]))
                self._write(rec)

        tasks = [asyncio.ensure_future(requests()), asyncio.ensure_future(responses())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            for w in (cwriter, uwriter):
                w.close()
            self._write({"conn": conn, "event": "close", "t": time.monotonic()})

    def _write(self, rec: dict[str, Any]) -> None:
        self.out.write(json.dumps(rec, separators=(",", ":")) + "\n")


async def serve_proxy(listen: int, upstream: tuple[str, int], out_path: Path, decode: bool) -> None:
    with open(out_path, "a", buffering=1 << 16) as out:
        proxy = Proxy(upstream, out, decode)
        server = await asyncio.start_server(proxy.handle, "127.0.0.1", listen, limit=1 << 26)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        async with server:
            await stop.wait()
        out.flush()


@contextlib.contextmanager
def proxy_process(listen: int, upstream: str, out_path: Path, decode: bool = True) -> Iterator[None]:
    """The proxy in its own process (its own GIL and core time, as a real middlebox would have)."""
    argv = [sys.executable, __file__, "proxy", "--listen", str(listen), "--upstream", upstream, "--out", str(out_path)]
    if not decode:
        argv.append("--no-decode")
    proc = subprocess.Popen(argv, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        deadline = time.monotonic() + 20
        import socket

        while True:
            try:
                socket.create_connection(("127.0.0.1", listen), timeout=0.5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("trace proxy did not start") from None
                time.sleep(0.05)
        yield
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ------------------------------------------------------------------------------------------ analysis


def load(path: Path, since: float | None = None, until: float | None = None) -> list[dict[str, Any]]:
    """The request records forwarded in [since, until] (all when not given)."""
    out = []
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if "event" in rec or "done" not in rec:
                continue
            if since is not None and rec["fwd"] < since:
                continue
            if until is not None and rec["fwd"] > until:
                continue
            out.append(rec)
    out.sort(key=lambda r: r["fwd"])
    return out


def _q(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def annotate(recs: list[dict[str, Any]]) -> None:
    """Per request: broker time (forwarded to last byte back), time queued behind the connection's earlier
    answer, service time after that, and the client's idle gap from this answer to its next request."""
    by_conn: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in recs:
        by_conn[r["conn"]].append(r)
    for rs in by_conn.values():
        prev_done = 0.0
        for i, r in enumerate(rs):
            r["broker"] = r["done"] - r["fwd"]
            r["queued"] = max(0.0, min(prev_done, r["done"]) - r["fwd"])
            r["service"] = r["broker"] - r["queued"]
            prev_done = max(prev_done, r["done"])
            nxt = rs[i + 1] if i + 1 < len(rs) else None
            r["idle_after"] = (nxt["first_req"] - r["done"]) if nxt is not None else None


def summary(recs: list[dict[str, Any]], label: str, t0: float | None = None) -> str:
    annotate(recs)
    lines = [f"== {label}: {len(recs)} requests over {recs[-1]['done'] - recs[0]['fwd']:.2f} s" if recs else
             f"== {label}: no requests"]  # fmt: skip
    if not recs:
        return "\n".join(lines)
    lines.append(f"{'api':<22}{'count':>7}{'total s':>9}{'med ms':>8}{'p90 ms':>8}{'max ms':>8}"
                 f"{'queued s':>9}{'req KB':>9}{'resp MB':>9}")  # fmt: skip
    per: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in recs:
        per[r["api"]].append(r)
    for key, rs in sorted(per.items(), key=lambda kv: -len(kv[1])):
        times = [r["broker"] for r in rs]
        lines.append(f"{api_name(key) + ' v' + str(rs[0]['v']):<22}{len(rs):>7}{sum(times):>9.2f}"
                     f"{statistics.median(times) * 1e3:>8.1f}{_q(times, 0.9) * 1e3:>8.1f}{max(times) * 1e3:>8.1f}"
                     f"{sum(r['queued'] for r in rs):>9.2f}{sum(r['req_bytes'] for r in rs) / 1e3:>9.1f}"
                     f"{sum(r['resp_bytes'] for r in rs) / 1e6:>9.2f}")  # fmt: skip
    fetches = [r for r in recs if r["api"] == FETCH and "rparts" in r]
    if fetches:
        f0 = fetches[0]
        lines.append(f"fetch request: max_wait {f0.get('max_wait')} ms, min_bytes {f0.get('min_bytes')}, max_bytes "
                     f"{f0.get('max_bytes')}, isolation {f0.get('isolation')}, partition_max_bytes "
                     f"{sorted({p[3] for r in fetches for p in r.get('parts', [])})}")  # fmt: skip
        sizes = [sum(p[4] for p in r["rparts"]) for r in fetches]
        nonempty = [s for s in sizes if s]
        counts = [sum(p[6] for p in r["rparts"]) for r in fetches]
        lines.append(f"fetch responses: {len(sizes)}, with records {len(nonempty)}, record bytes median "
                     f"{statistics.median(nonempty or [0]) / 1e3:.0f} KB (min {min(nonempty or [0]) / 1e3:.0f}, max "
                     f"{max(nonempty or [0]) / 1e3:.0f}), records/response median {statistics.median(counts):.0f}, "
                     f"parts/request {statistics.median([len(r.get('parts', [])) for r in fetches]):.0f}")  # fmt: skip
        svc = [r["service"] for r in fetches if sum(p[4] for p in r["rparts"]) and r["broker"] < LONG_POLL]
        if svc:
            lines.append(f"fetch with records, service time: median {statistics.median(svc) * 1e3:.1f} ms, p90 "
                         f"{_q(svc, 0.9) * 1e3:.1f} ms, {sum(svc):.2f} s in all")  # fmt: skip
        longs = [r for r in fetches if r["broker"] > LONG_POLL]
        lines.append(f"long polls (> {LONG_POLL * 1e3:.0f} ms): {len(longs)}, {sum(r['broker'] for r in longs):.2f} s")
        t0 = recs[0]["fwd"]
        for r in longs:
            asked = ", ".join(f"{p[0][-6:]}-{p[1]}@{p[2]}" for p in r.get("parts", []))
            got = ", ".join(f"p{p[1]} hwm {p[3]} {p[4]} B/{p[6]} rec" for p in r["rparts"])
            lines.append(f"  +{r['fwd'] - t0:6.2f}s conn {r['conn']} {r['broker'] * 1e3:6.0f} ms asked [{asked}] "
                         f"got [{got}]")  # fmt: skip
    lo = [r for r in recs if r["api"] == LIST_OFFSETS]
    if lo:
        behind = [r for r in lo if r["queued"] > 0.0002]
        lines.append(f"ListOffsets: {len(lo)}, queued behind an earlier answer: {len(behind)} "
                     f"({sum(r['queued'] for r in lo):.2f} s queued, {sum(r['service'] for r in lo):.2f} s service; "
                     f"service median {statistics.median([r['service'] for r in lo]) * 1e3:.2f} ms)")  # fmt: skip
        kinds: dict[int, int] = defaultdict(int)
        for r in lo:
            for p in r.get("parts", []):
                kinds[p[2]] += 1
        lines.append(f"ListOffsets timestamps asked: {dict(kinds)}")
    lines.append(connections(recs, t0))
    return "\n".join(lines)


def connections(recs: list[dict[str, Any]], t0: float | None = None) -> str:
    """Per connection: when it was first and last used (seconds from `t0`), its span, time with a request at the
    broker, and the client's idle time."""
    by_conn: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in recs:
        by_conn[r["conn"]].append(r)
    t0 = recs[0]["fwd"] if t0 is None else t0
    lines = [
        f"{'conn':>5} {'client':<44}{'reqs':>6}{'from s':>8}{'to s':>8}{'span s':>8}{'busy s':>8}{'idle s':>8}  apis"
    ]
    for conn, rs in sorted(by_conn.items()):
        span = rs[-1]["done"] - rs[0]["fwd"]
        busy, end = 0.0, 0.0
        for r in rs:  # union of [fwd, done] intervals
            start = max(r["fwd"], end)
            if r["done"] > start:
                busy += r["done"] - start
            end = max(end, r["done"])
        counts: dict[str, int] = defaultdict(int)
        for r in rs:
            counts[api_name(r["api"])] += 1
        apis = " ".join(f"{k}:{v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
        lines.append(f"{conn:>5} {str(rs[0].get('client'))[-44:]:<44}{len(rs):>6}{rs[0]['fwd'] - t0:>8.2f}"
                     f"{rs[-1]['done'] - t0:>8.2f}{span:>8.2f}{busy:>8.2f}"
                     f"{span - busy:>8.2f}  {apis}")  # fmt: skip
    return "\n".join(lines)


def timeline(recs: list[dict[str, Any]], conn: int, limit: int = 40) -> str:
    """The first and last requests of one connection, with timings relative to its first request."""
    rs = [r for r in recs if r["conn"] == conn]
    if not rs:
        return ""
    t0 = rs[0]["fwd"]
    shown = rs if len(rs) <= limit else [*rs[: limit // 2], None, *rs[-limit // 2 :]]
    lines = [f"-- timeline of conn {conn} ({rs[0].get('client')})"]
    for r in shown:
        if r is None:
            lines.append("   ...")
            continue
        extra = ""
        if r["api"] == FETCH and "rparts" in r:
            extra = (
                " ".join(f"@{p[2]}" for p in r.get("parts", []))
                + " -> "
                + " ".join(f"{p[4] // 1000}KB/{p[6]}r hwm {p[3]}" for p in r["rparts"])
            )
        elif r["api"] == LIST_OFFSETS:
            extra = (
                " ".join(f"ts {p[2]}" for p in r.get("parts", []))
                + " -> "
                + " ".join(str(p[3]) for p in r.get("rparts", []))
            )
        idle = r.get("idle_after")
        lines.append(f"  +{(r['fwd'] - t0) * 1e3:8.1f} ms {api_name(r['api']):<12} broker {r['broker'] * 1e3:7.1f} "
                     f"(queued {r['queued'] * 1e3:5.1f}) idle after {'-' if idle is None else f'{idle * 1e3:6.1f}'} "
                     f"{extra}")  # fmt: skip
    return "\n".join(lines)


def data_connections(recs: list[dict[str, Any]]) -> list[int]:
    """Connections that carried record-bearing Fetch responses, busiest first."""
    moved: dict[int, int] = defaultdict(int)
    for r in recs:
        if r["api"] == FETCH and "rparts" in r:
            moved[r["conn"]] += sum(p[4] for p in r["rparts"])
    return [c for c, b in sorted(moved.items(), key=lambda kv: -kv[1]) if b]


# --------------------------------------------------------------------------------------------- spark


@contextlib.contextmanager
def traced_broker(name: str, workdir: Path, trace: Path) -> Iterator[str]:
    """A broker in its own process behind a proxy process; the broker advertises the proxy's address."""
    from logbroker_devtools.testing.net import LOOPBACK, free_ports

    broker_port, proxy_port = free_ports(2)
    workdir.mkdir(parents=True, exist_ok=True)
    with proxy_process(proxy_port, f"{LOOPBACK}:{broker_port}", trace):
        if name == "logbroker":
            from logbroker_devtools.testing.process import BrokerProcess

            args = ["--advertised-listener", f"{LOOPBACK}:{proxy_port}"]
            with BrokerProcess(workdir / "logbroker-data", port=broker_port, extra_args=args):
                yield f"{LOOPBACK}:{proxy_port}"
        else:
            from logbroker_devtools.testing.peers import KafkaPeer

            props = {
                "group.initial.rebalance.delay.ms": 0,
                "advertised.listeners": f"PLAINTEXT://{LOOPBACK}:{proxy_port}",
            }
            with KafkaPeer(port=broker_port, server_properties=props, heap="1g"):
                yield f"{LOOPBACK}:{proxy_port}"


def run_spark(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from spark_bench import create_topic, produce, spark_archive

    from logbroker.spark import session

    workdir = Path(tempfile.mkdtemp(prefix="wire-trace-", dir=args.workdir))
    spark = session(master="local[2]", app_name="wire-trace", conf={"spark.driver.memory": "2g"})
    spark.sparkContext.setLogLevel("ERROR")
    windows: dict[str, tuple[float, float, float]] = {}
    traces: dict[str, Path] = {}
    try:
        for i, name in enumerate(args.targets):
            traces[name] = trace = workdir / f"{name}.jsonl"
            with traced_broker(name, workdir / name, trace) as bootstrap:
                if i == 0 or args.warm_each:
                    warm = create_topic(bootstrap, args.partitions)
                    produce(bootstrap, warm, 20_000, args.size)
                    spark_archive(spark, bootstrap, warm, workdir / f"warmup-{name}")
                topic = create_topic(bootstrap, args.partitions)
                produce(bootstrap, topic, args.records, args.size)
                time.sleep(1.0)  # let the producer's connections go quiet
                start = time.monotonic()
                seconds, rows = spark_archive(spark, bootstrap, topic, workdir / f"{name}-archive")
                windows[name] = (start, start + seconds, seconds)
                print(f"{name}: archive of {rows:,} records in {seconds:.2f} s", file=sys.stderr, flush=True)
            shutil.rmtree(workdir / name, ignore_errors=True)  # the broker's data; the trace stays
    finally:
        spark.stop()
    for name, (since, until, seconds) in windows.items():
        recs = load(traces[name], since, until)
        print(summary(recs, f"{name} (archive {seconds:.2f} s; times from its start)", since))
        for conn in data_connections(recs)[: args.timelines]:
            print(timeline(recs, conn, args.timeline_rows))
        print()
    print(f"traces in {workdir}", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps({n: {"window": w, "trace": str(traces[n])} for n, w in windows.items()}))


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("proxy", help="run one proxy until SIGTERM")
    p.add_argument("--listen", type=int, required=True)
    p.add_argument("--upstream", required=True, help="HOST:PORT of the broker")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--no-decode", action="store_true", help="headers only (no Fetch/ListOffsets bodies)")
    r = sub.add_parser("report", help="summarize a trace file")
    r.add_argument("trace", type=Path)
    r.add_argument("--since", type=float)
    r.add_argument("--until", type=float)
    r.add_argument("--timelines", type=int, default=2)
    r.add_argument("--timeline-rows", type=int, default=40)
    s = sub.add_parser("spark", help="trace Spark's archive on each broker")
    s.add_argument("--records", type=int, default=200_000)
    s.add_argument("--size", type=int, default=1024)
    s.add_argument("--partitions", type=int, default=4)
    s.add_argument("--targets", default="logbroker,kafka")
    s.add_argument("--warm-each", action="store_true", help="a warm-up archive on every target, not the first only")
    s.add_argument("--timelines", type=int, default=2, help="data connections whose timeline is printed")
    s.add_argument("--timeline-rows", type=int, default=40)
    s.add_argument("--workdir")
    s.add_argument("--json", type=Path, help="write the archive windows and trace paths here")
    args = ap.parse_args()
    if args.cmd == "proxy":
        host, _, port = args.upstream.rpartition(":")
        asyncio.run(serve_proxy(args.listen, (host, int(port)), args.out, not args.no_decode))
    elif args.cmd == "report":
        recs = load(args.trace, args.since, args.until)
        print(summary(recs, str(args.trace)))
        for conn in data_connections(recs)[: args.timelines]:
            print(timeline(recs, conn, args.timeline_rows))
    else:
        args.targets = [t.strip() for t in args.targets.split(",") if t.strip()]
        run_spark(args)


if __name__ == "__main__":
    main()
