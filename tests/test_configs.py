"""Configs that change while the broker runs: IncrementalAlterConfigs, AlterConfigs and DescribeConfigs for
topics and for the broker's dynamic layers, asserted on logbroker and on Apache Kafka 4.4 alike (Kafka
applies a change a moment after acknowledging it, so reads poll)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource
from kafka.protocol.admin.configs import AlterConfigsRequest, IncrementalAlterConfigsRequest

from logbroker.protocol import ApiKey, api
from logbroker.protocol.errors import ErrorCode
from logbroker_devtools.client.connection import Connection, parse_bootstrap
from logbroker_devtools.testing.process import BrokerProcess
from support import assert_equal, both_targets, create_topic, eventually, kafka_peer, kafka_tool, read_topic, unique

pytestmark = pytest.mark.timeout(300)

TOPIC, BROKER = ConfigResource.Type.TOPIC, ConfigResource.Type.BROKER
SET, DELETE, APPEND, SUBTRACT = (AlterConfigOpType.SET, AlterConfigOpType.DELETE, AlterConfigOpType.APPEND,
                                 AlterConfigOpType.SUBTRACT)  # fmt: skip


@pytest.fixture(scope="module", params=both_targets())
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A broker of this module's own (broker configs change), both started with STATIC_PROPERTIES (logbroker
    from a server.properties file, as Kafka)."""
    if request.param == "logbroker":
        d = tmp_path_factory.mktemp("configs")
        props = d / "server.properties"
        # transaction.state.log.min.isr: as the Kafka peer's own server.properties (one node).
        props.write_text("".join(f"{k}={v}\n" for k, v in {**STATIC_PROPERTIES,
                                                           "transaction.state.log.min.isr": 1}.items()))  # fmt: skip
        with BrokerProcess(d / "data", extra_args=["--config", str(props)]) as proc:
            yield proc.bootstrap
        return
    with kafka_peer(**STATIC_PROPERTIES) as bootstrap:
        yield bootstrap


# What both brokers of this module are started with: retention checked every 200 ms; a retention and a segment
# size given as Kafka's server.properties often gives them (hours), which DescribeConfigs reports by name.
STATIC_PROPERTIES = {"log.retention.check.interval.ms": 200, "log.retention.hours": 100,
                     "log.segment.bytes": 536870912}  # fmt: skip


def describe(bootstrap: str, rtype: Any, name: str) -> dict[str, Any]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    [fut] = admin.describe_configs([ConfigResource(rtype, name)], request_timeout=30).values()
    return fut.result(30)


def incremental(bootstrap: str, rtype: Any, name: str, ops: list[tuple[str, str | None, Any]],
                validate_only: bool = False) -> None:  # fmt: skip
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = [ConfigEntry(k, v, incremental_operation=op) for k, v, op in ops]
    [fut] = admin.incremental_alter_configs([ConfigResource(rtype, name, incremental_configs=entries)],
                                            validate_only=validate_only, request_timeout=30).values()  # fmt: skip
    fut.result(30)


def value_of(bootstrap: str, topic: str, key: str) -> tuple[str | None, ConfigSource]:
    e = describe(bootstrap, TOPIC, topic)[key]
    return e.value, ConfigSource(e.source)


