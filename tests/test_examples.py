"""The pipeline specs shipped in examples/pipelines/ run as documented, on a broker of their own.

Only the addresses and paths are rewritten (and a processing-time trigger becomes availableNow so the
run ends); the SQL, decoders and sinks are the files' own, so a broken example fails here.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from confluent_kafka import Producer

from logbroker_devtools.testing.process import BrokerProcess
from support import spark_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "pipelines"


@pytest.fixture(scope="module")
def own_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The errors example subscribes by pattern, so it gets a broker without other tests' topics."""
    proc = BrokerProcess(tmp_path_factory.mktemp("examples-broker") / "data")
    proc.start()
    yield proc.bootstrap
    assert proc.stop() == 0


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    with spark_session("logbroker-test-examples") as s:
        yield s


def localise(name: str, bootstrap: str, tmp: Path) -> dict[str, Any]:
    spec = yaml.safe_load((EXAMPLES / name).read_text())
    spec["source"]["bootstrap"] = bootstrap
    spec["checkpoint"] = str(tmp / "checkpoint")
    for sink in spec["sinks"]:
        if "path" in sink:
            sink["path"] = str(tmp / "data")
    spec["trigger"] = {"available_now": True}
    spec.pop("master", None)
    return spec


def test_every_example_is_a_valid_spec() -> None:
    from logbroker.spark import load_spec

    files = sorted(EXAMPLES.glob("*.yaml"))
    assert files, "no example specs found"
    for f in files:
        assert load_spec(f).name


def test_errors_example(spark: SparkSession, own_broker: str, tmp_path: Path) -> None:
    from logbroker.notify import Notifier
    from logbroker.spark import load_spec, run

    sent: dict[str, int] = {"info": 0, "error": 0, "critical": 0}
    with Notifier(f"kafka://{own_broker}", "compute.host1", ["notifications"]) as notifier:
        for i in range(60):
            priority = ("info", "info", "error", "critical")[i % 4]
            getattr(notifier, priority)({"request_id": f"req-{i}"}, f"compute.instance.op{i % 3}", {"i": i})
            sent[priority] += 1
    spec = load_spec(localise("errors.yaml", own_broker, tmp_path))
    result = run(spec, spark=spark, progress=False)
    assert result.stopped == "finished"
    rows = spark.read.parquet(str(tmp_path / "data")).collect()
    assert sorted(r["priority"] for r in rows) == sorted(["ERROR"] * sent["error"] + ["CRITICAL"] * sent["critical"])
    assert {r["event_type"] for r in rows} == {"compute.instance.op0", "compute.instance.op1", "compute.instance.op2"}
    assert all(json.loads(r["payload"])["i"] % 4 in (2, 3) for r in rows)


def test_orders_json_example(spark: SparkSession, own_broker: str, tmp_path: Path) -> None:
    from logbroker.spark import load_spec, run

    base = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0) - dt.timedelta(minutes=30)
    orders = [
        {"order_id": f"o{i}", "customer": f"c{i % 2}", "amount": float(i),
         "ts": (base + dt.timedelta(seconds=20 * i)).strftime("%Y-%m-%dT%H:%M:%S.000Z")}
        for i in range(9)
    ]  # fmt: skip
    producer = Producer({"bootstrap.servers": own_broker, "acks": "all"})
    for order in orders:
        producer.produce("orders", json.dumps(order).encode(), order["order_id"].encode())
    producer.produce("orders", b"not json", b"bad")
    assert producer.flush(30) == 0

    result = run(load_spec(localise("orders-json.yaml", own_broker, tmp_path)), spark=spark, progress=False)
    assert result.stopped == "finished"
    got = {(r["minute"].replace(tzinfo=None), r["customer"]): (r["orders"], r["amount"])
           for r in spark.read.format("delta").load(str(tmp_path / "data")).collect()}  # fmt: skip
    want: dict[tuple[dt.datetime, str], tuple[int, float]] = {}
    for o in orders:
        ts = dt.datetime.strptime(o["ts"], "%Y-%m-%dT%H:%M:%S.000Z").replace(second=0)
        n, amount = want.get((ts, o["customer"]), (0, 0.0))
        want[(ts, o["customer"])] = (n + 1, amount + o["amount"])
    assert got == want
