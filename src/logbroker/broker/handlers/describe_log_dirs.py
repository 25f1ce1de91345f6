"""DescribeLogDirs (35): the one log dir (the data directory), each partition's size on disk and the volume's
space, as Kafka's ReplicaManager.describeLogDirs reports them (KIP-113; total/usable bytes from v4, KIP-827).

Versions 0-5 as Kafka 3.9 serves them (Kafka 4 removed v0); the Java admin client and kafka-log-dirs send v5.
Needs DESCRIBE on the cluster: without it no dir is listed, and from v3 (which has the field) the answer's
error code is CLUSTER_AUTHORIZATION_FAILED (KafkaApis.handleDescribeLogDirsRequest).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation
from ..auth.checks import cluster_denial
from ..context import BrokerContext
from ..dispatch import handles
from ._log_dirs import log_dir

API = api(ApiKey.DescribeLogDirs)
R = API.response
DirResult = R.DescribeLogDirsResult
TopicResult = DirResult.DescribeLogDirsTopic
PartitionResult = TopicResult.DescribeLogDirsPartition

# Java's FileStore reports a volume larger than 8 EiB as negative; Kafka answers Long.MAX_VALUE then.
_INT64_MAX = 2**63 - 1


def volume_space(path: str) -> tuple[int, int]:
    """(total, usable) bytes of the volume holding `path`, as Java's FileStore counts them: usable is what
    an unprivileged writer may still use (f_bavail), not the free blocks reserved for root."""
    st = os.statvfs(path)
    return min(st.f_blocks * st.f_frsize, _INT64_MAX), min(st.f_bavail * st.f_frsize, _INT64_MAX)


@handles(ApiKey.DescribeLogDirs, 0, 5, kafka4_min=1)
def handle(ctx: BrokerContext, req: Request) -> R:
    if cluster_denial(ctx, req, AclOperation.DESCRIBE) is not None:
        return R(throttle_time_ms=0, error_code=E.CLUSTER_AUTHORIZATION_FAILED, results=[])
    wanted = _wanted(req.body.topics)
    path = log_dir(ctx)
    try:
        total, usable = volume_space(path)
    except OSError:
        # Kafka answers an offline log dir with KAFKA_STORAGE_ERROR and nothing else about it.
        result = DirResult(error_code=E.KAFKA_STORAGE_ERROR, log_dir=path, topics=[])
    else:
        result = DirResult(
            error_code=0,
            log_dir=path,
            topics=list(_topics(ctx, wanted)),
            total_bytes=total,
            usable_bytes=usable,
            is_cordoned=False,
        )
    return R(throttle_time_ms=0, error_code=0, results=[result])


def _wanted(topics: list[Any] | None) -> dict[str, set[int]] | None:
    """None (every partition) for a null list; else the named partitions, a topic or partition named twice
    counting once (Kafka reads them into a set)."""
    if topics is None:
        return None
    wanted: dict[str, set[int]] = {}
    for t in topics:
        wanted.setdefault(t.topic, set()).update(t.partitions)
    return wanted


def _topics(ctx: BrokerContext, wanted: dict[str, set[int]] | None) -> Iterable[Any]:
    """Partitions this broker holds that were asked for; unknown topics and partitions are left out, and so
    is a topic none of whose partitions remain (as Kafka does: no error code per partition here)."""
    for meta in sorted(ctx.topics.all(), key=lambda m: m.name):
        indexes = range(meta.partitions) if wanted is None else sorted(wanted.get(meta.name, ()))
        parts = []
        for i in indexes:
            plog = ctx.topics.log(meta.name, i)
            if plog is None:
                continue
            # Lag against the high watermark: none on a single node, where the log end is the high watermark.
            parts.append(PartitionResult(partition_index=i, partition_size=plog.size_bytes, offset_lag=0,
                                         is_future_key=False))  # fmt: skip
        if parts:
            yield TopicResult(name=meta.name, partitions=parts)