def test_incremental_set_append_subtract_delete_on_a_topic(target: str) -> None:
    topic = create_topic(target, unique("cfg"), config={"retention.ms": "100000"})
    incremental(target, TOPIC, topic, [("retention.ms", "200000", SET), ("cleanup.policy", "compact", SET),
                                       ("min.cleanable.dirty.ratio", "0.1", SET)])  # fmt: skip

    def applied() -> None:
        assert value_of(target, topic, "retention.ms") == ("200000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
        assert value_of(target, topic, "cleanup.policy") == ("compact", ConfigSource.DYNAMIC_TOPIC_CONFIG)
        assert value_of(target, topic, "min.cleanable.dirty.ratio")[0] == "0.1"

    eventually(applied)
    incremental(target, TOPIC, topic, [("cleanup.policy", "delete", APPEND)])
    eventually(lambda: assert_equal(value_of(target, topic, "cleanup.policy")[0], "compact,delete"))
    incremental(target, TOPIC, topic, [("cleanup.policy", "compact", SUBTRACT), ("retention.ms", None, DELETE)])

    def reverted() -> None:
        assert value_of(target, topic, "cleanup.policy")[0] == "delete"
        assert value_of(target, topic, "retention.ms") == ("360000000", ConfigSource.DEFAULT_CONFIG)

    eventually(reverted)
    incremental(target, TOPIC, topic, [("retention.ms", "300000", SET)], validate_only=True)
    time.sleep(0.5)
    assert value_of(target, topic, "retention.ms") == ("360000000", ConfigSource.DEFAULT_CONFIG)


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_alter_configs_replaces_every_override(target: str) -> None:
    topic = create_topic(target, unique("cfg"), config={"retention.ms": "100000", "segment.ms": "200000"})
    admin = AdminClient({"bootstrap.servers": target})
    [fut] = admin.alter_configs([ConfigResource(TOPIC, topic, set_config={"max.message.bytes": "50000"})]).values()
    fut.result(30)

    def replaced() -> None:
        overrides = {k for k, e in describe(target, TOPIC, topic).items()
                     if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}  # fmt: skip
        assert overrides == {"max.message.bytes"}

    eventually(replaced)


def test_every_kafka_topic_config_is_described(target: str) -> None:
    """The full set Kafka 4.4 reports for a topic, each with the type Kafka gives it."""
    topic = create_topic(target, unique("cfg"))
    configs = describe(target, TOPIC, topic)
    expected = {"cleanup.policy", "compression.type", "delete.retention.ms", "file.delete.delay.ms", "flush.messages",
                "flush.ms", "follower.replication.throttled.replicas", "index.interval.bytes",
                "leader.replication.throttled.replicas", "local.retention.bytes", "local.retention.ms",
                "max.compaction.lag.ms", "max.message.bytes", "message.timestamp.after.max.ms",
                "message.timestamp.before.max.ms", "message.timestamp.type", "min.cleanable.dirty.ratio",
                "min.compaction.lag.ms", "min.insync.replicas", "preallocate", "remote.storage.enable",
                "retention.bytes", "retention.ms", "segment.bytes", "segment.index.bytes", "segment.jitter.ms",
                "segment.ms", "unclean.leader.election.enable"}  # fmt: skip
    assert expected <= set(configs)
    assert configs["min.cleanable.dirty.ratio"].value == "0.5"
    assert configs["delete.retention.ms"].value == "86400000"
    assert configs["cleanup.policy"].value == "delete"
    # Stored and reported, not refused: configs that mean nothing on one node.
    topic2 = create_topic(target, unique("cfg"), config={"flush.messages": "1", "preallocate": "true",
                                                         "leader.replication.throttled.replicas": "*",
                                                         "min.compaction.lag.ms": "1000"})  # fmt: skip
    c2 = describe(target, TOPIC, topic2)
    assert (c2["flush.messages"].value, c2["preallocate"].value) == ("1", "true")
    assert c2["leader.replication.throttled.replicas"].value == "*"


BAD_TOPIC_OPS = [
    # (what, [(key, operation, value)], error, message)
    ("unknown key", [("foo.bar", 0, "1")], ErrorCode.INVALID_CONFIG, "Unknown topic config name: foo.bar"),
    ("not a number", [("retention.ms", 0, "abc")], ErrorCode.INVALID_CONFIG,
     "Invalid value abc for configuration retention.ms: Not a number of type LONG"),
    ("below the range", [("retention.ms", 0, "-2")], ErrorCode.INVALID_CONFIG,
     "Invalid value -2 for configuration retention.ms: Value must be at least -1"),
    ("above the range", [("min.cleanable.dirty.ratio", 0, "2")], ErrorCode.INVALID_CONFIG,
     "Invalid value 2.0 for configuration min.cleanable.dirty.ratio: Value must be no more than 1"),
    ("not in the list", [("cleanup.policy", 0, "zip")], ErrorCode.INVALID_CONFIG,
     "Invalid value zip for configuration cleanup.policy: String must be one of: compact, delete"),
    ("append to a non-list", [("retention.ms", 2, "5")], ErrorCode.INVALID_CONFIG,
     "Can't APPEND to key retention.ms because its type is not LIST."),
    ("null value", [("retention.ms", 0, None)], ErrorCode.INVALID_REQUEST,
     "Null value not supported for : retention.ms"),
    ("duplicate key", [("retention.ms", 0, "1"), ("retention.ms", 0, "2")], ErrorCode.INVALID_REQUEST,
     "Error due to duplicate config keys"),
    ("one good one bad", [("retention.ms", 0, "400000"), ("segment.ms", 0, "x")], ErrorCode.INVALID_CONFIG,
     "Invalid value x for configuration segment.ms: Not a number of type LONG"),
    ("tiered storage", [("remote.storage.enable", 0, "true")], ErrorCode.INVALID_CONFIG,
     "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage."),
    ("unknown operation", [("retention.ms", 7, "1")], ErrorCode.UNKNOWN_SERVER_ERROR, None),
]  # fmt: skip


def _iac(conn: Connection, resources: list[tuple[int, str, list[tuple[str, int, str | None]]]]) -> list[Any]:
    R = IncrementalAlterConfigsRequest.AlterConfigsResource
    req = IncrementalAlterConfigsRequest(
        resources=[R(resource_type=rt, resource_name=rn,
                     configs=[R.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in cfgs])
                   for rt, rn, cfgs in resources],
        validate_only=False,
    )  # fmt: skip
    return [(ErrorCode(r.error_code), r.error_message) for r in conn.do(req).responses]


def test_bad_topic_config_changes_get_kafkas_errors_and_change_nothing(target: str) -> None:
    topic = create_topic(target, unique("cfg"))
    with Connection(*parse_bootstrap(target)) as conn:
        for what, ops, error, message in BAD_TOPIC_OPS:
            assert _iac(conn, [(2, topic, ops)]) == [(error, message)], what
        assert _iac(conn, [(2, "nope-" + topic, [("retention.ms", 0, "1")])]) == [
            (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic 'nope-{topic}' does not exist.")
        ]
        assert _iac(conn, [(2, "a/b", [("retention.ms", 0, "1")])]) == [
            (ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name is invalid: 'a/b' contains one or more characters "
             "other than ASCII alphanumerics, '.', '_' and '-'")]  # fmt: skip
        twice = [(2, topic, [("retention.ms", 0, "1")]), (2, topic, [("segment.ms", 0, "2")])]
        assert _iac(conn, twice) == [(ErrorCode.INVALID_REQUEST, "Each resource must appear at most once.")] * 2
        assert _iac(conn, [(99, "1", [("x", 0, "1")])]) == [(ErrorCode.INVALID_REQUEST, "Unknown resource type 99")]
        R = AlterConfigsRequest.AlterConfigsResource
        req = AlterConfigsRequest(resources=[R(resource_type=2, resource_name=topic,
                                               configs=[R.AlterableConfig(name="segment.ms", value=None)])],
                                  validate_only=False)  # fmt: skip
        [r] = conn.do(req).responses
        assert (r.error_code, r.error_message) == (
            ErrorCode.INVALID_REQUEST,
            "Null value not supported for : segment.ms",
        )
    time.sleep(0.5)
    overrides = {k for k, e in describe(target, TOPIC, topic).items() if e.source == 1}
    assert overrides == set()


def test_bad_broker_config_changes_get_kafkas_errors(target: str) -> None:
    with Connection(*parse_bootstrap(target)) as conn:
        cases = [
            ("1", [("log.dirs", 0, "/tmp/x")], ErrorCode.INVALID_REQUEST,
             "Cannot update these configs dynamically: [log.dirs]"),
            ("1", [("log.retention.ms", 0, "x")], ErrorCode.INVALID_REQUEST,
             "Invalid value x for configuration log.retention.ms: Not a number of type LONG"),
            ("7", [("log.retention.ms", 0, "1")], ErrorCode.INVALID_REQUEST,
             "Unexpected broker id, expected 1, but received 7"),
            ("x", [("log.retention.ms", 0, "1")], ErrorCode.INVALID_REQUEST,
             "Node id must be an integer, but it is: x"),
        ]  # fmt: skip
        for node, ops, error, message in cases:
            assert _iac(conn, [(4, node, ops)]) == [(error, message)], ops


def test_broker_dynamic_defaults_reach_topics_without_overrides(target: str) -> None:
    plain = create_topic(target, unique("cfg"))
    own = create_topic(target, unique("cfg"), config={"retention.ms": "123456"})
    incremental(target, BROKER, "1", [("log.retention.ms", "654321", SET)])
    with Connection(*parse_bootstrap(target)) as conn:  # librdkafka cannot name the cluster-wide default ""
        assert _iac(conn, [(4, "", [("log.cleaner.min.compaction.lag.ms", 0, "5000")])]) == [(ErrorCode.NONE, None)]
    try:

        def applied() -> None:
            assert value_of(target, plain, "retention.ms") == ("654321", ConfigSource.DYNAMIC_BROKER_CONFIG)
            assert value_of(target, own, "retention.ms") == ("123456", ConfigSource.DYNAMIC_TOPIC_CONFIG)
            assert value_of(target, plain, "min.compaction.lag.ms") == (
                "5000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)  # fmt: skip
            b = describe(target, BROKER, "1")
            assert (b["log.retention.ms"].value, b["log.retention.ms"].source) == ("654321", 2)
            assert not b["log.retention.ms"].is_read_only and b["log.dirs"].is_read_only

        eventually(applied)
    finally:
        incremental(target, BROKER, "1", [("log.retention.ms", None, DELETE)])
        with Connection(*parse_bootstrap(target)) as conn:
            _iac(conn, [(4, "", [("log.cleaner.min.compaction.lag.ms", 1, None)])])
    default = ("360000000", ConfigSource.DEFAULT_CONFIG)
    eventually(lambda: assert_equal(value_of(target, plain, "retention.ms"), default))


def _produce(bootstrap: str, topic: str, value: bytes, ts: int | None = None) -> None:
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "message.max.bytes": 10_000_000})
    err: list[Any] = []
    p.produce(topic, value=value, timestamp=ts or 0, on_delivery=lambda e, _m: err.append(e))
    assert p.flush(30) == 0
    if err[0] is not None:
        raise ck.KafkaException(err[0])


def _rows(bootstrap: str, rtype: Any, name: str, keys: list[str]) -> dict[str, tuple[Any, ...]]:
    """(value, source, read_only, sensitive, synonyms) per key, read raw: the admin clients key synonyms by
    name, which hides a name listed at two layers."""
    DC = api(ApiKey.DescribeConfigs).request
    res = DC.DescribeConfigsResource(resource_type=rtype.value, resource_name=name, configuration_keys=keys)
    with Connection(*parse_bootstrap(bootstrap)) as conn:
        [r] = conn.do(DC(resources=[res], include_synonyms=True, include_documentation=False), 4).results
    assert r.error_code == 0, r
    return {c.name: (c.value, c.config_source, c.read_only, c.is_sensitive,
                     [(s.name, s.value, s.source) for s in c.synonyms]) for c in r.configs}  # fmt: skip


def test_broker_configs_are_described_layer_by_layer_as_kafka_does(target: str) -> None:
    """Sources and synonyms as Kafka's ConfigHelper gives them: the synonym group layer by layer (dynamic per
    broker, cluster-wide, static, default), from the entry's own name on; a static value keeps its default
    beside it; log.retention.ms set nowhere lists nothing though log.retention.hours is in the file."""
    S, D, DB, DD = 4, 5, 2, 3
    keys = ["log.retention.ms", "log.retention.hours", "log.segment.bytes", "log.roll.ms", "log.roll.hours",
            "log.cleaner.threads", "compression.type", "log.retention.check.interval.ms"]  # fmt: skip
    assert _rows(target, BROKER, "1", keys) == {
        "log.retention.ms": (None, D, False, False, []),
        "log.retention.hours": ("100", S, True, False, [("log.retention.hours", "100", S),
                                                        ("log.retention.hours", "168", D)]),
        "log.segment.bytes": ("536870912", S, False, False, [("log.segment.bytes", "536870912", S),
                                                             ("log.segment.bytes", "1073741824", D)]),
        "log.roll.ms": (None, D, False, False, []),
        "log.roll.hours": ("168", D, True, False, [("log.roll.hours", "168", D)]),
        "log.cleaner.threads": ("1", D, False, False, [("log.cleaner.threads", "1", D)]),
        "compression.type": ("producer", D, False, False, [("compression.type", "producer", D)]),
        "log.retention.check.interval.ms": ("200", S, True, False, [("log.retention.check.interval.ms", "200", S),
                                                                    ("log.retention.check.interval.ms", "300000", D)]),
    }  # fmt: skip
    topic = create_topic(target, unique("layers"))
    assert _rows(target, TOPIC, topic, ["retention.ms", "segment.bytes", "segment.ms"]) == {
        "retention.ms": ("360000000", D, False, False, []),
        "segment.bytes": ("536870912", S, False, False, [("log.segment.bytes", "536870912", S),
                                                         ("log.segment.bytes", "1073741824", D)]),
        "segment.ms": ("604800000", D, False, False, []),
    }  # fmt: skip
    incremental(target, BROKER, "1", [("log.cleaner.threads", "2", SET)])
    with Connection(*parse_bootstrap(target)) as conn:  # the cluster-wide layer (name ""), which librdkafka refuses
        assert _iac(conn, [(4, "", [("log.retention.ms", 0, "7200000")])]) == [(ErrorCode.NONE, None)]
    try:
        want = {
            "log.retention.ms": ("7200000", DD, False, False, [("log.retention.ms", "7200000", DD),
                                                               ("log.retention.hours", "100", S),
                                                               ("log.retention.hours", "168", D)]),
            "log.cleaner.threads": ("2", DB, False, False, [("log.cleaner.threads", "2", DB),
                                                            ("log.cleaner.threads", "1", D)]),
        }  # fmt: skip
        eventually(lambda: assert_equal(_rows(target, BROKER, "1", list(want)), want))
        eventually(lambda: assert_equal(_rows(target, TOPIC, topic, ["retention.ms"])["retention.ms"][:2],
                                        ("7200000", DD)))  # fmt: skip
    finally:
        incremental(target, BROKER, "1", [("log.cleaner.threads", None, DELETE)])
        with Connection(*parse_bootstrap(target)) as conn:
            _iac(conn, [(4, "", [("log.retention.ms", 1, None)])])


def test_a_broker_resource_naming_another_broker_is_refused(target: str) -> None:
    DC = api(ApiKey.DescribeConfigs).request
    with Connection(*parse_bootstrap(target)) as conn:
        resources = [DC.DescribeConfigsResource(resource_type=4, resource_name=n, configuration_keys=None)
                     for n in ("7", "x")]  # fmt: skip
        got = conn.do(DC(resources=resources, include_synonyms=False, include_documentation=False))
    assert [(r.error_code, r.error_message) for r in got.results] == [
        (ErrorCode.INVALID_REQUEST, "Unexpected broker id, expected 1 or empty string, but received 7"),
        (ErrorCode.INVALID_REQUEST, "Broker id must be an integer, but it is: x"),
    ]


def test_the_coordinators_topics_carry_kafkas_overrides(target: str) -> None:
    """__consumer_offsets and __transaction_state are made with the topic configs Kafka gives them (compacted,
    their own segment size, the transaction log uncompressed), reported as the topic's own overrides."""
    group = unique("g")
    c = ck.Consumer({"bootstrap.servers": target, "group.id": group})
    c.subscribe([create_topic(target, unique("offsets"))])
    c.poll(2)
    c.close()
    p = ck.Producer({"bootstrap.servers": target, "transactional.id": unique("tid")})
    p.init_transactions(30)

    def overrides(topic: str) -> dict[str, str]:
        entries = describe(target, TOPIC, topic).values()
        return {e.name: e.value for e in entries if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}

    expected_offsets = {"cleanup.policy": "compact", "compression.type": "producer", "segment.bytes": "104857600"}
    expected_txn = {"cleanup.policy": "compact", "compression.type": "uncompressed", "min.insync.replicas": "1",
                    "segment.bytes": "104857600", "unclean.leader.election.enable": "false"}  # fmt: skip
    assert_equal(overrides("__consumer_offsets"), expected_offsets)
    assert_equal(overrides("__transaction_state"), expected_txn)


@pytest.mark.kafka_side_in_full_tier  # the Kafka run: 19-22 s, in --full (CI budget)
def test_changes_apply_to_the_running_logs(target: str) -> None:
    """A lower max.message.bytes refuses the next large batch; a lower retention.ms deletes old segments."""
    topic = create_topic(target, unique("live"), config={"segment.ms": "100"})
    old = int(time.time() * 1000) - 600_000
    _produce(target, topic, b"x" * 200_000, ts=old)
    incremental(target, TOPIC, topic, [("max.message.bytes", "100000", SET)])

    def refused() -> None:
        with pytest.raises(ck.KafkaException) as exc:
            _produce(target, topic, b"y" * 200_000)
        assert exc.value.args[0].code() == ck.KafkaError.MSG_SIZE_TOO_LARGE

    eventually(refused)
    _produce(target, topic, b"old", ts=old)
    time.sleep(0.3)
    _produce(target, topic, b"new")  # rolls the segment that holds the old record
    incremental(target, TOPIC, topic, [("retention.ms", "300000", SET)])
    eventually(lambda: assert_equal([m.value() for m in read_topic(target, topic)], [b"new"]), timeout=60)


def test_dynamic_configs_survive_kill_9(tmp_path: Any) -> None:
    """Acknowledged config changes are durable: topic overrides and broker layers alike."""
    proc = BrokerProcess(tmp_path / "data")
    with proc:
        topic = create_topic(proc.bootstrap, unique("dur"))
        incremental(proc.bootstrap, TOPIC, topic, [("retention.ms", "777777", SET), ("cleanup.policy", "compact", SET)])
        incremental(proc.bootstrap, BROKER, "1", [("log.segment.bytes", "5000000", SET)])
        with Connection(*parse_bootstrap(proc.bootstrap)) as conn:
            assert _iac(conn, [(4, "", [("log.retention.bytes", 0, "9999999")])]) == [(ErrorCode.NONE, None)]
        proc.kill()
        proc.start()
        c = describe(proc.bootstrap, TOPIC, topic)
        assert (c["retention.ms"].value, c["cleanup.policy"].value) == ("777777", "compact")
        assert (c["segment.bytes"].value, c["segment.bytes"].source) == ("5000000", 2)
        assert (c["retention.bytes"].value, c["retention.bytes"].source) == ("9999999", 3)


def test_a_coordinator_topic_made_without_overrides_gets_them_at_start(tmp_path: Any) -> None:
    """A data dir whose __consumer_offsets has none of Kafka's overrides (made by an older logbroker, or all
    removed) gets them at the next start; one an operator changed is left alone."""
    proc = BrokerProcess(tmp_path / "data")
    with proc:
        c = ck.Consumer({"bootstrap.servers": proc.bootstrap, "group.id": unique("g")})
        c.subscribe([create_topic(proc.bootstrap, unique("t"))])
        c.poll(1)
        c.close()
        incremental(proc.bootstrap, TOPIC, "__consumer_offsets",
                    [(k, None, AlterConfigOpType.DELETE) for k in ("cleanup.policy", "compression.type",
                                                                    "segment.bytes")])  # fmt: skip
        assert value_of(proc.bootstrap, "__consumer_offsets", "cleanup.policy")[1] != ConfigSource.DYNAMIC_TOPIC_CONFIG
        proc.stop()
        proc.start()
        assert value_of(proc.bootstrap, "__consumer_offsets", "cleanup.policy") == (
            "compact", ConfigSource.DYNAMIC_TOPIC_CONFIG)  # fmt: skip
        incremental(proc.bootstrap, TOPIC, "__consumer_offsets", [("cleanup.policy", None, AlterConfigOpType.DELETE)])
        proc.stop()
        proc.start()
        kept = value_of(proc.bootstrap, "__consumer_offsets", "cleanup.policy")
        assert kept == ("delete", ConfigSource.DEFAULT_CONFIG)


def test_min_insync_replicas_is_capped_at_the_replication_factor(target: str) -> None:
    """Kafka 4 checks acks=all against min(min.insync.replicas, replicas): one node always satisfies it."""
    topic = create_topic(target, unique("isr"), config={"min.insync.replicas": "3"})
    p = ck.Producer({"bootstrap.servers": target, "acks": "all", "message.timeout.ms": 10000})
    p.produce(topic, value=b"all")
    assert p.flush(30) == 0
    assert [m.value() for m in read_topic(target, topic)] == [b"all"]
    assert value_of(target, topic, "min.insync.replicas") == ("3", ConfigSource.DYNAMIC_TOPIC_CONFIG)


def test_broker_logger_levels_change_live(target: str) -> None:
    """KIP-412: `kafka-configs --entity-type broker-loggers` sets a logger's level; Kafka's refusals."""
    from kafka.protocol.admin.configs import DescribeConfigsRequest as DC

    def levels(conn: Connection) -> dict[str, str]:
        D = DC.DescribeConfigsResource
        req = DC(resources=[D(resource_type=8, resource_name="1", configuration_keys=None)], include_synonyms=False,
                 include_documentation=False)  # fmt: skip
        [r] = conn.do(req).results
        assert r.error_code == 0
        return {e.name: e.value for e in r.configs}

    with Connection(*parse_bootstrap(target)) as conn:
        assert levels(conn)["root"] == "INFO"
        assert _iac(conn, [(8, "1", [("root", 0, "DEBUG")])]) == [(ErrorCode.NONE, None)]
        try:
            eventually(lambda: assert_equal(levels(conn)["root"], "DEBUG"))
            cases = [
                ("1", [("root", 0, "LOUD")], ErrorCode.INVALID_CONFIG, "Cannot set the log level of root to LOUD as "
                 "it is not a supported log level. Valid log levels are DEBUG, ERROR, FATAL, INFO, TRACE, WARN"),
                ("1", [("no.such.logger", 0, "DEBUG")], ErrorCode.INVALID_CONFIG,
                 "Logger no.such.logger does not exist!"),
                ("1", [("root", 1, None)], ErrorCode.INVALID_REQUEST,
                 "Removing the log level of the root logger is not allowed"),
                ("1", [("root", 2, "DEBUG")], ErrorCode.INVALID_REQUEST,
                 "APPEND operation is not allowed for the BROKER_LOGGER resource"),
                ("7", [("root", 0, "DEBUG")], ErrorCode.INVALID_REQUEST,
                 "Unexpected node id. Expected 1, but received 7"),
                ("", [("root", 0, "DEBUG")], ErrorCode.INVALID_REQUEST, "Node id must be an integer, but it is: "),
            ]  # fmt: skip
            for node, ops, error, message in cases:
                assert _iac(conn, [(8, node, ops)]) == [(error, message)], ops
        finally:
            _iac(conn, [(8, "1", [("root", 0, "INFO")])])
        eventually(lambda: assert_equal(levels(conn)["root"], "INFO"))


def _kafka_configs(bootstrap: str, *args: str) -> Any:
    return kafka_tool("kafka-configs", bootstrap, *args)


def test_kafka_configs_tool_alters_and_describes(target: str) -> None:
    """The operator's route: Kafka's own kafka-configs (the Java admin client) on topics and brokers."""
    topic = create_topic(target, unique("tool"))
    entity = ("--entity-type", "topics", "--entity-name", topic)
    r = _kafka_configs(
        target, "--alter", *entity, "--add-config", "retention.ms=4321000,cleanup.policy=[compact,delete]"
    )
    assert r.returncode == 0 and f"Completed updating config for topic {topic}." in r.stdout, r.output

    def described() -> None:
        out = _kafka_configs(target, "--describe", *entity).stdout
        assert "retention.ms=4321000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=4321000" in out, out
        assert "cleanup.policy=compact,delete sensitive=false" in out, out

    eventually(described)
    everything = _kafka_configs(target, "--describe", "--all", *entity).stdout
    assert (
        "min.cleanable.dirty.ratio=0.5 sensitive=false synonyms={DEFAULT_CONFIG:log.cleaner.min.cleanable.ratio=0.5}"
        in everything
    )
    r = _kafka_configs(target, "--alter", *entity, "--add-config", "no.such.config=1")
    assert r.returncode != 0 and "InvalidConfigurationException: Unknown topic config name: no.such.config" in r.output
    r = _kafka_configs(target, "--alter", "--entity-type", "brokers", "--entity-name", "1", "--add-config",
                       "log.cleaner.backoff.ms=5000")  # fmt: skip
    assert r.returncode == 0 and "Completed updating config for broker 1." in r.stdout, r.output
    try:

        def broker_described() -> None:
            out = _kafka_configs(target, "--describe", "--entity-type", "brokers", "--entity-name", "1").stdout
            assert "log.cleaner.backoff.ms=5000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:" in out, out

        eventually(broker_described)
    finally:
        _kafka_configs(target, "--alter", "--entity-type", "brokers", "--entity-name", "1", "--delete-config",
                       "log.cleaner.backoff.ms")  # fmt: skip
    r = _kafka_configs(target, "--alter", *entity, "--delete-config", "retention.ms")
    assert r.returncode == 0, r.output
    default = ("360000000", ConfigSource.DEFAULT_CONFIG)
    eventually(lambda: assert_equal(value_of(target, topic, "retention.ms"), default))


# Broker configs whose default is logbroker's own (what is in force on it), not Kafka's: its node id, its data
# directory, listening on loopback, the SASL mechanisms it has (no GSSAPI), PEM key stores (no JKS), the faster
# group start and lower minimum session, and the connection cap descriptors allow.
OWN_DEFAULTS = {"broker.id", "node.id", "log.dirs", "listeners", "sasl.enabled.mechanisms", "ssl.keystore.type",
                "ssl.truststore.type", "group.initial.rebalance.delay.ms", "group.min.session.timeout.ms",
                "max.connections"}  # fmt: skip


def test_every_broker_config_kafka_lists_is_listed(target: str, request: pytest.FixtureRequest) -> None:
    """DescribeConfigs of the broker lists every config Kafka 4.4 lists (kafka_broker_configs.json, measured
    from it; on the Kafka peer this checks the table is still Kafka's), with Kafka's type and default; the
    dynamic ones are those Kafka changes live, less those logbroker cannot honour (read-only there)."""
    from logbroker.broker.configs import BROKER_CONFIGS, KAFKA_BROKER_CONFIGS

    DC = api(ApiKey.DescribeConfigs).request
    res = DC.DescribeConfigsResource(resource_type=4, resource_name="1", configuration_keys=None)
    with Connection(*parse_bootstrap(target)) as conn:
        [r] = conn.do(DC(resources=[res], include_synonyms=True, include_documentation=False), 4).results
    rows = {e.name: e for e in r.configs}
    assert not set(KAFKA_BROKER_CONFIGS) - set(rows)
    on_kafka = request.node.callspec.params["target"] == "kafka"
    wrong = []
    for name, kafka in KAFKA_BROKER_CONFIGS.items():
        e = rows[name]
        default = next((s.value for s in e.synonyms if s.source == 5 and s.name == name), None)
        dynamic = not e.read_only
        if e.config_type != kafka["type"]:
            wrong.append((name, "type", e.config_type, kafka["type"]))
        if (on_kafka or name not in OWN_DEFAULTS) and default != kafka["default"]:
            wrong.append((name, "default", default, kafka["default"]))
        if on_kafka and dynamic != kafka["dynamic"]:
            wrong.append((name, "dynamic", dynamic, kafka["dynamic"]))
        # logbroker: dynamic only where it applies a change, and then where Kafka allows one too
        if not on_kafka and (dynamic != BROKER_CONFIGS[name].dynamic or (dynamic and not kafka["dynamic"])):
            wrong.append((name, "dynamic", dynamic, kafka["dynamic"]))
    assert not wrong
