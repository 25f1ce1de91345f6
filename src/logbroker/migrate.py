"""The way out to a cluster: copy a broker's topics (records, keys, headers, timestamps, configs), its ACLs and
its groups' committed offsets to a Kafka cluster with Kafka's own MirrorMaker 2, then prove it.

MirrorMaker 2 runs as a child JVM (connect-mirror from Maven, jars kind ``mm2``) with an identity replication
policy, so topic names stay. It copies records and topic configs and, where the source has an authorizer,
topic ACLs. Group offsets are not left to MirrorMaker's translation, which rounds down to its last offset sync
(100 records apart by default): once every partition has caught up, each committed offset is translated
exactly, by the position of the record it points at (the n-th record of a partition is the n-th record of its
copy: MirrorMaker keeps order and copies every record, aborted ones included, as a read_uncommitted consumer
sees them), checked against that record's key, value and timestamp, and committed on the cluster while the
group has no members there. A consumer switched over resumes at the record it would have read next.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from logbroker import _kafka
from logbroker._kafka import KafkaSettings
from logbroker._kafka.settings import from_properties, java_client_properties
from logbroker.jars import default_jar_dir, jars_available, java_tool

MAIN = "org.apache.kafka.connect.mirror.MirrorMaker"
MM2_VERSION = "4.3.1"  # connect-mirror: the newest on Maven Central (4.4.0 is not published there)
# MirrorMaker's default topics.exclude: what it never copies is not waited for either.
INTERNAL = re.compile(r"^(mm2.*\.internal|.*\.replica|__.*)$")


class MigrateError(RuntimeError):
    """Why a migration cannot start or did not finish."""


@dataclass
class PartitionState:
    topic: str
    partition: int
    source_start: int = 0
    source_end: int = 0
    source_records: int = 0
    target_start: int = 0
    target_end: int = -1  # -1: the partition does not exist on the target yet

    @property
    def target_records(self) -> int:
        return max(self.target_end - self.target_start, 0)

    @property
    def caught_up(self) -> bool:
        return self.target_end >= 0 and self.target_records >= self.source_records


@dataclass
class GroupOffset:
    group: str
    topic: str
    partition: int
    source: int
    target: int | None = None
    exact: bool = False  # translated by the record it points at, and checked


@dataclass
class Outcome:
    partitions: list[PartitionState] = field(default_factory=list)
    groups: list[GroupOffset] = field(default_factory=list)
    seconds: float = 0.0
    log: Path | None = None


# ------------------------------------------------------------------------------------------------ jars


_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
<groupId>dev.logbroker.migrate</groupId><artifactId>mm2</artifactId><version>1</version><packaging>pom</packaging>
<dependencies>
<dependency><groupId>org.apache.kafka</groupId><artifactId>connect-mirror</artifactId><version>{v}</version></dependency>
<dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j2-impl</artifactId><version>2.25.5</version>
</dependency></dependencies></project>
"""


