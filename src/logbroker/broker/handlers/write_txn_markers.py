"""WriteTxnMarkers (27): markers written on request. Kafka's coordinator sends these to partition leaders;
here the coordinator writes its own markers, and this API serves the operator's side of it: the admin
client's abortTransaction (`kafka-transactions.sh abort`), which closes a hanging transaction whose
coordinator state is gone.

It is an inter-broker API: with an authorizer it needs ALTER (or else CLUSTER_ACTION) on the cluster, and
Kafka answers every partition CLUSTER_AUTHORIZATION_FAILED without either. v2 (KIP-1228) names each marker's
transaction version: under version 2 a marker must come from a newer epoch than the producer's (a retry of
the same epoch once its transaction closed excepted), else INVALID_PRODUCER_EPOCH."""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation
from ..auth.checks import cluster_allows
from ..context import BrokerContext
from ..dispatch import handles
from ..seams import SequenceError

API = api(ApiKey.WriteTxnMarkers)
R = API.response
MR = R.WritableTxnMarkerResult
TR = MR.WritableTxnMarkerTopicResult
PR = TR.WritableTxnMarkerPartitionResult


@handles(ApiKey.WriteTxnMarkers, 0, 2, kafka4_min=1)
async def handle(ctx: BrokerContext, req: Request) -> R:
    if not (cluster_allows(ctx, req, AclOperation.ALTER) or cluster_allows(ctx, req, AclOperation.CLUSTER_ACTION)):
        return _refused(req.body.markers)
    results = []
    written = False
    for m in req.body.markers:
        topics = []
        for t in m.topics:
            parts = []
            for index in t.partition_indexes:
                plog = ctx.topics.log(t.name, index)
                err = E.NONE
                if plog is None:
                    err = E.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    try:
                        tv = m.transaction_version if req.version >= 2 else 0
                        plog.append_marker(m.producer_id, m.producer_epoch, m.transaction_result, m.coordinator_epoch,
                                           tv)  # fmt: skip
                        written = True
                    except SequenceError as exc:
                        err = exc.error
                    except OSError:
                        err = E.KAFKA_STORAGE_ERROR
                parts.append(PR(partition_index=index, error_code=err))
            topics.append(TR(name=t.name, partitions=parts))
        results.append(MR(producer_id=m.producer_id, topics=topics))
    if written:
        await ctx.sync()
    return R(markers=results)


def _refused(markers: list) -> R:
    """Kafka's WriteTxnMarkersRequest.getErrorResponse: CLUSTER_AUTHORIZATION_FAILED for every partition,
    gathered by producer id (a producer named twice is answered once)."""
    by_pid: dict[int, dict[str, list[int]]] = {}
    for m in markers:
        topics = by_pid.setdefault(m.producer_id, {})
        for t in m.topics:
            topics.setdefault(t.name, []).extend(t.partition_indexes)
    denied = E.CLUSTER_AUTHORIZATION_FAILED
    return R(markers=[
        MR(producer_id=pid, topics=[TR(name=t, partitions=[PR(partition_index=i, error_code=denied)
                                                           for i in dict.fromkeys(ps)]) for t, ps in topics.items()])
        for pid, topics in by_pid.items()
    ])  # fmt: skip
