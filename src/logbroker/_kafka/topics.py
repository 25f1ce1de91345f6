"""`ensure_topics`: create what is missing, then wait until every partition has a leader that answers.

Right after CreateTopics, Kafka's metadata shows the topic leaderless or with part of its partitions,
and a leader that metadata already names can still answer NOT_LEADER / UNKNOWN_TOPIC_OR_PARTITION to
ListOffsets for a moment (KRaft publishes the metadata image before the replica manager applies it).
Clients that hit that window either retry (producers) or fail (watermark queries, assign()), so each
face used to paper over it differently. Here it is handled once: a created (or not yet settled) topic is
returned only when metadata shows every partition with a leader and ListOffsets succeeds on each.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, Literal

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from logbroker._kafka.errors import (
    BrokerUnreachable,
    KafkaLayerError,
    Kind,
    TopicMissing,
    TopicNotReady,
    TopicRefused,
    classify,
    new_client,
)
from logbroker._kafka.settings import KafkaSettings, as_config

log = logging.getLogger("logbroker.kafka")

CreateMode = bool | Literal["broker"]


@dataclass(frozen=True)
class TopicSpec:
    """A topic to ensure; -1 partitions / replication = the broker's defaults."""

    name: str
    partitions: int = -1
    replication: int = -1
    configs: Mapping[str, str] = field(default_factory=dict)


def _exists(md: Any) -> bool:
    return md is not None and (md.error is None or md.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART)


def _unready(md: Any, expected: int) -> str | None:
    """Why the topic's metadata is not usable yet, None if every partition has a leader."""
    if md is None:
        return "not in metadata"
    if md.error is not None:
        return md.error.str()
    if not md.partitions:
        return "no partitions in metadata"
    if expected > 0 and len(md.partitions) < expected:
        return f"{len(md.partitions)} of {expected} partitions in metadata"
    leaderless = sorted(p for p, pm in md.partitions.items() if pm.leader < 0 or pm.error is not None)
    return f"partitions {leaderless} have no leader" if leaderless else None


def _not_serving(admin: AdminClient, name: str, partitions: Iterable[int], timeout: float) -> str | None:
    """Why ListOffsets still fails on a partition (None once every leader answers). A broker that does not
    serve admin ListOffsets at all is taken at its metadata's word."""
    request = {TopicPartition(name, p): OffsetSpec.latest() for p in partitions}
    try:
        futures = admin.list_offsets(request, request_timeout=max(0.5, timeout))
    except (KafkaException, ValueError, TypeError) as exc:
        log.debug("ListOffsets on %s unavailable (%s): trusting metadata", name, exc)
        return None
    for tp, fut in futures.items():
        try:
            fut.result(max(0.5, timeout))
        except FutureTimeout:
            return f"ListOffsets on partition {tp.partition} timed out"
        except KafkaException as exc:
            c = classify(exc)
            if c.transient:
                return f"partition {tp.partition}: {c.message}"
            log.debug("ListOffsets on %s-%d: %s; trusting metadata", name, tp.partition, c.message)
            return None
    return None


class _Deadline:
    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.at = time.monotonic() + timeout

    def left(self, floor: float = 0.1) -> float:
        return max(floor, self.at - time.monotonic())

    def passed(self) -> bool:
        return time.monotonic() >= self.at


def _list_all(admin: AdminClient, bootstrap: str, deadline: _Deadline) -> Any:
    try:
        return admin.list_topics(timeout=deadline.left(0.5))
    except KafkaException as exc:
        c = classify(exc)
        raise BrokerUnreachable(f"could not reach {bootstrap} within {deadline.timeout:g}s: {c.message}",
                                cause=c) from None  # fmt: skip


def _broker_create(conf: dict[str, Any], name: str, deadline: _Deadline, grace: float = 3.0) -> None:
    """Ask for the topic with a producer's metadata request, which the broker answers by auto-creating it
    where ``auto.create.topics.enable`` allows (an AdminClient's full listing never does)."""
    producer = new_client(Producer, conf)
    started = time.monotonic()
    while not deadline.passed():
        try:
            md = producer.list_topics(name, timeout=deadline.left(0.5)).topics.get(name)
        except KafkaException as exc:
            c = classify(exc)
            raise BrokerUnreachable(f"could not reach {conf['bootstrap.servers']}: {c.message}", cause=c) from None
        code = md.error.code() if md is not None and md.error is not None else None
        if md is not None and code is None and md.partitions:
            return
        # LEADER_NOT_AVAILABLE while the broker creates it; UNKNOWN_TOPIC_OR_PART for a few seconds in a row
        # means it is not creating it.
        if code not in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.LEADER_NOT_AVAILABLE, None):
            c = classify(md.error)
            raise KafkaLayerError(f"topic {name!r}: {c.message}", c.kind, c)
        if code == KafkaError.UNKNOWN_TOPIC_OR_PART and time.monotonic() - started > grace:
            break
        time.sleep(0.2)
    raise TopicMissing(
        f"topic {name!r} does not exist and the broker did not create it (auto.create.topics.enable is off?)"
    )