def mm2_jars(resolve: bool = True) -> Path:
    """The directory of MirrorMaker 2's jars: `$LOGBROKER_JARS_DIR/mm2` or a checkout's `.ci/cache/jars/mm2`,
    else the user's cache, resolved there from Maven Central with `mvn` when it is installed."""
    found = default_jar_dir("mm2")
    if jars_available("mm2", found):
        return found
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "logbroker" / "jars" / "mm2"
    if jars_available("mm2", cache):
        return cache
    mvn = shutil.which("mvn")
    if not resolve or mvn is None:
        raise MigrateError(
            f"MirrorMaker 2's jars (org.apache.kafka:connect-mirror:{MM2_VERSION}) are not in {found} or {cache}; "
            "install Maven (they are then fetched from Maven Central on first use), or run .ci/fetch-jars mm2 in "
            "a checkout, or set LOGBROKER_JARS_DIR to a directory holding mm2/"
        )
    with tempfile.TemporaryDirectory() as tmp:
        pom = Path(tmp) / "pom.xml"
        pom.write_text(_POM.format(v=MM2_VERSION))
        out = Path(tmp) / "jars"
        done = subprocess.run(
            [mvn, "-q", "-B", "-ntp", "-f", str(pom), "dependency:copy-dependencies", "-DincludeScope=runtime",
             f"-DoutputDirectory={out}"],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        if done.returncode != 0 or not jars_available("mm2", out):
            raise MigrateError(f"could not fetch MirrorMaker 2 from Maven Central:\n{done.stdout[-2000:]}")
        cache.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(cache, ignore_errors=True)
        shutil.copytree(out, cache)
    return cache


# ------------------------------------------------------------------------------------------ properties


def mm2_properties(source: KafkaSettings, target: Mapping[str, str], topics: str, groups: str,
                   sync_acls: bool) -> dict[str, str]:  # fmt: skip
    """MirrorMaker 2's configuration for a one-way copy from `source` to `target` (Java client properties)."""
    props = {
        "clusters": "source,target",
        "source->target.enabled": "true",
        "target->source.enabled": "false",
        "source->target.topics": topics,
        "source->target.groups": groups,
        "replication.policy.class": "org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
        "sync.topic.configs.enabled": "true",
        "sync.topic.acls.enabled": "true" if sync_acls else "false",
        # Offsets are translated exactly at the end (see the module's docstring), not by MirrorMaker.
        "emit.checkpoints.enabled": "false",
        "sync.group.offsets.enabled": "false",
        "refresh.topics.interval.seconds": "5",
        "refresh.groups.interval.seconds": "5",
        # Nothing is written to the source: MirrorMaker's own topics live on the target.
        "offset-syncs.topic.location": "target",
        # The cluster's own default replication for the copies and MirrorMaker's topics.
        **{f"{k}.replication.factor": "-1" for k in ("checkpoints.topic", "heartbeats.topic", "offset-syncs.topic",
                                                     "offset.storage", "config.storage", "status.storage")},
        "replication.factor": "-1",
        "tasks.max": "4",
    }  # fmt: skip
    props["source.bootstrap.servers"] = source.bootstrap_servers
    for k, v in java_client_properties(source).items():
        if k != "bootstrap.servers":
            props[f"source.{k}"] = v
    for k, v in target.items():
        props[f"target.{k}"] = v
    return props


def write_properties(path: Path, props: Mapping[str, str]) -> None:
    import javaproperties

    path.write_text(javaproperties.dumps(dict(props), timestamp=False))


_LOG4J2 = """status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
"""


# --------------------------------------------------------------------------------------------- the run


class Migration:
    """One copy from `source` to the cluster `target` (client properties: bootstrap.servers and security)."""

    def __init__(self, source: KafkaSettings, target: Mapping[str, str], topics: str = ".*", groups: str = ".*",
                 workdir: Path | None = None) -> None:  # fmt: skip
        self.source = source
        self.target_props = dict(target)
        self.target = from_properties(self.target_props)
        self.topics_re, self.groups_re = re.compile(topics), re.compile(groups)
        self.topics_pattern, self.groups_pattern = topics, groups
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="logbroker-migrate-"))
        self.proc: subprocess.Popen[bytes] | None = None
        self.src_admin = _kafka.admin(source)
        self.dst_admin = _kafka.admin(self.target)

    # -- what there is to copy

    def source_topics(self) -> dict[str, int]:
        md = self.src_admin.list_topics(timeout=30)
        return {n: len(t.partitions) for n, t in md.topics.items()
                if self.topics_re.fullmatch(n) and not INTERNAL.match(n)}  # fmt: skip

    def source_groups(self) -> list[str]:
        listed = self.src_admin.list_consumer_groups(request_timeout=30).result(30)
        return sorted(g.group_id for g in listed.valid if self.groups_re.fullmatch(g.group_id))

    def _acls_enabled(self) -> bool:
        """MirrorMaker syncs topic ACLs only where the source has an authorizer (else DescribeAcls fails)."""
        from confluent_kafka.admin import (
            AclBindingFilter,
            AclOperation,
            AclPermissionType,
            ResourcePatternType,
            ResourceType,
        )

        f = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                             AclPermissionType.ANY)  # fmt: skip
        try:
            self.src_admin.describe_acls(f, request_timeout=15).result(15)
        except Exception:  # SECURITY_DISABLED: no ACLs to copy
            return False
        return True

    # -- MirrorMaker

    def start(self, jars: Path, heap: str = "512m") -> Path:
        java = java_tool("java")
        if java is None:
            raise MigrateError("java not found (MirrorMaker 2 needs a JVM): set JAVA_HOME or put java on PATH")
        props = mm2_properties(self.source, self.target_props, self.topics_pattern, self.groups_pattern,
                               self._acls_enabled())  # fmt: skip
        config = self.workdir / "mm2.properties"
        write_properties(config, props)
        log = self.workdir / "mirrormaker.log"
        log4j = self.workdir / "log4j2.properties"
        log4j.write_text(_LOG4J2.format(log=log))
        self.proc = subprocess.Popen(
            [java, f"-Xmx{heap}", f"-Dlog4j2.configurationFile={log4j}", "-cp", f"{jars}/*", MAIN, str(config),
             "--clusters", "target"],
            stdout=subprocess.DEVNULL, stderr=(self.workdir / "mirrormaker.err").open("wb"),
        )  # fmt: skip
        return log

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # -- progress

    def survey(self, known: dict[tuple[str, int], PartitionState] | None = None) -> list[PartitionState]:
        """Every partition's offsets on both sides; source record counts (read once per new end offset)."""
        out: list[PartitionState] = []
        src = _kafka.consumer(self.source, **{"group.id": "logbroker-migrate", "enable.auto.commit": False})
        dst = _kafka.consumer(self.target, **{"group.id": "logbroker-migrate", "enable.auto.commit": False})
        try:
            target_md = dst.list_topics(timeout=30).topics
            for topic, count in sorted(self.source_topics().items()):
                for p in range(count):
                    st = PartitionState(topic, p)
                    st.source_start, st.source_end = _watermarks(src, topic, p)
                    old = (known or {}).get((topic, p))
                    if old is not None and (old.source_start, old.source_end) == (st.source_start, st.source_end):
                        st.source_records = old.source_records
                    else:
                        st.source_records = count_records(src, topic, p, st.source_start, st.source_end)
                    t = target_md.get(topic)
                    if t is not None and t.error is None and p in t.partitions:
                        st.target_start, st.target_end = _watermarks(dst, topic, p)
                    out.append(st)
        finally:
            src.close()
            dst.close()
        return out

    # -- groups

    def translate_groups(self) -> list[GroupOffset]:
        """Each group's committed offsets, translated to the copies record by record and committed there."""
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        result: list[GroupOffset] = []
        src = _kafka.consumer(self.source, **{"group.id": "logbroker-migrate", "enable.auto.commit": False})
        dst = _kafka.consumer(self.target, **{"group.id": "logbroker-migrate", "enable.auto.commit": False})
        topics = self.source_topics()
        try:
            for group in self.source_groups():
                got = self.src_admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
                committed = [tp for tp in got[group].result(30).topic_partitions
                             if tp.topic in topics and tp.offset >= 0]  # fmt: skip
                commits = []
                for tp in committed:
                    g = GroupOffset(group, tp.topic, tp.partition, tp.offset)
                    g.target, g.exact = translate(src, dst, tp.topic, tp.partition, tp.offset)
                    if g.target is not None:
                        kept = TopicPartition(tp.topic, tp.partition, g.target)
                        if tp.metadata:
                            kept = TopicPartition(tp.topic, tp.partition, g.target, tp.metadata)
                        commits.append(kept)
                    result.append(g)
                if commits:
                    done = self.dst_admin.alter_consumer_group_offsets(
                        [ConsumerGroupTopicPartitions(group, commits)], request_timeout=30)  # fmt: skip
                    done[group].result(30)
        finally:
            src.close()
            dst.close()
        return result

    def target_offsets(self, groups: Iterable[str]) -> dict[tuple[str, str, int], int]:
        from confluent_kafka import ConsumerGroupTopicPartitions

        out = {}
        for group in groups:
            got = self.dst_admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
            for tp in got[group].result(30).topic_partitions:
                out[(group, tp.topic, tp.partition)] = tp.offset
        return out

    def run(self, jars: Path, timeout: float = 600.0, on_progress: Callable[[list[PartitionState]], None] | None = None,
            settle: float = 2.0) -> Outcome:  # fmt: skip
        """Start MirrorMaker, wait until every partition's copy holds as many records as the source (checked
        twice, `settle` seconds apart), translate the groups' offsets, stop it."""
        started = time.monotonic()
        outcome = Outcome(log=self.start(jars))
        known: dict[tuple[str, int], PartitionState] = {}
        try:
            done_once = False
            while True:
                if not self.alive():
                    raise MigrateError(f"MirrorMaker 2 stopped; its log: {outcome.log}\n{_tail(outcome.log)}")
                states = self.survey(known)
                known = {(s.topic, s.partition): s for s in states}
                if on_progress is not None:
                    on_progress(states)
                if all(s.caught_up for s in states):
                    if done_once:
                        break
                    done_once = True
                else:
                    done_once = False
                if time.monotonic() - started > timeout:
                    behind = [f"{s.topic}-{s.partition}" for s in states if not s.caught_up]
                    raise MigrateError(f"not caught up within {timeout:g}s: {', '.join(behind[:10])}")
                time.sleep(settle)
            outcome.partitions = states
            outcome.groups = self.translate_groups()
        finally:
            self.stop()
        outcome.seconds = time.monotonic() - started
        return outcome


