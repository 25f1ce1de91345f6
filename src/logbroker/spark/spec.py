"""The pipeline spec: what `logbroker pipeline run SPEC.yaml` and `logbroker.spark.pipeline.run` execute.

A pydantic model (``extra="forbid"`` everywhere, so a misspelt key is an error rather than a silently
ignored option). `load_spec` turns any validation failure into one `SpecError` whose message starts
with the field path (``sinks.0.path: Field required``): a YAML author needs to know *where*, not a
pydantic traceback.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from logbroker.spark import delta_rs

if TYPE_CHECKING:
    from logbroker._kafka.settings import KafkaSettings

__all__ = [
    "ISOLATION_LEVEL_HELP",
    "SECURITY_HELP",
    "ConsoleSink",
    "Decode",
    "DeltaSink",
    "KafkaSource",
    "ParquetSink",
    "ParquetSource",
    "PipelineSpec",
    "SpecError",
    "TopicSink",
    "Trigger",
    "Watermark",
    "connector_security",
    "load_spec",
    "parse_interval",
    "producer_security",
    "security_settings",
]


class SpecError(ValueError):
    """An invalid pipeline spec; the message names the offending field path first."""


_UNITS = {
    "ms": 0.001, "millisecond": 0.001, "milliseconds": 0.001,
    "s": 1, "sec": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hour": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400,
}  # fmt: skip
_INTERVAL = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*$")


def parse_interval(text: str) -> float:
    """Seconds in a Spark-style interval ("10 seconds", "5 minutes", "1 hour"); ValueError otherwise.

    Checked here so a typo fails at load time instead of when Spark starts the query minutes later.
    """
    m = _INTERVAL.match(text)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"not an interval like '10 seconds' or '5 minutes': {text!r}")
    seconds = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if seconds <= 0:
        raise ValueError(f"interval must be positive: {text!r}")
    return seconds


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


IsolationLevel = Literal["read_committed", "read_uncommitted"]
ISOLATION_LEVEL_OPTION = "kafka.isolation.level"
ISOLATION_LEVEL_HELP = (
    "Which records of transactional producers the source reads. read_committed (the default here) reads "
    "committed transactions only and stops at the last stable offset, so an open transaction holds the "
    "pipeline back until it ends (at most transaction.timeout.ms); read_uncommitted (Spark's own default) "
    "reads every record as soon as it is written, aborted ones included. Topics without transactions read "
    "the same either way."
)


SECURITY_HELP = (
    "Kafka client properties of the connection (as in a --command-config file: security.protocol, "
    "sasl.mechanism, sasl.jaas.config, ssl.truststore.type=PEM / ssl.truststore.location, ssl.keystore.* as PEM, "
    "ssl.key.password; or librdkafka's names), or the path of such a properties file. Spark's connector gets "
    "them as kafka.* options, confluent-kafka (topic sinks keeping timestamps, replay) as librdkafka settings."
)
Security = dict[str, str | int | bool] | str | None


def security_settings(security: Security, bootstrap: str) -> KafkaSettings | None:
    """A spec's `security` (properties or a properties file) as the shared layer's settings; ValueError names
    the property at fault."""
    if security is None:
        return None
    from logbroker._kafka.settings import from_properties, read_properties

    if isinstance(security, str):
        try:
            props = read_properties(security)
        except OSError as exc:
            raise ValueError(f"cannot read {security}: {exc.strerror or exc}") from None
    else:
        props = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in security.items()}
    return from_properties(props, bootstrap)


def connector_security(settings: KafkaSettings | None) -> dict[str, str]:
    """Spark connector options (`kafka.`-prefixed Java client properties) for ``settings``."""
    if settings is None:
        return {}
    from logbroker._kafka.settings import java_client_properties

    return {f"kafka.{k}": v for k, v in java_client_properties(settings).items()}


def producer_security(settings: KafkaSettings | None) -> dict[str, Any]:
    """confluent-kafka settings for ``settings`` (no bootstrap: the producer path sets it)."""
    if settings is None:
        return {}
    from logbroker._kafka.settings import librdkafka_config

    conf = librdkafka_config(settings)
    conf.pop("bootstrap.servers", None)
    return conf


class KafkaSource(_Model):
    """Spark's Kafka source: one of `topics` (subscribe) or `pattern` (subscribePattern).

    `isolation_level` defaults to read_committed, unlike Spark's connector (read_uncommitted, the Java
    consumer's default): a pipeline that archives or aggregates a topic written by transactional
    producers must not keep records whose transaction was aborted, and an exactly-once sink is only as
    good as its input. logbroker's other consumers (mq, notify: librdkafka) read committed data too.
    """

    kind: Literal["kafka"] = "kafka"
    bootstrap: str
    topics: list[str] | None = None
    pattern: str | None = None
    starting_offsets: Literal["earliest", "latest"] | dict[str, dict[str, int]] = "earliest"
    max_offsets_per_trigger: Annotated[int, Field(gt=0)] | None = None
    fail_on_data_loss: bool = True
    isolation_level: IsolationLevel = Field("read_committed", description=ISOLATION_LEVEL_HELP)
    security: Security = Field(None, description=SECURITY_HELP)
    options: dict[str, str] = {}

    @field_validator("topics")
    @classmethod
    def _topics_not_empty(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and (not v or any(not t for t in v)):
            raise ValueError("give at least one non-empty topic name")
        return v

    @model_validator(mode="after")
    def _one_subscription(self) -> KafkaSource:
        if (self.topics is None) == (self.pattern is None):
            raise ValueError("give exactly one of topics or pattern")
        return self

    @model_validator(mode="after")
    def _one_isolation_level(self) -> KafkaSource:
        """Two different levels (the field and the raw connector option) would leave the reader guessing
        which one Spark used; the option alone is accepted (it is the escape hatch) and wins."""
        raw = self.options.get(ISOLATION_LEVEL_OPTION)
        if raw is not None and "isolation_level" in self.model_fields_set and raw != self.isolation_level:
            raise ValueError(
                f"@isolation_level: {self.isolation_level} contradicts options.{ISOLATION_LEVEL_OPTION}={raw}; "
                "give one of them"
            )
        return self

    @model_validator(mode="after")
    def _security_readable(self) -> KafkaSource:
        try:
            security_settings(self.security, self.bootstrap)
        except ValueError as exc:
            raise ValueError(f"@security: {exc}") from None
        return self

    def kafka_settings(self) -> KafkaSettings | None:
        """The connection's security as shared-layer settings (None: plain PLAINTEXT)."""
        return security_settings(self.security, self.bootstrap)

    def connector_options(self) -> dict[str, str]:
        """The options for ``readStream.format("kafka")``; user `options` win (they are the escape hatch)."""
        opts = {"kafka.bootstrap.servers": self.bootstrap, "includeHeaders": "true",
                "failOnDataLoss": str(self.fail_on_data_loss).lower(),
                ISOLATION_LEVEL_OPTION: self.isolation_level}  # fmt: skip
        if self.topics is not None:
            opts["subscribe"] = ",".join(self.topics)
        else:
            opts["subscribePattern"] = str(self.pattern)
        so = self.starting_offsets
        opts["startingOffsets"] = so if isinstance(so, str) else json.dumps(so)
        if self.max_offsets_per_trigger is not None:
            opts["maxOffsetsPerTrigger"] = str(self.max_offsets_per_trigger)
        opts.update(connector_security(self.kafka_settings()))
        opts.update(self.options)
        return opts


