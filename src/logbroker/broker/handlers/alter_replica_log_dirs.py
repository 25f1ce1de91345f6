"""AlterReplicaLogDirs (34): move partitions between a broker's log dirs. logbroker has one log dir, so
nothing can move: answered per partition as Kafka's ReplicaManager.alterReplicaLogDirs answers on a broker
with a single log dir, which is also the clear refusal an operator needs:

- a topic name too long to name the partition's future directory (`<topic>-<p>.<32 hex>-future` over 255
  characters): INVALID_TOPIC_EXCEPTION, before anything else;
- any path but the log dir DescribeLogDirs reports (compared as a string, as Kafka does: a trailing slash
  is another dir): LOG_DIR_NOT_FOUND;
- that dir: nothing to do (NONE) for a partition it holds, UNKNOWN_TOPIC_OR_PARTITION otherwise.

A partition named under two paths takes the last one (Kafka reads the request into a map).

Needs ALTER on the cluster; without it every partition is CLUSTER_AUTHORIZATION_FAILED, listed as the request
lists them (a topic per dir entry, nothing merged: Kafka's AlterReplicaLogDirsRequest.getErrorResponse).
"""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation
from ..auth.checks import cluster_denial
from ..context import BrokerContext
from ..dispatch import handles
from ._log_dirs import log_dir

API = api(ApiKey.AlterReplicaLogDirs)
R = API.response
TopicResult = R.AlterReplicaLogDirTopicResult
PartitionResult = TopicResult.AlterReplicaLogDirPartitionResult

# Kafka's future-log directory name: "<topic>-<partition>." + a 32-hex-digit id + "-future".
_FUTURE_SUFFIX_LEN = 1 + 32 + len("-future")
_MAX_DIR_NAME = 255


@handles(ApiKey.AlterReplicaLogDirs, 0, 2, kafka4_min=1)
def handle(ctx: BrokerContext, req: Request) -> R:
    if cluster_denial(ctx, req, AclOperation.ALTER) is not None:
        denied = E.CLUSTER_AUTHORIZATION_FAILED
        return R(
            throttle_time_ms=0,
            results=[
                TopicResult(
                    topic_name=t.name,
                    partitions=[PartitionResult(partition_index=p, error_code=denied) for p in t.partitions],
                )
                for d in req.body.dirs
                for t in d.topics
            ],
        )
    targets: dict[tuple[str, int], str] = {}
    for d in req.body.dirs:
        for t in d.topics:
            for p in t.partitions:
                targets[(t.name, p)] = d.path
    ours = log_dir(ctx)
    by_topic: dict[str, list[object]] = {}
    for (topic, partition), path in targets.items():
        code = _answer(ctx, topic, partition, path, ours)
        by_topic.setdefault(topic, []).append(PartitionResult(partition_index=partition, error_code=code))
    return R(throttle_time_ms=0, results=[TopicResult(topic_name=n, partitions=ps) for n, ps in by_topic.items()])


def _answer(ctx: BrokerContext, topic: str, partition: int, path: str, ours: str) -> E:
    # Java measures the name in UTF-16 code units.
    if len(f"{topic}-{partition}".encode("utf-16-le")) // 2 + _FUTURE_SUFFIX_LEN > _MAX_DIR_NAME:
        return E.INVALID_TOPIC_EXCEPTION
    if path != ours:
        return E.LOG_DIR_NOT_FOUND
    if ctx.topics.unavailable(topic) is not None:
        return E.KAFKA_STORAGE_ERROR  # Kafka: the partition's log dir is offline
    if ctx.topics.log(topic, partition) is None:
        return E.UNKNOWN_TOPIC_OR_PARTITION
    return E.NONE