# ------------------------------------------------------------------------------------------- records


def _watermarks(c: Any, topic: str, p: int) -> tuple[int, int]:
    from confluent_kafka import TopicPartition

    lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
    return int(lo), int(hi)


def _read(c: Any, topic: str, p: int, start: int, stop: int) -> Iterable[Any]:
    """The data records of [start, stop) (control records and gaps skipped), as a read_uncommitted consumer
    sees them."""
    from confluent_kafka import TopicPartition

    if stop <= start:
        return
    c.assign([TopicPartition(topic, p, start)])
    idle = time.monotonic()
    while True:
        msgs = c.consume(num_messages=5000, timeout=1.0)
        if not msgs:
            pos = c.position([TopicPartition(topic, p)])[0].offset
            if pos >= stop or time.monotonic() - idle > 10:
                return
            continue
        idle = time.monotonic()
        for m in msgs:
            if m.error() is not None:
                continue
            if m.offset() >= stop:
                return
            yield m
        if msgs[-1].offset() >= stop - 1:
            return


def count_records(c: Any, topic: str, p: int, start: int, end: int) -> int:
    return sum(1 for _ in _read(c, topic, p, start, end))


def translate(src: Any, dst: Any, topic: str, p: int, offset: int) -> tuple[int | None, bool]:
    """The copy's offset of the record a committed `offset` points at: the number of records before it on the
    source, from each side's log start; checked against the record there (key, value, timestamp). A commit at
    the log end maps to the copy's end."""
    s_start, s_end = _watermarks(src, topic, p)
    d_start, d_end = _watermarks(dst, topic, p)
    offset = max(offset, s_start)
    before = count_records(src, topic, p, s_start, offset)
    target = d_start + before
    if offset >= s_end:
        return d_end, True
    first = next(iter(_read(src, topic, p, offset, s_end)), None)
    there = next(iter(_read(dst, topic, p, target, d_end)), None)
    if first is None:  # only control records left: the end
        return d_end, True
    same = there is not None and (first.key(), first.value(), first.timestamp()) == (
        there.key(), there.value(), there.timestamp())  # fmt: skip
    return target, same


def _tail(path: Path | None, lines: int = 20) -> str:
    if path is None or not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
