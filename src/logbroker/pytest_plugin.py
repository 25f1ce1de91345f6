"""pytest plugin: a real Kafka for a test suite, with nothing to install but logbroker.

Loaded through the ``pytest11`` entry point. By default each test session (each xdist worker) starts an
embedded broker on a thread and a temporary directory: the real protocol on loopback, in well under a
second, instead of a container or a mock. ``--kafka-bootstrap HOST:PORT`` runs the same tests against a
real cluster (``--kafka-command-config`` for its security settings, Kafka's client properties).

Fixtures: ``kafka_bootstrap``, ``kafka_config`` (confluent-kafka properties), ``kafka_admin``,
``kafka_topic`` (a fresh topic per test; ``@pytest.mark.kafka_topic(partitions=3, config={...})``),
``kafka_topic_factory``, ``kafka_producer``, ``kafka_consumer`` and ``kafka_broker`` (where they point).
Topics a test made are deleted after it (``--kafka-keep-topics`` keeps them), so a suite leaves a shared
cluster as it found it.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pytest

BOOTSTRAP_ENV = "LOGBROKER_KAFKA_BOOTSTRAP"
_TOPIC_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
# A topic name may be 249 characters; the test's name is cut to leave room for the unique suffix.
_NAME_ROOM = 200


@dataclass(frozen=True)
class KafkaTarget:
    """Where the session's tests point: the embedded broker (``embedded`` set) or an external cluster."""

    bootstrap: str
    settings: Any  # logbroker._kafka.KafkaSettings: every fixture's client is built from it
    embedded: Any = None  # logbroker.embedded.EmbeddedBroker when the plugin started one

    @property
    def config(self) -> dict[str, Any]:
        """confluent-kafka properties reaching it (bootstrap and security)."""
        from logbroker._kafka import librdkafka_config

        return librdkafka_config(self.settings)

    @property
    def external(self) -> bool:
        return self.embedded is None

    def describe(self) -> str:
        if self.embedded is None:
            return f"external cluster at {self.bootstrap}"
        return f"embedded logbroker at {self.bootstrap} (data in {self.embedded.settings.data_dir})"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("logbroker", "Kafka for tests (logbroker)")
    group.addoption(
        "--kafka-bootstrap",
        default=os.environ.get(BOOTSTRAP_ENV) or None,
        metavar="HOST:PORT[,...]",
        help=f"run against this Kafka cluster instead of an embedded logbroker (env {BOOTSTRAP_ENV})",
    )
    group.addoption(
        "--kafka-command-config",
        default=None,
        metavar="FILE",
        help="client properties for --kafka-bootstrap (security.protocol, sasl.*, ssl.*), Kafka's format",
    )
    group.addoption("--kafka-keep-topics", action="store_true", help="do not delete the topics tests made")
    parser.addini(
        "logbroker_settings",
        type="linelist",
        default=[],
        help="settings of the embedded broker, one `name=value` per line (`logbroker config list` names them)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "kafka_topic(partitions=1, config=None, replication=-1): the topic the kafka_topic fixture makes",
    )


def pytest_report_header(config: pytest.Config) -> str:
    bootstrap = config.getoption("--kafka-bootstrap")
    return f"kafka: {'external cluster at ' + bootstrap if bootstrap else 'embedded logbroker per session'}"


def _embedded_settings(lines: list[str]) -> dict[str, Any]:
    """The ini lines as broker settings: logbroker's names (`num_partitions`) or Kafka's broker properties
    (`auto.create.topics.enable`), as a config file takes them. Tests need no fsync (the data dir is thrown
    away) nor a group's initial rebalance delay; both can be set back."""
    from logbroker.config import BrokerSettings
    from logbroker.kafka_properties import PropertiesError, load_properties

    fields = frozenset(BrokerSettings.model_fields)
    settings: dict[str, Any] = {"fsync": "never", "group_initial_rebalance_delay_ms": 0}
    kafka_names: list[str] = []
    for line in lines:
        name, sep, value = line.partition("=")
        if not sep or not name.strip():
            raise pytest.UsageError(f"logbroker_settings: {line!r} is not name=value")
        if (field := name.strip().replace("-", "_")) in fields:
            settings[field] = value.strip()
        else:
            kafka_names.append(line)
    try:
        settings.update(load_properties("\n".join(kafka_names), "logbroker_settings", fields).values)
    except PropertiesError as exc:
        raise pytest.UsageError(str(exc)) from None
    return settings


