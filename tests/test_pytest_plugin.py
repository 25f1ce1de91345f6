"""The pytest plugin users get with `pip install logbroker` (entry point `pytest11`), run as a user runs it:
pytest's own `pytester` starts pytest in a child process on a test file that uses the fixtures. The same
file passes on the embedded broker, on Apache Kafka 4.4 through --kafka-bootstrap, and on a SASL-secured
logbroker through --kafka-command-config; the topics the tests made are gone afterwards."""

from __future__ import annotations

import re
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from support import AUTHZ_USERS, authz_logbroker, shared_kafka

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.timeout(240)

USER_TESTS = """
import pytest
from confluent_kafka import TopicPartition


@pytest.mark.kafka_topic(partitions=3, config={"cleanup.policy": "compact"})
def test_round_trip(kafka_topic, kafka_producer, kafka_consumer, kafka_admin, kafka_broker):
    print("TOPIC", kafka_topic, "EXTERNAL", kafka_broker.external)
    md = kafka_admin.list_topics(kafka_topic, timeout=10).topics[kafka_topic]
    assert sorted(md.partitions) == [0, 1, 2]
    for i in range(30):
        kafka_producer.produce(kafka_topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % 3)
    assert kafka_producer.flush(30) == 0
    kafka_consumer.assign([TopicPartition(kafka_topic, p, 0) for p in range(3)])
    got = {}
    while len(got) < 30:
        msg = kafka_consumer.poll(10)
        assert msg is not None and msg.error() is None, msg and msg.error()
        got[msg.key()] = (msg.value(), msg.partition())
    assert got == {b"k%d" % i: (b"v%d" % i, i % 3) for i in range(30)}


def test_more_topics(kafka_topic_factory, kafka_topic, kafka_admin):
    other = kafka_topic_factory(partitions=2)
    print("TOPIC", kafka_topic, "TOPIC", other)
    assert other != kafka_topic
    listed = kafka_admin.list_topics(timeout=10).topics
    assert len(listed[other].partitions) == 2 and len(listed[kafka_topic].partitions) == 1
"""


def run(pytester: pytest.Pytester, *args: str) -> Any:
    pytester.makepyfile(test_user=USER_TESTS)
    return pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider", "-W", "error", *args, timeout=180)


def topics_made(result: Any) -> list[str]:
    return re.findall(r"TOPIC (\S+)", result.stdout.str())


def assert_gone(bootstrap: str, names: list[str], config: dict[str, Any] | None = None) -> None:
    """The plugin deleted every topic the tests made (a shared cluster is left as it was found)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **(config or {})})
    left = set(admin.list_topics(timeout=10).topics) & set(names)
    assert not left, f"not deleted: {left}"


def test_the_embedded_broker_serves_a_user_suite_one_per_xdist_worker(pytester: pytest.Pytester) -> None:
    """Every worker of `pytest -n 2` runs the whole suite (--dist each) on an embedded broker of its own."""
    pytester.makepyfile(
        test_where="""
def test_where(kafka_bootstrap, kafka_broker, worker_id):
    print("WORKER", worker_id, kafka_bootstrap, kafka_broker.external)
"""
    )
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-W", "error", "-n", "2", "--dist", "each",
                                           "-rP", timeout=180)  # fmt: skip
    result.assert_outcomes(passed=6)
    out = result.stdout.str()
    by_worker = dict((w, (b, ext)) for w, b, ext in re.findall(r"WORKER (gw\d) (\S+) (\w+)", out))
    assert sorted(by_worker) == ["gw0", "gw1"] and len({b for b, _ in by_worker.values()}) == 2, by_worker
    assert {ext for _, ext in by_worker.values()} == {"False"}
    assert len(set(topics_made(result))) == 6


def test_the_same_suite_against_apache_kafka(pytester: pytest.Pytester) -> None:
    kafka = shared_kafka()
    result = run(pytester, f"--kafka-bootstrap={kafka.bootstrap}")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([f"kafka: external cluster at {kafka.bootstrap}"])
    assert "EXTERNAL True" in result.stdout.str()
    assert_gone(kafka.bootstrap, topics_made(result))


def test_a_secured_cluster_through_a_command_config(pytester: pytest.Pytester, tmp_path: Any) -> None:
    props = tmp_path / "client.properties"
    props.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="alice" password="{AUTHZ_USERS["alice"]}";\n'
    )
    with authz_logbroker(tmp_path / "data", super_users=("User:alice",)) as broker:
        result = run(pytester, f"--kafka-bootstrap={broker.sasl_bootstrap}", f"--kafka-command-config={props}")
        result.assert_outcomes(passed=2)
        alice = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "alice",
                 "sasl.password": AUTHZ_USERS["alice"]}  # fmt: skip
        # (a SASL listener closes a client that does not log in: passing means the config was applied)
        assert_gone(broker.sasl_bootstrap, topics_made(result), alice)


def test_embedded_settings_from_the_ini_file_and_bad_ones_refused(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nlogbroker_settings =\n    num_partitions=4\n    auto.create.topics.enable=true\n")
    pytester.makepyfile(
        test_auto="""
from confluent_kafka import Producer

def test_auto_created_with_the_ini_partitions(kafka_config):
    p = Producer(kafka_config)
    md = None
    for _ in range(50):
        md = p.list_topics("auto-made", timeout=10).topics["auto-made"]
        if md.error is None and md.partitions:
            break
    assert len(md.partitions) == 4
"""
    )
    pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120).assert_outcomes(passed=1)
    pytester.makeini("[pytest]\nlogbroker_settings =\n    num_partitions=none\n")
    bad = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)
    assert bad.ret != 0
    bad.stdout.fnmatch_lines(["*logbroker_settings*num_partitions*"])


def test_the_readme_example_passes(pytester: pytest.Pytester) -> None:
    """The README's example test and ini settings, as a user copies them."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = text[text.index("## Testing your code: the pytest plugin") :]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    ini = re.search(r"```ini\n(.*?)```", section, re.S)
    assert code is not None and ini is not None
    pytester.makefile(".ini", pytest=ini[1])
    pytester.makepyfile(test_readme=code[1])
    pytester.runpytest_subprocess("-p", "no:cacheprovider", "-W", "error", timeout=120).assert_outcomes(passed=1)
