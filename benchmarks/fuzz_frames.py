#!/usr/bin/env python3
"""The long fuzz run: a million mutated request frames across every API against a `logbroker serve` process.

Frames come from `logbroker_devtools.testing.fuzz` (the generator the property tests in tests/test_fuzz_requests.py
use, with `random.Random` in place of hypothesis): mostly well-formed requests of every served API and
version with 1-3 mutations, plus some well-formed ones and some garbage. Several connections send in
parallel (worker processes, a few threads each), each frame followed by an ApiVersions sentinel, and a
connection the broker closes is reopened. Then everything the fuzzing created (topics, groups) is deleted.

Reported: frames sent, answers, closes, silent drops (no answer, connection kept, not a Produce acks=0),
malformed answers, hangs (no answer and no close within --deadline), crashes (the broker died, logged an
ERROR or a traceback, or did not stop cleanly on SIGTERM), and the broker's RSS at start, while fuzzing,
after fuzzing and after the created state was deleted. Exits 1 on a crash or a hang, 2 when the only
faults are answers out of order (a silent drop, a malformed answer, or a close that came after a later
request was answered), 0 otherwise. Frames behind any of those are saved under --out for replay.

    python benchmarks/fuzz_frames.py                       # 1,000,000 frames
    python benchmarks/fuzz_frames.py --frames 100000 --workers 2 --threads 2
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing as mp
import queue
import re
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from logbroker.broker.handlers import served_apis
from logbroker.protocol import ApiKey, api
from logbroker_devtools.client.connection import BrokerError, KafkaClient
from logbroker_devtools.testing import fuzz
from logbroker_devtools.testing.process import LOOPBACK, BrokerProcess

APIS = served_apis()
KEYS = sorted(APIS)
SERVED = fuzz.served_versions(APIS)
PEER_PORT = re.compile(r"127\.0\.0\.1:(\d+)")
# Bounds that let the cleanup finish: fuzzed joins with long sessions would keep their groups for 30 minutes.
BROKER_ENV = {
    "LOGBROKER_GROUP_MAX_SESSION_TIMEOUT_MS": "10000",
    "LOGBROKER_GROUP_CONSUMER_SESSION_TIMEOUT_MS": "5000",
    "LOGBROKER_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
}


def rss_mb(pid: int) -> float:
    """Resident set size in MiB."""
    return psutil.Process(pid).memory_info().rss / (1 << 20)


def peak_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def error_lines(log_path: Path, start: int = 0) -> list[str]:
    with open(log_path, "rb") as f:
        f.seek(start)
        text = f.read().decode(errors="replace")
    return [ln for ln in text.splitlines() if " ERROR " in ln or "Traceback" in ln]


# ---------------------------------------------------------------------------------------------------------------
# Workers


class Saver:
    """Writes the frames behind bad outcomes (at most `limit` of each kind) for replay."""

    def __init__(self, out: Path, tag: str, limit: int = 20) -> None:
        self.out, self.tag, self.limit = out, tag, limit
        self.saved: collections.Counter[str] = collections.Counter()
        self.lock = threading.Lock()

    def save(self, kind: str, frame: bytes, note: str = "") -> None:
        with self.lock:
            if self.saved[kind] >= self.limit:
                return
            self.saved[kind] += 1
            n = self.saved[kind]
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / f"{kind}-{self.tag}-{n}.bin").write_bytes(frame)
        if note:
            (self.out / f"{kind}-{self.tag}-{n}.txt").write_text(note + "\n")


def fuzz_thread(
    seed: int,
    frames: int,
    port: int,
    names: fuzz.Names,
    deadline: float,
    log_path: Path,
    saver: Saver,
    counter: Any,
    stats: dict[str, collections.Counter[str]],
) -> None:
    e = fuzz.RandomEntropy(seed)
    rng = e.rng
    builder = fuzz.RequestBuilder(names)
    prober = fuzz.Prober(LOOPBACK, port, deadline)
    outcomes: collections.Counter[str] = collections.Counter()
    by_api: collections.Counter[str] = collections.Counter()
    closed_last: collections.deque[tuple[int, bytes]] = collections.deque(maxlen=2000)
    log_pos = log_path.stat().st_size
    done = 0
    for i in range(frames):
        r = rng.random()
        key = KEYS[rng.randrange(len(KEYS))]
        if r < 0.1:
            kind = "garbage"
            frame = fuzz.garbage(e, APIS)
        else:
            frame, _ = fuzz.well_formed(e, builder, APIS[key])
            kind = "well-formed"
            if r >= 0.2:
                frame = fuzz.mutate(e, frame, APIS)
                kind = "mutated"
        hdr = fuzz.header_of(frame)
        by_api[APIS[hdr[0]].api.name if hdr and hdr[0] in APIS else "other"] += 1
        try:
            out = prober.send(frame)
        except ConnectionRefusedError:
            outcomes["broker gone"] += 1
            saver.save("crash", frame, "connection refused: the broker is gone")
            break
        except AssertionError as exc:  # a torn or impossible response frame
            outcomes["malformed answer"] += 1
            saver.save("malformed", frame, str(exc))
            prober.close()
            continue
        outcomes[f"{kind}: {out.kind}"] += 1
        outcomes[out.kind] += 1
        if out.hung:
            saver.save("hang", frame, f"no answer and no close within {deadline}s")
        if out.extra:
            outcomes["malformed answer"] += 1
            saver.save("malformed", frame, f"{1 + len(out.extra)} answers to one request")
        if out.answer is not None:
            problem = fuzz.check_answer(SERVED, frame, out.answer)
            if problem is not None:
                outcomes["malformed answer"] += 1
                saver.save("malformed", frame, problem)
        elif not out.closed and not out.hung and fuzz.produce_acks(frame) != 0:
            outcomes["silent drop"] += 1
            saver.save("silent", frame, "no answer, connection kept")
        if out.late_close:
            saver.save("late-close", frame, "unanswered; the next request was answered, then the connection closed")
        if kind == "well-formed" and out.answer is None and fuzz.produce_acks(frame) != 0:
            outcomes["well-formed not answered"] += 1
        if out.closed:
            closed_last.append((prober.local_port, frame))
        done += 1
        if done % 500 == 0 or i == frames - 1:
            with counter.get_lock():
                counter.value += done
            done = 0
            # An ERROR names the connection it came from: save the frame that connection last sent.
            with open(log_path, "rb") as f:
                f.seek(log_pos)
                new = f.read().decode(errors="replace")
                log_pos = f.tell()
            for line in new.splitlines():
                if " ERROR " in line:
                    m = PEER_PORT.search(line)
                    culprit = next((fr for p, fr in closed_last if m and p == int(m.group(1))), None)
                    if culprit is not None:
                        saver.save("crash", culprit, line)
    with counter.get_lock():
        counter.value += done
    prober.close()
    stats["outcomes"].update(outcomes)
    stats["apis"].update(by_api)


def worker(
    idx: int, args: argparse.Namespace, port: int, names: fuzz.Names, log_path: Path, counter: Any, results: Any
) -> None:
    saver = Saver(Path(args.out), f"w{idx}")
    stats: dict[str, collections.Counter[str]] = {"outcomes": collections.Counter(), "apis": collections.Counter()}
    per_thread = args.frames // (args.workers * args.threads)
    threads = []
    for t in range(args.threads):
        n = per_thread + (1 if idx * args.threads + t < args.frames % (args.workers * args.threads) else 0)
        own = fuzz.Names(
            names.topic, names.topic_id, names.partitions, names.group, names.node_id, f"{names.tag}{idx}{t}"
        )
        seed = args.seed * 1_000_003 + idx * 101 + t
        th = threading.Thread(
            target=fuzz_thread, args=(seed, n, port, own, args.deadline, log_path, saver, counter, stats)
        )
        th.start()
        threads.append(th)
    for th in threads:
        th.join()
    results.put({k: dict(v) for k, v in stats.items()})


# ---------------------------------------------------------------------------------------------------------------
# State: warm-up and cleanup


def warm_up(port: int, names: fuzz.Names) -> int:
    """One well-formed request of every API in every served version, so the codecs compiled per (API,
    version) exist before the starting RSS is taken (they are a fixed cost, not growth)."""
    builder = fuzz.RequestBuilder(names)
    prober = fuzz.Prober(LOOPBACK, port, 10)
    e = fuzz.RandomEntropy(0)
    n = 0
    for key in KEYS:
        spec = APIS[key]
        for v in range(spec.min_version, spec.max_version + 1):
            body = builder.build(e, spec, v)
            prober.send(fuzz.frame(spec, v, 1, body))
            n += 1
    prober.close()
    return n


def list_groups(client: KafkaClient) -> list[str]:
    R = api(ApiKey.ListGroups).request
    resp = client.conn.do(R(states_filter=[], types_filter=[]), 4)
    return [g.group_id for g in resp.groups]


def delete_everything(bootstrap: str, timeout: float = 120.0) -> dict[str, int]:
    """Delete every topic and group (members of fuzzed groups expire within the bounded session timeouts)."""
    deleted = {"topics": 0, "groups": 0}
    deadline = time.monotonic() + timeout
    with KafkaClient(bootstrap, client_id="fuzz-cleanup") as client:
        for t in client.list_topics():
            if not t.internal:
                try:
                    client.delete_topic(t.name)
                    deleted["topics"] += 1
                except BrokerError as exc:
                    print(f"  could not delete topic {t.name[:60]!r}: {exc}")
        D = api(ApiKey.DeleteGroups).request
        while True:
            # A name read with replacement characters can grow past a Kafka string's 32767 bytes: no request
            # can name it any more (Kafka closes on one, as we do); such groups are left to expire.
            groups = [g for g in list_groups(client) if len(g.encode("utf-8", "surrogatepass")) <= 0x7FFF]
            if not groups:
                break
            resp = client.conn.do(D(groups_names=groups), 2)
            deleted["groups"] += sum(1 for r in resp.results if r.error_code == 0)
            if time.monotonic() > deadline:
                left = [(r.group_id, r.error_code) for r in resp.results if r.error_code != 0]
                print(f"  {len(left)} groups could not be deleted: {left[:5]}")
                break
            if any(r.error_code != 0 for r in resp.results):
                time.sleep(1)  # NON_EMPTY_GROUP: wait for the members' sessions to expire
    return deleted


# ---------------------------------------------------------------------------------------------------------------


def fuzz_round(
    args: argparse.Namespace, frames: int, seed: int, broker: BrokerProcess, names: fuzz.Names, pid: int
) -> tuple[collections.Counter[str], collections.Counter[str], int, float]:
    """One round of `frames` frames over all connections: (outcomes, frames per API, sent, seconds)."""
    counter = mp.Value("q", 0)
    results: Any = mp.Queue()
    round_args = argparse.Namespace(**{**vars(args), "frames": frames, "seed": seed})
    procs = [
        mp.Process(target=worker, args=(i, round_args, broker.port, names, broker.log_path, counter, results))
        for i in range(args.workers)
    ]
    start = time.monotonic()
    for p in procs:
        p.start()
    collected = []
    while len(collected) < len(procs):
        try:
            collected.append(results.get(timeout=5))
            continue
        except queue.Empty:
            pass
        if not broker.running:
            print("  the broker died")
            break
        sent, took = counter.value, time.monotonic() - start
        print(f"  {sent:>9,} frames  {sent / max(took, 1e-9):7,.0f}/s  broker RSS {rss_mb(pid):6.1f} MiB")
        if not any(p.is_alive() for p in procs) and results.empty():
            break
    for p in procs:
        p.join(timeout=30)
    outcomes: collections.Counter[str] = collections.Counter()
    apis: collections.Counter[str] = collections.Counter()
    for r in collected:
        outcomes.update(r["outcomes"])
        apis.update(r["apis"])
    return outcomes, apis, counter.value, time.monotonic() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=2, help="fuzz, then delete what was created; this many times")
    ap.add_argument("--workers", type=int, default=2, help="client processes")
    ap.add_argument("--threads", type=int, default=2, help="connections per client process")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--deadline", type=float, default=10.0, help="seconds an answer or a close may take")
    ap.add_argument("--out", default="fuzz-frames-out", help="where frames behind bad outcomes are saved")
    ap.add_argument("--json", help="also write the report here")
    args = ap.parse_args()

    data = Path(tempfile.mkdtemp(prefix="fuzz-frames-"))
    broker = BrokerProcess(data / "data", env=BROKER_ENV)
    broker.start()
    assert broker.proc is not None
    pid = broker.proc.pid
    report: dict[str, Any] = {"frames": args.frames, "connections": args.workers * args.threads}
    outcomes: collections.Counter[str] = collections.Counter()
    apis: collections.Counter[str] = collections.Counter()
    rss: dict[str, float] = {"start": rss_mb(pid)}
    deleted = {"topics": 0, "groups": 0}
    sent, seconds = 0, 0.0
    try:
        names = fuzz.prepare(broker.bootstrap, fuzz.Names(tag="bench"))
        report["warm_up_frames"] = warm_up(broker.port, names)
        rss["after warm-up"] = rss_mb(pid)
        print(
            f"broker pid {pid} on {broker.bootstrap}: RSS {rss['start']:.1f} MiB, {rss['after warm-up']:.1f} MiB "
            f"after one request of every API and version"
        )
        for r in range(args.rounds):
            n = args.frames // args.rounds + (1 if r < args.frames % args.rounds else 0)
            print(f"round {r + 1}: {n:,} frames")
            got, by_api, k, took = fuzz_round(args, n, args.seed * 7919 + r, broker, names, pid)
            outcomes.update(got)
            apis.update(by_api)
            sent, seconds = sent + k, seconds + took
            if not broker.running:
                break
            rss[f"round {r + 1}: after fuzzing"] = rss_mb(pid)
            for kind, count in delete_everything(broker.bootstrap).items():
                deleted[kind] += count
            time.sleep(2)
            rss[f"round {r + 1}: after deleting what it created"] = rss_mb(pid)
            if r + 1 < args.rounds:
                fuzz.restore(broker.bootstrap, names, records=True)
        if broker.running:
            rss["peak (VmHWM)"] = peak_mb(pid)
    finally:
        rc = broker.stop()
    errors = error_lines(broker.log_path)
    crashes = outcomes["broker gone"] + len(errors) + (rc != 0)
    report.update(
        sent=sent,
        seconds=round(seconds, 1),
        frames_per_second=round(sent / max(seconds, 1e-9)),
        outcomes=dict(sorted(outcomes.items())),
        by_api=dict(sorted(apis.items())),
        crashes=crashes,
        error_lines=errors[:20],
        exit_code_on_sigterm=rc,
        deleted=deleted,
        rss_mib={k: round(v, 1) for k, v in rss.items()},
    )
    late = outcomes["close after a later answer"]
    print()
    print(
        f"frames sent       {sent:>10,}  ({report['frames_per_second']:,}/s over {report['connections']} "
        f"connections, {report['seconds']} s)"
    )
    print(f"answers           {outcomes['answer'] + outcomes['answer+close']:>10,}")
    print(f"closes            {outcomes['close'] + outcomes['answer+close'] + late:>10,}")
    print(f"unanswered acks=0 {outcomes['silent'] - outcomes['silent drop']:>10,}")
    print(f"silent drops      {outcomes['silent drop']:>10,}")
    print(f"late closes       {late:>10,}  (unanswered, a later request answered, then closed)")
    print(f"malformed answers {outcomes['malformed answer']:>10,}")
    print(f"hangs             {outcomes['hang']:>10,}")
    print(
        f"crashes           {crashes:>10,}  (broker gone {outcomes['broker gone']}, ERROR/traceback lines "
        f"{len(errors)}, exit code on SIGTERM {rc})"
    )
    print(f"deleted           {deleted['topics']:>10,} topics, {deleted['groups']:,} groups")
    for k, v in rss.items():
        print(f"RSS {k:<40} {v:8.1f} MiB")
    for line in errors[:5]:
        print("  " + line)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    if crashes == 0:
        shutil.rmtree(data, ignore_errors=True)
    else:
        print(f"broker data and log kept: {data}")
    if crashes or outcomes["hang"]:
        return 1
    return 2 if outcomes["silent drop"] + outcomes["malformed answer"] + late else 0


if __name__ == "__main__":
    sys.exit(main())
