"""A merge sink's MERGE done by delta-rs in the driver, for batches a driver holds easily.

Why: a Spark Delta MERGE is about thirteen Spark jobs, 3-4 s on two cores whatever the batch's size
(docs/design.md, issue 37), so a pipeline's small micro-batches merged at a few thousand rows/s. delta-rs
(the `deltalake` package, Delta's Rust implementation) merges the same batch into the same table in
0.1-0.3 s. It writes the same protocol: Spark reads, time-travels and MERGEs the table as before, and the
batch's transaction id (query id, batch id) is Delta's ``txn`` action either way, so a batch committed by
one engine is skipped when replayed through the other.

Used by ``engine: auto`` when the session's master is local (the driver is where the work would run
anyway), the table is a local path, the batch has at most `LOCAL_ROWS` rows and the table's protocol has
only features delta-rs writes; ``engine: delta-rs`` asks for it outright.
"""

from __future__ import annotations

import datetime as dt
import decimal
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

if TYPE_CHECKING:
    import pyarrow as pa

# The batch rows auto hands to the driver: ~100 MB of Arrow for rows of a dozen 8-byte columns.
LOCAL_ROWS = 1_000_000
# Table features delta-rs 1.x writes (checked against its protocol checker): anything else goes to Spark.
WRITER_FEATURES = frozenset({"appendOnly", "invariants", "checkConstraints", "timestampNtz"})
READER_FEATURES = frozenset({"timestampNtz"})


class NotWritable(Exception):
    """The table uses a feature delta-rs does not write (deletion vectors, column mapping, ...)."""


def local_path(path: str) -> str | None:
    """The table's directory when it is on the local file system (plain or ``file:``), else None."""
    parsed = urlparse(path)
    if parsed.scheme == "file":
        return parsed.path
    if parsed.scheme and len(parsed.scheme) > 1:  # s3a://, hdfs://, abfss://: Hadoop's file systems
        return None
    return os.path.abspath(path)


def available() -> bool:
    try:
        import deltalake  # noqa: F401
    except ImportError:
        return False
    return True


def quote(column: str) -> str:
    """A column as a case-kept identifier (unquoted ones are lower-cased by delta-rs' SQL parser)."""
    return '"' + column.replace('"', '""') + '"'


def literal(value: Any, type_: pa.DataType) -> str | None:
    """`value` as a SQL literal of `type_`, or None where no exact one is written here (floats, binary)."""
    import pyarrow as pa

    if pa.types.is_integer(type_):
        return str(int(value))
    if pa.types.is_string(type_) or pa.types.is_large_string(type_):
        return "'" + str(value).replace("'", "''") + "'"
    if pa.types.is_date32(type_) and isinstance(value, dt.date):
        return f"DATE '{value.isoformat()}'"
    if pa.types.is_timestamp(type_) and isinstance(value, dt.datetime):
        if type_.tz is not None:  # aware: written in UTC with its zone
            return f"TIMESTAMP '{value.astimezone(dt.UTC).replace(tzinfo=None).isoformat()}Z'"
        return f"TIMESTAMP '{value.isoformat()}'"
    if pa.types.is_decimal(type_) and isinstance(value, decimal.Decimal):
        return f"CAST('{value}' AS DECIMAL({type_.precision},{type_.scale}))"
    return None


def condition(table: pa.Table, keys: Sequence[str], prune: bool) -> str:
    """Null-safe equality on the keys and, with `prune`, each key's range in this batch as a target-only
    conjunct (what lets delta-rs skip files by their statistics), as the Spark path builds it."""
    import pyarrow.compute as pc

    parts = [f"(t.{quote(k)} IS NOT DISTINCT FROM s.{quote(k)})" for k in keys]
    for k in keys if prune else ():
        column = table.column(k)
        bounds = pc.min_max(column)
        lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
        nulls = column.null_count > 0
        within = None
        if lo is not None:
            a, b = literal(lo, column.type), literal(hi, column.type)
            if a is None or b is None:
                continue
            within = f"(t.{quote(k)} BETWEEN {a} AND {b})"
        if nulls:
            within = f"(t.{quote(k)} IS NULL)" if within is None else f"({within} OR (t.{quote(k)} IS NULL))"
        if within is not None:
            parts.append(within)
    return " AND ".join(parts)


