"""StreamsGroupDescribe (89): a streams group's topology (as configured against the topics that exist, or as the
application sent it while it is not ready), members with their current and target tasks, and epochs.

As Kafka: INVALID_GROUP_ID for the empty id, GROUP_ID_NOT_FOUND ("Group X not found." / "Group X is not a
streams group."), DESCRIBE on the group needed (GROUP_AUTHORIZATION_FAILED) and, with an authorizer, DESCRIBE on
every topic the topology shows, else TOPIC_AUTHORIZATION_FAILED with Kafka's message and no members. v1's
topology description is never stored here (no description plugin): its status is NOT_STORED when asked for.
"""

from __future__ import annotations

from typing import Any

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation, ResourceType
from ..auth.checks import authorized_operations
from ..context import BrokerContext
from ..dispatch import handles
from ..features import DISABLED_MESSAGE
from ..groups.streams import Assignment, StreamsGroup, TopicInfo
from ._groups import fit_message

API = api(ApiKey.StreamsGroupDescribe)
R = API.response
DG = R.DescribedGroup
M = DG.Member
TI = DG.Topology.Subtopology.TopicInfo
NOT_REQUESTED, NOT_STORED = 0, 1  # TopologyDescriptionStatus
HIDDEN_TOPICS = "The described group uses topics that the client is not authorized to describe."


def _error(gid: str, code: E, message: str | None) -> Any:
    err, msg = fit_message(int(code), message)
    return DG(error_code=err, error_message=msg, group_id=gid, group_state="", group_epoch=-1, assignment_epoch=-1,
              topology=None, members=[])  # fmt: skip


def _bits(ops: frozenset[int]) -> int:
    return sum(1 << op for op in ops)


def _tasks(tasks: set[tuple[str, int]]) -> list[Any]:
    by_sub: dict[str, list[int]] = {}
    for sid, p in tasks:
        by_sub.setdefault(sid, []).append(p)
    return [M.Assignment.TaskIds(subtopology_id=sid, partitions=sorted(ps)) for sid, ps in sorted(by_sub.items())]


def _assignment(a: Assignment) -> Any:
    return M.Assignment(active_tasks=_tasks(a.active), standby_tasks=_tasks(a.standby), warmup_tasks=[])


def _offsets(offsets: dict[tuple[str, int], int]) -> list[Any]:
    return [M.TaskOffset(subtopology_id=s, partition=p, offset=o) for (s, p), o in sorted(offsets.items())]


def _topology(g: StreamsGroup) -> Any:
    topo = g.topology
    if topo is None:
        return DG.Topology(epoch=-1, subtopologies=None)
    ready = g.configured is not None and g.configured.ready
    sizes = g.configured.partitions if g.configured is not None and ready else {}

    def info(t: TopicInfo) -> Any:
        kvs = [TI.KeyValue(key=k, value=v) for k, v in sorted(t.configs)]
        width = sizes.get(t.name, t.partitions)
        return TI(name=t.name, partitions=width, replication_factor=t.replication_factor, topic_configs=kvs)

    S = DG.Topology.Subtopology
    return DG.Topology(epoch=topo.epoch, subtopologies=[
        S(subtopology_id=s.subtopology_id, source_topics=sorted(s.source_topics),
          repartition_sink_topics=sorted(s.repartition_sinks),
          state_changelog_topics=[info(t) for t in sorted(s.changelogs, key=lambda t: t.name)],
          repartition_source_topics=[info(t) for t in sorted(s.repartition_sources, key=lambda t: t.name)])
        for s in sorted(topo.subtopologies, key=lambda s: s.subtopology_id)
    ])  # fmt: skip


def _describe(ctx: BrokerContext, req: Request, gid: str) -> tuple[Any, set[str]]:
    if not gid:
        return _error(gid, E.INVALID_GROUP_ID, None), set()
    if not ctx.access.authorize(req, AclOperation.DESCRIBE, ResourceType.GROUP, gid):
        return _error(gid, E.GROUP_AUTHORIZATION_FAILED, None), set()
    g = ctx.groups.group(gid)
    if g is None:
        known = ctx.share.groups.get(gid) is not None
        return _error(
            gid, E.GROUP_ID_NOT_FOUND, f"Group {gid} is not a streams group." if known else f"Group {gid} not found."
        ), set()
    if not isinstance(g, StreamsGroup):
        return _error(gid, E.GROUP_ID_NOT_FOUND, f"Group {gid} is not a streams group."), set()
    members = [
        M(member_id=m.member_id, member_epoch=m.epoch, instance_id=m.instance_id, rack_id=m.rack_id,
          client_id=m.client_id, client_host=m.client_host, topology_epoch=m.topology_epoch, process_id=m.process_id,
          user_endpoint=M.Endpoint(host=m.endpoint[0], port=m.endpoint[1]) if m.endpoint else None,
          client_tags=[M.KeyValue(key=k, value=v) for k, v in sorted(m.client_tags.items())],
          task_offsets=_offsets(m.task_offsets), task_end_offsets=_offsets(m.task_end_offsets),
          assignment=_assignment(m.owns()), target_assignment=_assignment(g.target.get(m.member_id, Assignment())),
          is_classic=False)
        for m in g.members.values()
    ]  # fmt: skip
    out = DG(error_code=0, error_message=None, group_id=gid, group_state=g.state_name, group_epoch=g.epoch,
             assignment_epoch=g.assignment_epoch, topology=_topology(g), members=members)  # fmt: skip
    if req.body.include_authorized_operations:
        out.authorized_operations = _bits(authorized_operations(ctx, req, ResourceType.GROUP, gid))
    if req.version >= 1:
        out.topology_description_status = NOT_STORED if req.body.include_topology_description else NOT_REQUESTED
        out.assignor_name = "sticky"
    return out, (g.topology.topic_names() if g.topology is not None else set())


@handles(ApiKey.StreamsGroupDescribe, 0, 1)
def handle(ctx: BrokerContext, req: Request) -> R:
    if ctx.features.level("streams.version") < 1:
        return R(throttle_time_ms=0, groups=[_error(gid, E.UNSUPPORTED_VERSION, DISABLED_MESSAGE)
                                             for gid in req.body.group_ids])  # fmt: skip
    # Kafka answers the empty ids first (refused before the coordinator is asked), then the others in order.
    ids = [gid for gid in req.body.group_ids if not gid] + [gid for gid in req.body.group_ids if gid]
    described = [_describe(ctx, req, gid) for gid in ids]
    if ctx.access.authorizer is not None:
        every = set().union(*(names for _, names in described))
        allowed = ctx.access.authorize_names(req, AclOperation.DESCRIBE, ResourceType.TOPIC, every)
        described = [(g if names <= allowed else _error(g.group_id, E.TOPIC_AUTHORIZATION_FAILED, HIDDEN_TOPICS), names)
                     for g, names in described]  # fmt: skip
    return R(throttle_time_ms=0, groups=[g for g, _ in described])