def _client_settings(bootstrap: str, command_config: str | None) -> Any:
    from logbroker._kafka.settings import SecurityConfigError, from_properties, read_properties

    props: dict[str, str] = {}
    if command_config:
        try:
            props = read_properties(command_config)
        except OSError as exc:
            raise pytest.UsageError(f"--kafka-command-config: {exc}") from None
    try:
        return from_properties(props, bootstrap_servers=bootstrap)
    except (SecurityConfigError, ValueError) as exc:
        raise pytest.UsageError(f"--kafka-command-config: {exc}") from None


@pytest.fixture(scope="session")
def kafka_broker(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaTarget]:
    """The session's Kafka: an embedded logbroker, or the cluster of --kafka-bootstrap."""
    bootstrap = pytestconfig.getoption("--kafka-bootstrap")
    command_config = pytestconfig.getoption("--kafka-command-config")
    if bootstrap:
        yield KafkaTarget(bootstrap, _client_settings(bootstrap, command_config))
        return
    if command_config:
        raise pytest.UsageError("--kafka-command-config applies to --kafka-bootstrap only")
    from logbroker.embedded import EmbeddedBroker

    data = tmp_path_factory.mktemp("logbroker")
    try:
        broker = EmbeddedBroker(data, **_embedded_settings(pytestconfig.getini("logbroker_settings")))
    except ValueError as exc:  # ConfigError: a value the settings refuse, named
        raise pytest.UsageError(f"logbroker_settings: {exc}") from None
    with broker:
        yield KafkaTarget(broker.bootstrap, _client_settings(broker.bootstrap, None), broker)


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_broker: KafkaTarget) -> str:
    """``bootstrap.servers`` of the session's Kafka."""
    return kafka_broker.bootstrap


@pytest.fixture
def kafka_config(kafka_broker: KafkaTarget) -> dict[str, Any]:
    """confluent-kafka properties reaching the session's Kafka (bootstrap and security): a fresh dict per
    test, to extend with a client's own settings."""
    return kafka_broker.config


@pytest.fixture(scope="session")
def kafka_admin(kafka_broker: KafkaTarget) -> Any:
    from logbroker import _kafka

    return _kafka.admin(kafka_broker.settings)


def _topic_name(node: pytest.Item | None) -> str:
    base = _TOPIC_CHARS.sub("-", node.name if node is not None else "topic").strip("-.") or "topic"
    return f"test-{base[:_NAME_ROOM]}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def kafka_topic_factory(
    request: pytest.FixtureRequest, kafka_broker: KafkaTarget, kafka_admin: Any
) -> Iterator[Callable[..., str]]:
    """``make(partitions=1, config=None, replication=-1, name=None) -> name``: a new topic, created and
    ready (every partition led and answering) before it returns; deleted after the test."""
    from logbroker._kafka import TopicSpec, ensure_topics

    made: list[str] = []

    def make(partitions: int = 1, config: Mapping[str, str] | None = None, replication: int = -1,
             name: str | None = None) -> str:  # fmt: skip
        topic = name or _topic_name(request.node)
        spec = TopicSpec(topic, partitions, replication, {k: str(v) for k, v in (config or {}).items()})
        ensure_topics(kafka_broker.settings, [spec], admin=kafka_admin)
        made.append(topic)
        return topic

    yield make
    if made and not request.config.getoption("--kafka-keep-topics"):
        futures = kafka_admin.delete_topics(made, operation_timeout=30)
        for future in futures.values():
            try:
                future.result(30)
            except Exception:  # a topic the test deleted itself, or a cluster gone: not the test's failure
                pass


@pytest.fixture
def kafka_topic(request: pytest.FixtureRequest, kafka_topic_factory: Callable[..., str]) -> str:
    """A fresh topic for this test (one partition unless ``@pytest.mark.kafka_topic`` says otherwise)."""
    marker = request.node.get_closest_marker("kafka_topic")
    kwargs = dict(marker.kwargs) if marker is not None else {}
    if marker is not None and marker.args:
        kwargs.setdefault("partitions", marker.args[0])
    return kafka_topic_factory(**kwargs)


@pytest.fixture
def kafka_producer(kafka_broker: KafkaTarget) -> Iterator[Any]:
    """A confluent-kafka Producer; what it still holds is flushed after the test."""
    from logbroker import _kafka

    producer = _kafka.producer(kafka_broker.settings)
    yield producer
    producer.flush(30)


@pytest.fixture
def kafka_consumer(kafka_broker: KafkaTarget) -> Iterator[Any]:
    """A confluent-kafka Consumer in a group of its own, reading from the earliest offset; closed after."""
    from logbroker import _kafka

    group = {"group.id": f"test-{uuid.uuid4().hex[:12]}", "auto.offset.reset": "earliest"}
    consumer = _kafka.consumer(kafka_broker.settings, **group)
    yield consumer
    consumer.close()


__all__ = ["BOOTSTRAP_ENV", "KafkaTarget"]