def duplicate(table: pa.Table, keys: Sequence[str]) -> dict[str, Any] | None:
    """A key the batch holds more than once (nulls equal, as the merge matches them), or None."""
    import pyarrow.compute as pc

    counts = table.select(list(keys)).group_by(list(keys), use_threads=False).aggregate([([], "count_all")])
    many = counts.filter(pc.greater(counts.column("count_all"), 1))
    if not many.num_rows:
        return None
    first = many.slice(0, 1).to_pylist()[0]
    return {k: first[k] for k in keys}


def newer(order: Sequence[str]) -> str | None:
    """``struct(s.order) >= struct(t.order)`` as Spark orders structs (field by field, null lowest)."""
    if not order:
        return None

    def eq(c: str) -> str:
        return f"(s.{quote(c)} IS NOT DISTINCT FROM t.{quote(c)})"

    def gt(c: str) -> str:
        s, t = f"s.{quote(c)}", f"t.{quote(c)}"
        return f"(({s} IS NOT NULL AND {t} IS NULL) OR ({s} > {t}))"

    terms = [" AND ".join([eq(c) for c in order[:i]] + [gt(order[i])]) for i in range(len(order))]
    terms.append(" AND ".join(eq(c) for c in order))
    return " OR ".join(f"({t})" for t in terms)


def open_writable(path: str) -> Any:
    """The table at `path` (a deltalake.DeltaTable), None when there is none yet; raises NotWritable when its
    protocol names a feature delta-rs does not write, before anything is read or written."""
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(path):
        return None
    table = DeltaTable(path)
    p = table.protocol()
    readers, writers = set(p.reader_features or ()), set(p.writer_features or ())
    if p.min_reader_version not in (1, 3) or p.min_writer_version not in (1, 2, 7):
        raise NotWritable(f"protocol {p.min_reader_version}/{p.min_writer_version}")
    if readers - READER_FEATURES or writers - WRITER_FEATURES:
        raise NotWritable(", ".join(sorted((readers - READER_FEATURES) | (writers - WRITER_FEATURES))))
    return table


def merge(table: Any, batch: pa.Table, keys: Sequence[str], order: Sequence[str], prune: bool,
          app: str | None, batch_id: int, compact: bool) -> None:  # fmt: skip
    """One batch (one row per key) into `table` (from open_writable): a key's row replaces the table's unless
    the table's is newer by `order`; keys not in the table are inserted. Tagged with (app, batch_id) when app
    is given, and skipped when that batch is already in the table."""
    from deltalake import CommitProperties, PostCommitHookProperties, Transaction

    if app is not None and (done := table.transaction_version(app)) is not None and done >= batch_id:
        return
    before = table.version()
    commit = CommitProperties(app_transactions=[Transaction(app, batch_id)]) if app is not None else None
    # Checkpoints on Spark's schedule (every delta.checkpointInterval commits, 10 by default), not delta-rs'
    # 100: Spark readers replay every JSON commit since the last checkpoint.
    hooks = PostCommitHookProperties(create_checkpoint=False)
    merger = table.merge(batch, condition(batch, keys, prune), source_alias="s", target_alias="t",
                         commit_properties=commit, post_commithook_properties=hooks)  # fmt: skip
    merger.when_matched_update_all(predicate=newer(order)).when_not_matched_insert_all().execute()
    if compact:  # untagged, as the Spark path's OPTIMIZE: compaction changes no data
        table.optimize.compact(post_commithook_properties=hooks)
    interval = int(table.metadata().configuration.get("delta.checkpointInterval") or 10)
    if table.version() // interval > before // interval:
        table.create_checkpoint()