class ParquetSource(_Model):
    """A Parquet dataset (e.g. an archive): a batch read, or a file stream when a checkpoint is given."""

    kind: Literal["parquet"]
    path: str


class Decode(_Model):
    """How record values become columns; `on_error` says what happens to undecodable ones (json/notify).

    ``keep`` (default) keeps them with the reason in ``_corrupt`` and the decoded columns null, so nothing
    disappears unseen; ``drop`` filters them out; ``fail`` stops the query with an error.
    """

    format: Literal["raw", "json", "notify", "mq"] = "raw"
    schema_: str | None = Field(default=None, alias="schema")
    on_error: Literal["keep", "drop", "fail"] = "keep"

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @model_validator(mode="after")
    def _schema_for_json(self) -> Decode:
        if self.format == "json" and not self.schema_:
            raise ValueError("@schema: json decode needs a schema (Spark DDL, e.g. 'id INT, name STRING')")
        if self.format != "json" and self.schema_:
            raise ValueError(f"@schema: applies to json decode only, not {self.format}")
        return self


class Watermark(_Model):
    column: str
    delay: str

    @field_validator("delay")
    @classmethod
    def _delay(cls, v: str) -> str:
        parse_interval(v)
        return v


class ParquetSink(_Model):
    """Spark's file sink: exactly-once through the checkpoint (``_spark_metadata`` lists committed files)."""

    type: Literal["parquet"]
    path: str
    partition_by: list[str] = []
    mode: Literal["append", "upsert"] = "append"
    keys: list[str] = []

    @model_validator(mode="after")
    def _retired(self) -> ParquetSink:
        # The hand-written upsert (a rewrite swapped in file by file, local paths only) gave way to
        # Delta's MERGE: ACID, any filesystem, idempotent per batch.
        if self.mode == "upsert":
            raise ValueError("@mode: upsert is retired: use type: delta with mode: merge and the same keys")
        if self.keys:
            raise ValueError("@keys: apply to type: delta with mode: merge only")
        return self