def ensure_topics(
    target: KafkaSettings | Mapping[str, Any],
    topics: Iterable[str | TopicSpec],
    *,
    partitions: int = -1,
    replication: int = -1,
    configs: Mapping[str, str] | None = None,
    create: CreateMode = True,
    strict: bool = True,
    timeout: float = 30.0,
    admin: AdminClient | None = None,
    missing_hint: str = "creating it is off",
) -> dict[str, list[int]]:
    """Make each topic exist and be ready to serve; returns its partition ids.

    ``create``: True = CreateTopics for missing ones (TOPIC_ALREADY_EXISTS is fine: a peer won the race),
    ``"broker"`` = let the broker auto-create it on a metadata request, False = `TopicMissing` naming
    ``missing_hint``. ``strict=False`` logs a refused creation and leaves that topic out instead of raising
    `TopicRefused`. Strings in ``topics`` get ``partitions``/``replication``/``configs``. Everything is bounded
    by ``timeout``: `BrokerUnreachable` without metadata, `TopicNotReady` when a partition never gets a leader.
    ``admin`` reuses a face's AdminClient (one connection fewer per call).
    """
    conf = as_config(target, "admin")  # an AdminClient and a Producer: both producer-side handles
    bootstrap = str(conf.get("bootstrap.servers", "?"))
    specs = [t if isinstance(t, TopicSpec) else TopicSpec(t, partitions, replication, dict(configs or {}))
             for t in topics]  # fmt: skip
    deadline = _Deadline(timeout)
    admin = admin if admin is not None else new_client(AdminClient, conf)
    listed = _list_all(admin, bootstrap, deadline).topics
    result: dict[str, list[int]] = {}
    settle: dict[str, int] = {}  # name -> partitions expected (0: any), for topics not ready at first sight
    missing: list[TopicSpec] = []
    for spec in specs:
        md = listed.get(spec.name)
        if not _exists(md):
            missing.append(spec)
        elif _unready(md, 0) is None:
            result[spec.name] = sorted(md.partitions)
        else:
            settle[spec.name] = 0
    if missing and create is False:
        spec = missing[0]
        raise TopicMissing(f"topic {spec.name!r} does not exist and {missing_hint}")
    if missing and create == "broker":
        for spec in missing:
            _broker_create(conf, spec.name, deadline)
            settle[spec.name] = 0
    elif missing:
        new = [NewTopic(s.name, s.partitions, s.replication, config=dict(s.configs)) for s in missing]
        futures = admin.create_topics(new, request_timeout=deadline.left(0.5))
        for spec in missing:
            try:
                futures[spec.name].result(deadline.left(0.5))
            except FutureTimeout:
                raise BrokerUnreachable(
                    f"could not reach {bootstrap} within {timeout:g}s to create {spec.name!r}"
                ) from None
            except KafkaException as exc:
                c = classify(exc)
                if c.kind is Kind.TOPIC_EXISTS:  # a peer created it meanwhile, maybe with other settings
                    settle[spec.name] = 0
                    continue
                if strict:
                    raise TopicRefused(f"topic {spec.name!r} does not exist and the broker refused to create "
                                       f"it: {c.message}", cause=c) from None  # fmt: skip
                log.warning("could not create topic %s: %s", spec.name, c.message)
                continue
            settle[spec.name] = max(spec.partitions, 0)
    if settle:
        result.update(_wait_ready(admin, bootstrap, settle, deadline))
    return {s.name: result[s.name] for s in specs if s.name in result}


def _wait_ready(
    admin: AdminClient, bootstrap: str, settle: dict[str, int], deadline: _Deadline
) -> dict[str, list[int]]:
    """Poll metadata until each topic has all its partitions led, then ListOffsets until each leader answers."""
    ready: dict[str, list[int]] = {}
    why: dict[str, str] = {}
    pause = 0.02
    while True:
        listed = _list_all(admin, bootstrap, deadline).topics
        for name, expected in settle.items():
            if name in ready:
                continue
            md = listed.get(name)
            reason = _unready(md, expected)
            if reason is None:
                reason = _not_serving(admin, name, md.partitions, deadline.left(0.5))
            if reason is None:
                ready[name] = sorted(md.partitions)
            else:
                why[name] = reason
        if len(ready) == len(settle):
            return ready
        if deadline.passed():
            name = next(n for n in settle if n not in ready)
            raise TopicNotReady(f"topic {name!r} not ready within {deadline.timeout:g}s on {bootstrap}: {why[name]}")
        time.sleep(min(pause, deadline.left(0.0)))
        pause = min(pause * 2, 0.2)


def ensure_topic(target: KafkaSettings | Mapping[str, Any], topic: str | TopicSpec, **kwargs: Any) -> list[int]:
    """`ensure_topics` for one topic: its partition ids."""
    name = topic.name if isinstance(topic, TopicSpec) else topic
    got = ensure_topics(target, [topic], **kwargs)
    if name not in got:  # strict=False and creation refused
        raise TopicMissing(f"topic {name!r} does not exist and could not be created")
    return got[name]
