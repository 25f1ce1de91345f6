"""The admin calls confluent-kafka has no method for, or cannot be trusted with: OffsetDelete (`groups
delete-offsets`, as kafka-consumer-groups --delete-offsets), DescribeLogDirs (the partition sizes `topics
describe` prints) and DescribeUserScramCredentials (librdkafka 2.x aborts the process on a refused one). They
go through kafka-python's KafkaAdminClient (the library whose message schemas already are the broker's codec)
on the same bootstrap and security settings as every other command.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from kafka.admin import KafkaAdminClient

    from logbroker._kafka.settings import KafkaSettings


def kafka_python_config(bootstrap: str, security: KafkaSettings | None) -> dict[str, Any]:
    """kafka-python's names for `security` (PLAIN and SCRAM over any protocol, TLS files as PEM)."""
    conf: dict[str, Any] = {"bootstrap_servers": bootstrap.split(","), "client_id": "logbroker-cli"}
    if security is None:
        return conf
    s = security
    conf["security_protocol"] = s.security_protocol
    if s.uses_sasl:
        if s.sasl_mechanism == "OAUTHBEARER":
            raise click.ClickException("this command does not support SASL OAUTHBEARER (use PLAIN or SCRAM)")
        conf.update(sasl_mechanism=s.sasl_mechanism, sasl_plain_username=s.sasl_username,
                    sasl_plain_password=s.sasl_password or "")  # fmt: skip
    if s.uses_ssl:
        conf.update(ssl_cafile=s.ssl_ca, ssl_certfile=s.ssl_cert, ssl_keyfile=s.ssl_key or s.ssl_cert,
                    ssl_password=s.ssl_key_password, ssl_check_hostname=s.ssl_check_hostname)  # fmt: skip
        if s.ssl_cert is None:
            conf.pop("ssl_keyfile")
    return conf


@contextlib.contextmanager
def wire_admin(bootstrap: str, security: KafkaSettings | None, timeout: float = 30.0) -> Iterator[KafkaAdminClient]:
    """A connected kafka-python admin client for a ``with`` block; failing to connect or log in is one line."""
    from kafka.admin import KafkaAdminClient
    from kafka.errors import KafkaError

    conf = kafka_python_config(bootstrap, security)
    try:
        admin = KafkaAdminClient(**conf, request_timeout_ms=int(timeout * 1000))
    except (KafkaError, OSError) as exc:
        raise click.ClickException(f"cannot reach {bootstrap}: {exc}") from None
    try:
        yield admin
    finally:
        admin.close()


def delete_group_offsets(
    admin: KafkaAdminClient, group: str, partitions: Iterable[tuple[str, int]]
) -> dict[tuple[str, int], int]:
    """OffsetDelete: the error code per partition; a group-level refusal is one line naming Kafka's code."""
    from kafka import TopicPartition
    from kafka.errors import KafkaError

    from logbroker.protocol.errors import ErrorCode

    try:
        result = admin.delete_group_offsets(group, [TopicPartition(t, p) for t, p in partitions])
    except KafkaError as exc:
        code = getattr(exc, "errno", None)
        name = ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(exc)
        raise click.ClickException(f"cannot delete offsets of group {group}: {name}") from None
    return {(tp.topic, tp.partition): err.errno for tp, err in result.items()}


def partition_sizes(admin: KafkaAdminClient, topic: str, leaders: dict[int, int]) -> dict[int, int]:
    """Bytes on disk of each partition's leader replica (partitions no broker reported are absent)."""
    sizes: dict[int, int] = {}
    for broker in admin.describe_log_dirs({topic: sorted(leaders)}):
        for d in broker["log_dirs"]:
            for t in d["topics"] if not d["error_code"] else ():
                for p in t["partitions"] if t["name"] == topic else ():
                    if leaders.get(p["partition_index"]) == broker["broker"]:
                        sizes[p["partition_index"]] = p["partition_size"]
    return sizes


SCRAM_NAMES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
_PROBE = "logbroker-scram-probe"


Scram = dict[str, tuple[str | None, list[tuple[str, int]]]]


def scram_users(admin: KafkaAdminClient, names: list[str] | None) -> Scram:
    """DescribeUserScramCredentials: each user's error (Kafka's name and message, None when found) and its
    (mechanism, iterations). With ``names`` None every user; a refusal is one line with Kafka's code.

    Not through librdkafka: confluent-kafka 2.16 aborts the process ("munmap_chunk(): invalid pointer") when the
    answer is CLUSTER_AUTHORIZATION_FAILED. And Kafka never answers a refused listing of every user (it fails
    building the error answer; logbroker closes the connection as Kafka leaves it hanging), so a listing asks
    for one named user first, whose refusal is answered."""
    from kafka.errors import KafkaError
    from kafka.protocol.admin import DescribeUserScramCredentialsRequest

    from logbroker.protocol.errors import ErrorCode

    def name(code: int) -> str:
        return ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)

    async def run() -> Any:
        if names is None:
            probe = await admin._manager.send(DescribeUserScramCredentialsRequest(users=[(_PROBE,)]))
            if probe.error_code:
                return probe
        asked = None if names is None else [(n,) for n in names]
        return await admin._manager.send(DescribeUserScramCredentialsRequest(users=asked))

    try:
        resp = admin._manager.run(run)
    except KafkaError as exc:
        raise click.ClickException(f"describe SCRAM users: {exc}") from None
    if resp.error_code:
        detail = f" ({resp.error_message})" if resp.error_message else ""
        raise click.ClickException(f"describe SCRAM users: {name(resp.error_code)}{detail}")
    out: dict[str, tuple[str | None, list[tuple[str, int]]]] = {}
    for r in resp.results:
        error = f"{name(r.error_code)} ({r.error_message})" if r.error_code else None
        infos = [(SCRAM_NAMES.get(c.mechanism, str(c.mechanism)), c.iterations) for c in r.credential_infos]
        out[r.user] = (error, sorted(infos))
    return out