class DeltaSink(_Model):
    """A Delta Lake table, exactly-once across restarts either way.

    ``append`` is Delta's streaming sink (each batch one commit, tagged with the query's id and batch
    number, so a replayed batch is skipped). ``merge`` upserts by `keys` (null-safe equality): a key's
    row in the batch replaces the table's; of several rows of one key in a batch the greatest by
    `order_by` wins (default: ``timestamp`` then ``offset``, those of them the rows have; with neither,
    a batch holding one key twice is refused). Each MERGE carries Delta's ``txnAppId``/``txnVersion``
    (query id, batch id): a batch whose MERGE committed before a crash is not applied twice.

    A merge rewrites only what it must. With ``prune`` (default) the batch's range of each orderable key
    column joins the merge condition, so Delta skips files whose statistics or partition values lie outside
    it. ``deletion_vectors`` creates the table with them: a MERGE marks replaced rows instead of copying
    the untouched rows of their files, which pays once files are much larger than a batch's changes (off by
    default: measured slower on tables of a few MB, docs/design.md; readers need Delta 2.3+). Every
    ``compact_every`` batches the table is compacted (OPTIMIZE: small files and hidden rows rewritten).

    ``engine`` is who runs a MERGE. Spark's costs 3-4 s of fixed work per batch on two cores; delta-rs
    (Delta's Rust implementation, in the driver) merges a batch of thousands of rows in a fraction of a
    second and writes the same table, transaction ids included. ``auto`` (default) uses delta-rs with a
    local master and path, batches up to a million rows and tables without features it cannot write
    (deletion vectors); ``spark`` and ``delta-rs`` insist on one. Spark creates the table either way.
    """

    type: Literal["delta"]
    path: str
    mode: Literal["append", "merge"] = "append"
    keys: list[str] = []
    order_by: list[str] = []
    partition_by: list[str] = []
    deletion_vectors: bool = False
    prune: bool = True
    compact_every: Annotated[int, Field(ge=0)] = 0
    engine: Literal["auto", "spark", "delta-rs"] = "auto"

    @model_validator(mode="after")
    def _keys(self) -> DeltaSink:
        if self.mode == "merge" and not self.keys:
            raise ValueError("@keys: mode merge needs keys (the columns that identify a row)")
        if self.mode == "append" and (self.keys or self.order_by):
            raise ValueError(f"@{'keys' if self.keys else 'order_by'}: applies to mode merge only")
        if self.mode == "append" and self.compact_every:
            raise ValueError("@compact_every: applies to mode merge only")
        if self.mode == "append" and self.engine != "auto":
            raise ValueError("@engine: applies to mode merge only")
        if self.engine == "delta-rs" and delta_rs.local_path(self.path) is None:
            raise ValueError("@engine: delta-rs here writes local paths only (file: or a plain path); use spark")
        if self.engine == "delta-rs" and self.deletion_vectors:
            raise ValueError("@engine: delta-rs does not write deletion vectors; use spark or auto")
        return self


