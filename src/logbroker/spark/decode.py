"""Decoders: the Kafka source's rows (key, value, headers, topic, partition, offset, timestamp, ...)
turned into columns a SQL transform can use.

Everything is Spark SQL expressions (no Python UDFs), so decoding runs in the JVM at full speed and
works the same on a cluster. Session settings are not relied on: timestamps parse with an explicit
UTC offset and failed parses use ``try_*`` functions, which matter under Spark 4's ANSI mode where
a bad cast would otherwise fail the whole query.

Columns (``raw`` keeps the source row as it is):

* ``json``: the schema's fields, then ``topic, partition, offset, timestamp, key, value_size,
  _corrupt``;
* ``notify``: ``message_id, publisher_id, event_type, priority, payload`` (JSON text), ``timestamp``
  (the envelope's UTC time, else the Kafka timestamp: the event time), ``context`` (JSON text), then
  ``topic, partition, offset, kafka_timestamp, key, value_size, _corrupt``; oslo's 2.0 envelope
  ``{"oslo.message": "<json>"}`` is unwrapped first;
* ``mq``: ``message_id`` ("topic:partition:offset", MessageID's str form), ``payload`` (b"" for a
  null value), ``properties`` (header key -> UTF-8 value; for a repeated key the last wins and a
  null value is "", as ``logbroker.mq`` does), ``key``, then ``topic, partition, offset, timestamp``.

A metadata column whose name a decoded field already has (a json schema with ``timestamp``) is
renamed ``kafka_<name>``. ``_corrupt`` is NULL for a good record and the reason for a bad one (not
JSON, not an object, a field of the wrong type, a null value; for notify also no ``event_type``),
whose decoded columns are then NULL. `Decode.on_error` keeps (default), drops or fails on them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from logbroker.spark.spec import Decode

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["ARCHIVE_SCHEMA", "NOTIFY_SCHEMA", "decode"]

# The Kafka source's columns with includeHeaders (and the archive's, plus its `date` partition).
ARCHIVE_SCHEMA = (
    "key BINARY, value BINARY, headers ARRAY<STRUCT<key: STRING, value: BINARY>>, partition INT, "
    "offset BIGINT, timestamp TIMESTAMP, timestampType INT, topic STRING, date DATE"
)
# Objects and arrays read into a STRING field come back as their JSON text: that is how payload and
# _context are kept without knowing their shape.
NOTIFY_SCHEMA = (
    "message_id STRING, publisher_id STRING, event_type STRING, priority STRING, payload STRING, "
    "timestamp STRING, _context STRING, _corrupt_record STRING"
)
_CORRUPT = "_corrupt_record"
# The envelope's "YYYY-MM-DD HH:MM:SS.ffffff" (UTC); also without fraction and with a 'T'.
_TS_PATTERNS = ("yyyy-MM-dd HH:mm:ss.SSSSSSX", "yyyy-MM-dd HH:mm:ssX", "yyyy-MM-dd'T'HH:mm:ss.SSSSSSX",
                "yyyy-MM-dd'T'HH:mm:ssX")  # fmt: skip


def _json_options() -> dict[str, str]:
    return {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT}


def _metadata(taken: set[str], names: tuple[str, ...]) -> list[str]:
    return [f"`{n}` AS `kafka_{n}`" if n in taken else f"`{n}`" for n in names]


def _apply_on_error(df: DataFrame, spec: Decode) -> DataFrame:
    if spec.on_error == "drop":
        return df.where("_corrupt IS NULL").drop("_corrupt")
    if spec.on_error == "fail":
        # raise_error inside a filter (a projected column nobody reads would be pruned away): the
        # micro-batch fails before anything of it is committed.
        return df.where(
            "CASE WHEN _corrupt IS NULL THEN true ELSE raise_error(concat('undecodable record at ', topic, '/', "
            "CAST(partition AS STRING), '@', CAST(offset AS STRING), ': ', _corrupt)) END"
        ).drop("_corrupt")
    return df


def _json(df: DataFrame, spec: Decode) -> DataFrame:
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType, _parse_datatype_string

    schema = _parse_datatype_string(str(spec.schema_))
    if not isinstance(schema, StructType):
        raise ValueError(f"decode.schema must be a list of fields, got {schema.simpleString()}")
    fields = [f.name for f in schema.fields]
    parse_schema = StructType([*schema.fields]).add(_CORRUPT, "string")
    parsed = df.select("*", F.from_json(F.col("value").cast("string"), parse_schema, _json_options()).alias("_j"))
    reason = (
        "CASE WHEN value IS NULL THEN 'null value' "
        f"WHEN _j IS NULL OR _j.{_CORRUPT} IS NOT NULL THEN 'not a JSON object matching the schema' END"
    )
    return _apply_on_error(
        parsed.selectExpr(
            *[f"CASE WHEN ({reason}) IS NULL THEN _j.`{n}` END AS `{n}`" for n in fields],
            *_metadata(set(fields), ("topic", "partition", "offset", "timestamp", "key")),
            "CAST(coalesce(length(value), 0) AS INT) AS value_size",
            f"{reason} AS _corrupt",
        ),
        spec,
    )


def _ts(col: str) -> str:
    quoted = [p.replace("'", "\\'") for p in _TS_PATTERNS]  # SQL literal: backslash-escape the quotes
    parts = ", ".join(f"try_to_timestamp(concat({col}, 'Z'), '{p}')" for p in quoted)
    return f"coalesce({parts})"


def _notify(df: DataFrame, spec: Decode) -> DataFrame:
    from pyspark.sql import functions as F

    text = F.col("value").cast("string")
    outer = F.from_json(text, "`oslo.message` STRING")
    body = F.coalesce(outer.getField("oslo.message"), text)
    parsed = df.select("*", F.from_json(body, NOTIFY_SCHEMA, _json_options()).alias("_n"))
    reason = (
        "CASE WHEN value IS NULL THEN 'null value' "
        f"WHEN _n IS NULL OR _n.{_CORRUPT} IS NOT NULL THEN 'not a JSON notification' "
        "WHEN _n.event_type IS NULL THEN 'notification has no event_type' END"
    )
    good = f"({reason}) IS NULL"
    fields = ("message_id", "publisher_id", "event_type", "priority", "payload")
    return _apply_on_error(
        parsed.selectExpr(
            *[f"CASE WHEN {good} THEN _n.{n} END AS {n}" for n in fields],
            f"coalesce(CASE WHEN {good} THEN {_ts('_n.timestamp')} END, timestamp) AS timestamp",
            f"CASE WHEN {good} THEN coalesce(_n._context, '{{}}') END AS context",
            "topic", "partition", "offset", "timestamp AS kafka_timestamp", "key",
            "CAST(coalesce(length(value), 0) AS INT) AS value_size",
            f"{reason} AS _corrupt",
        ),
        spec,
    )  # fmt: skip


def _mq(df: DataFrame) -> DataFrame:
    # Keep a header only if no later header has its key: the last value wins, as dict() would, and
    # map_from_entries does not fail on a repeated key.
    hs = "coalesce(headers, CAST(array() AS ARRAY<STRUCT<key: STRING, value: BINARY>>))"
    last_wins = f"filter({hs}, (h, i) -> NOT exists(slice({hs}, i + 2, greatest(size({hs}), 1)), x -> x.key = h.key))"
    return df.selectExpr(
        "concat_ws(':', topic, CAST(partition AS STRING), CAST(offset AS STRING)) AS message_id",
        "coalesce(value, X'') AS payload",
        f"map_from_entries(transform({last_wins}, h -> struct(h.key AS key, "
        "coalesce(CAST(h.value AS STRING), '') AS value))) AS properties",
        "key", "topic", "partition", "offset", "timestamp",
    )  # fmt: skip


def decode(df: DataFrame, spec: Decode) -> DataFrame:
    """The decoded frame for `spec.format` (see the module docstring for its columns)."""
    if spec.format == "raw":
        return df
    if spec.format == "json":
        return _json(df, spec)
    if spec.format == "notify":
        return _notify(df, spec)
    return _mq(df)
