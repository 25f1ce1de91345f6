"""The delta-rs merge path (`logbroker.spark.delta_rs`) on its own, without Spark: the key ranges it writes into the
merge condition as typed literals must match the batch's own rows at their bounds (a literal off by a time zone or
a rounding would leave a bound row unmatched, and the merge would insert it a second time), a replayed batch is
skipped by its transaction id, and checkpoints follow Spark's schedule."""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")
deltalake = pytest.importorskip("deltalake")

from logbroker.spark import delta_rs  # noqa: E402

KEYS = ["d", "ts", "ntz", "dec", "s"]
T0 = dt.datetime(2026, 3, 29, 0, 30, tzinfo=dt.UTC)  # around a European DST change: a zone slip would show


def rows(ids: range, value: int) -> pa.Table:
    return pa.table({
        "d": pa.array([dt.date(2026, 1, 1) + dt.timedelta(days=i) for i in ids], pa.date32()),
        "ts": pa.array([T0 + dt.timedelta(minutes=7 * i, microseconds=i) for i in ids], pa.timestamp("us", "UTC")),
        "ntz": pa.array([dt.datetime(2026, 3, 29, 1) + dt.timedelta(seconds=i) for i in ids], pa.timestamp("us")),
        "dec": pa.array([decimal.Decimal(i) / 100 for i in ids], pa.decimal128(20, 2)),
        "s": pa.array([f"o'k-{i:04d}" for i in ids]),
        "v": pa.array([value] * len(ids), pa.int64()),
    })  # fmt: skip


def test_typed_key_ranges_match_their_bounds_replays_skip_and_checkpoints_follow_spark(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    deltalake.write_deltalake(path, rows(range(200), 0))
    table = delta_rs.open_writable(path)
    for b in range(1, 13):  # batch b: keys 10b..10b+19, half already in the table's last batch's range
        batch = rows(range(10 * b, 10 * b + 20), b)
        delta_rs.merge(table, batch, KEYS, [], True, "query-1", b, compact=False)
        delta_rs.merge(table, rows(range(10 * b, 10 * b + 20), 99), KEYS, [], True, "query-1", b, compact=False)
    got = deltalake.DeltaTable(path).to_pyarrow_table().sort_by("s")
    assert got.num_rows == 200  # every key's row replaced in place, none inserted twice
    values = dict(zip(got.column("s").to_pylist(), got.column("v").to_pylist(), strict=True))
    assert values["o'k-0010"] == 1 and values["o'k-0139"] == 12 and values["o'k-0140"] == 0
    assert 99 not in values.values()  # the replays were skipped
    log = Path(path) / "_delta_log"
    assert (log / f"{10:020d}.checkpoint.parquet").exists()
    assert deltalake.DeltaTable(path).transaction_version("query-1") == 12


def test_null_keys_match_null_keys_and_the_newer_row_wins(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    schema = pa.schema([("k", pa.string()), ("ts", pa.int64()), ("seq", pa.int64()), ("v", pa.int64())])
    deltalake.write_deltalake(path, pa.table({"k": ["a", None, "c"], "ts": [5, 5, 5], "seq": [1, None, 1],
                                              "v": [0, 0, 0]}, schema))  # fmt: skip
    table = delta_rs.open_writable(path)
    batch = pa.table({"k": ["a", None, "c", "d"], "ts": [4, 5, 5, 1], "seq": [9, 0, None, 1], "v": [1, 1, 1, 1]},
                     schema)  # fmt: skip
    delta_rs.merge(table, batch, ["k"], ["ts", "seq"], True, None, 0, compact=False)
    got = {r["k"]: r["v"] for r in deltalake.DeltaTable(path).to_pyarrow_table().to_pylist()}
    # a: older ts loses; None: seq 0 beats a null seq (null lowest, as Spark orders structs); c: null seq loses
    assert got == {"a": 0, None: 1, "c": 0, "d": 1}