class TopicSink(_Model):
    """Write `value` (and optional key, headers, partition, topic columns) to a topic."""

    type: Literal["topic"]
    bootstrap: str | None = None
    topic: str | None = None
    keep_timestamp: bool = False
    security: Security = Field(None, description=SECURITY_HELP + " Without a bootstrap, the source's is used.")

    @model_validator(mode="after")
    def _security_readable(self) -> TopicSink:
        try:
            security_settings(self.security, self.bootstrap or "placeholder:9092")
        except ValueError as exc:
            raise ValueError(f"@security: {exc}") from None
        return self


class ConsoleSink(_Model):
    type: Literal["console"]
    num_rows: Annotated[int, Field(gt=0)] = 20


class Trigger(_Model):
    """``available_now`` (drain what is there, then stop) or ``processing_time`` (run until stopped)."""

    available_now: bool = True
    processing_time: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _exactly_one(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and data.get("processing_time") is not None:
            if data.get("available_now"):
                raise ValueError("give exactly one of available_now or processing_time")
            data = {**data, "available_now": False}
        return data

    @model_validator(mode="after")
    def _one(self) -> Trigger:
        if not self.available_now and self.processing_time is None:
            raise ValueError("give exactly one of available_now or processing_time")
        if self.processing_time is not None:
            try:
                parse_interval(self.processing_time)
            except ValueError as exc:
                raise ValueError(f"@processing_time: {exc}") from None
        return self


Source = Annotated[KafkaSource | ParquetSource, Field(discriminator="kind")]
Sink = Annotated[ParquetSink | DeltaSink | TopicSink | ConsoleSink, Field(discriminator="type")]


class PipelineSpec(_Model):
    name: str
    source: Source
    decode: Decode = Decode()
    watermark: Watermark | None = None
    transform: str | None = None
    sinks: Annotated[list[Sink], Field(min_length=1)]
    trigger: Trigger = Trigger()
    checkpoint: str | None = None
    master: str = "local[*]"
    spark_conf: dict[str, str] = {}

    @model_validator(mode="before")
    @classmethod
    def _default_kind(cls, data: Any) -> Any:
        """`kind` defaults to kafka; a pydantic discriminator needs it present, so fill it in."""
        if isinstance(data, Mapping) and isinstance(data.get("source"), Mapping) and "kind" not in data["source"]:
            data = {**data, "source": {**data["source"], "kind": "kafka"}}
        return data

    @model_validator(mode="after")
    def _cross_checks(self) -> PipelineSpec:
        if isinstance(self.source, KafkaSource) and not self.checkpoint:
            raise ValueError("checkpoint: required for a kafka source (it is where offsets are kept)")
        for i, sink in enumerate(self.sinks):
            if isinstance(sink, TopicSink) and sink.bootstrap is None and not isinstance(self.source, KafkaSource):
                raise ValueError(f"sinks.{i}.bootstrap: required when the source is not kafka")
        return self

    @property
    def streaming(self) -> bool:
        """A parquet source without a checkpoint is read once as a batch; everything else streams."""
        return isinstance(self.source, KafkaSource) or self.checkpoint is not None

    def sink_bootstrap(self, sink: TopicSink) -> str:
        if sink.bootstrap is not None:
            return sink.bootstrap
        assert isinstance(self.source, KafkaSource)
        return self.source.bootstrap

    def sink_client_settings(self, sink: TopicSink) -> KafkaSettings:
        """What confluent-kafka connects with for a topic sink (keep_timestamp): `sink_settings`, or plain."""
        from logbroker._kafka.settings import KafkaSettings as Plain

        return self.sink_settings(sink) or Plain(self.sink_bootstrap(sink))

    def sink_settings(self, sink: TopicSink) -> KafkaSettings | None:
        """A topic sink's security: its own, else (writing back to the source's cluster) the source's."""
        if sink.security is not None or sink.bootstrap is not None:
            return security_settings(sink.security, self.sink_bootstrap(sink))
        assert isinstance(self.source, KafkaSource)
        return self.source.kafka_settings()


_TAGS = {"source": {"kafka", "parquet"}, "sinks": {"parquet", "delta", "topic", "console"}}


def _loc(loc: tuple[int | str, ...]) -> list[str]:
    """Drop the union tag pydantic inserts after a discriminated field (source.kafka.x -> source.x)."""
    parts = list(loc)
    if len(parts) > 1 and parts[0] == "source" and parts[1] in _TAGS["source"]:
        del parts[1]
    elif len(parts) > 2 and parts[0] == "sinks" and isinstance(parts[1], int) and parts[2] in _TAGS["sinks"]:
        del parts[2]
    return [str(p) for p in parts]


def _message(exc: ValidationError) -> str:
    errors = exc.errors()
    first = errors[0]
    path = _loc(first["loc"])
    msg = str(first["msg"]).removeprefix("Value error, ")
    kind = first["type"]
    if kind == "union_tag_not_found":
        field = "kind" if path[:1] == ["source"] else "type"
        path, msg = [*path, field], "Field required"
    elif kind == "union_tag_invalid":
        field = "kind" if path[:1] == ["source"] else "type"
        tags = sorted(_TAGS["source" if field == "kind" else "sinks"])
        path, msg = [*path, field], f"must be one of {', '.join(tags)} (got {first['ctx'].get('tag')!r})"
    elif kind == "extra_forbidden":
        msg = "unknown field"
    # A model check may name its field, relative ("@keys: ...") or absolute ("checkpoint: ...").
    rel = re.match(r"^@([\w.]+): (.*)$", msg, re.S)
    if rel:
        path, msg = [*path, rel.group(1)], rel.group(2)
    # A cross-field check may name its own path ("checkpoint: ..."); it then replaces the model's.
    m = re.match(r"^([\w.]+): (.*)$", msg, re.S)
    if m and (not path or m.group(1).split(".")[0] in PipelineSpec.model_fields):
        path, msg = [m.group(1)], m.group(2)
    where = ".".join(path) or "spec"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {msg}{more}"


def load_spec(source: str | os.PathLike[str] | Mapping[str, Any]) -> PipelineSpec:
    """A PipelineSpec from a YAML file path or a mapping; every failure is one `SpecError`."""
    if isinstance(source, Mapping):
        data: Any = dict(source)
    else:
        import yaml

        path = Path(source)
        try:
            data = yaml.safe_load(path.read_text())
        except OSError as exc:
            raise SpecError(f"{path}: cannot read: {exc.strerror or exc}") from exc
        except yaml.YAMLError as exc:
            raise SpecError(f"{path}: not valid YAML: {exc}".replace("\n", " ")) from exc
    if not isinstance(data, Mapping):
        raise SpecError(f"spec: expected a mapping of fields, got {type(data).__name__}")
    try:
        return PipelineSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(_message(exc)) from None
