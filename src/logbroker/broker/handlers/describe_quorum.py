"""DescribeQuorum (55): the metadata quorum, as a one-node combined KRaft cluster reports it (its one voter,
node 1, is the leader; no observers). logbroker has no metadata log: its leader epoch is 1 (there is never an
election), and its high watermark, also the voter's log end offset (so the lag is 0), counts the topic
changes since the broker started (one or more), as Kafka's grows with every metadata record. The leader's
fetch and caught-up times are now, as Kafka's leader reports them; its directory id is the zero UUID of a
static voter set. v2's nodes list the voter's endpoint on the listener the request came in on (the node
serves clients and the quorum alike), and v2's messages are "" rather than null, as Kafka sends them.

Only `__cluster_metadata` partition 0 can be described: another topic or partition, or more than one, is
UNKNOWN_TOPIC_OR_PARTITION per partition (RaftUtil.hasValidTopicPartition). Needs DESCRIBE on the cluster:
without it CLUSTER_AUTHORIZATION_FAILED "Cluster authorization failed." and no topics.
"""

from __future__ import annotations

import time
import uuid

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation
from ..auth.checks import cluster_denial
from ..context import BrokerContext
from ..dispatch import handles

API = api(ApiKey.DescribeQuorum)
R = API.response
TD = R.TopicData
PD = TD.PartitionData
RS = PD.ReplicaState

METADATA_TOPIC = "__cluster_metadata"
_NOT_HOSTED = "This server does not host this topic-partition."


@handles(ApiKey.DescribeQuorum, 0, 2)
def handle(ctx: BrokerContext, req: Request) -> R:
    v2 = req.version >= 2
    empty = "" if v2 else None
    if cluster_denial(ctx, req, AclOperation.DESCRIBE) is not None:
        return R(error_code=E.CLUSTER_AUTHORIZATION_FAILED, error_message="Cluster authorization failed.", topics=[],
                 nodes=[])  # fmt: skip
    topics = req.body.topics
    if not (len(topics) == 1 and topics[0].topic_name == METADATA_TOPIC and len(topics[0].partitions) == 1
            and topics[0].partitions[0].partition_index == 0):  # fmt: skip
        return R(error_code=E.NONE, error_message=empty, nodes=[], topics=[
            TD(topic_name=t.topic_name, partitions=[
                PD(partition_index=p.partition_index, error_code=E.UNKNOWN_TOPIC_OR_PARTITION,
                   error_message=_NOT_HOSTED if v2 else None, leader_id=-1, leader_epoch=-1, high_watermark=-1,
                   current_voters=[], observers=[])
                for p in t.partitions])
            for t in topics])  # fmt: skip
    now = int(time.time() * 1000)
    offset = ctx.topics.changes + 1 + ctx.features.epoch
    voter = RS(replica_id=ctx.node_id, replica_directory_id=uuid.UUID(int=0), log_end_offset=offset,
               last_fetch_timestamp=now, last_caught_up_timestamp=now)  # fmt: skip
    part = PD(partition_index=0, error_code=E.NONE, error_message=empty, leader_id=ctx.node_id, leader_epoch=1,
              high_watermark=offset, current_voters=[voter], observers=[])  # fmt: skip
    host, port = ctx.endpoint(req.listener)
    name = req.listener or ctx.listeners[0].name
    nodes = [R.Node(node_id=ctx.node_id, listeners=[R.Node.Listener(name=name, host=host, port=port)])] if v2 else []
    return R(error_code=E.NONE, error_message=empty, topics=[TD(topic_name=METADATA_TOPIC, partitions=[part])],
             nodes=nodes)  # fmt: skip
