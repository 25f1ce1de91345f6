"""The group coordinator's two state machines, driven in-process (no sockets, no client library).

The black-box tests (test_groups.py, test_kip848.py) prove real clients work; these pin the transitions
themselves with small timeouts: classic join/sync/heartbeat/leave, KIP-394 member ids, static members,
session and rebalance timeouts, the initial delay; KIP-848 epochs, revocation before grant, leaving,
fencing. Every coordinator runs on a real `GroupStore` in tmp_path whose persist callback syncs the log,
so a "restart" is a second coordinator on the same files.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

from logbroker.broker.groups import (
    ClassicGroup,
    Committed,
    ConsumerGroup,
    Coordinator,
    CoordinatorConfig,
    GroupError,
    GroupState,
    GroupStore,
    HeartbeatResult,
    JoinRequest,
    JoinResult,
)
from logbroker.protocol import ApiKey, api
from logbroker.protocol.errors import ErrorCode as E

HB = api(ApiKey.ConsumerGroupHeartbeat).request  # the wire request class the handler hands over
TOPIC_ID = str(uuid.uuid4())
FAST: dict[str, Any] = {"initial_rebalance_delay_ms": 0, "min_session_timeout_ms": 10}  # tiny sessions allowed


def run(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test on a fresh event loop (pytest-asyncio is not a dependency), bounded in time."""

    @functools.wraps(test)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(asyncio.wait_for(test(*args, **kwargs), 10))

    return wrapper


class Seams:
    """The coordinator's durability and topic table: its store synced on every commit."""

    def __init__(self, topics: dict[str, tuple[str, int]] | None) -> None:
        self.topics = topics if topics is not None else {}
        self.store: GroupStore | None = None

    async def commit(self) -> None:
        if self.store is not None:
            self.store.log.sync()

    def defer(self, delay: float) -> None:
        if self.store is not None:
            self.store.log.sync()  # at once: these tests read the store back as a restart would

    def table(self) -> dict[str, tuple[str, int]]:
        return self.topics

    def by_id(self, topic_id: str | None) -> None:
        return None

    def log(self, topic: str, partition: int) -> None:
        return None


@asynccontextmanager
async def coordinator(
    data: Path, topics: dict[str, tuple[str, int]] | None = None, *, sweeper: bool = False, **config: Any
) -> AsyncIterator[Coordinator]:
    """A coordinator on `data`, stopped and its store closed on exit (a clean shutdown). Without its sweeper
    task, tests sweep explicitly (`until`), so the sweeper's first offsets-retention pass (which drops empty
    groups without offsets) cannot race them."""
    seams = Seams(topics)
    seams.store = GroupStore(data, True)
    coord = Coordinator(seams.store, CoordinatorConfig(**config), seams, seams)
    if sweeper:
        coord.start()
    try:
        yield coord
    finally:
        await coord.stop()
        await asyncio.sleep(0.01)  # let background persists (`save_soon`) write before the store closes
        coord.store.close()


def join_req(
    member_id: str = "",
    *,
    group: str = "g",
    instance: str | None = None,
    session_ms: int = 5000,
    rebalance_ms: int = 5000,
    metadata: bytes = b"meta",
    require_known: bool = True,
    skip_assignment: bool = True,
) -> JoinRequest:
    return JoinRequest(
        group_id=group,
        member_id=member_id,
        instance_id=instance,
        client_id="c",
        client_host="/127.0.0.1",
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=rebalance_ms,
        protocol_type="consumer",
        protocols=[("range", metadata)],
        require_known_member_id=require_known,
        supports_skip_assignment=skip_assignment,
    )


async def join_new(coord: Coordinator, **kw: Any) -> JoinResult:
    """KIP-394's two steps: get a member id, then join with it."""
    first = await coord.join(join_req(**kw))
    assert first.error == E.MEMBER_ID_REQUIRED and first.member_id
    return await coord.join(join_req(first.member_id, **kw))


def classic(coord: Coordinator, gid: str = "g") -> ClassicGroup:
    g = coord.group(gid)
    assert isinstance(g, ClassicGroup)
    return g


def kip848(coord: Coordinator, gid: str = "g") -> ConsumerGroup:
    g = coord.group(gid)
    assert isinstance(g, ConsumerGroup)
    return g


async def until(coord: Coordinator, cond: Callable[[], bool], timeout: float = 2.0) -> None:
    """Sweep (expire sessions, complete overdue joins) until `cond` holds."""
    deadline = time.monotonic() + timeout
    while True:
        coord.sweep(time.monotonic())
        if cond():
            return
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


# ---------------------------------------------------------------------------------------------- classic


@run
async def test_classic_join_sync_heartbeat_leave(tmp_path: Path) -> None:
    async with coordinator(tmp_path, **FAST) as coord:
        res = await join_new(coord, metadata=b"sub")
        mid = res.member_id
        assert (res.error, res.generation, res.leader, res.protocol) == (E.NONE, 1, mid, "range")
        assert res.members == [(mid, None, b"sub")]  # the leader gets every member's metadata
        assert classic(coord).state == GroupState.COMPLETING
        assert await coord.sync("g", mid, 1, None, "consumer", "range", {mid: b"assign"}) == (E.NONE, b"assign")
        assert classic(coord).state == GroupState.STABLE
        assert coord.heartbeat("g", mid, 1, None) == E.NONE
        assert coord.heartbeat("g", mid, 0, None) == E.ILLEGAL_GENERATION
        assert coord.heartbeat("g", "nobody", 1, None) == E.UNKNOWN_MEMBER_ID
        assert await coord.sync("g", mid, 1, None, "consumer", "roundrobin", {}) == (E.INCONSISTENT_GROUP_PROTOCOL, b"")
        top, members = coord.leave("g", [(mid, None)])
        assert top == E.NONE and members == [(mid, None, E.NONE)]
        g = classic(coord)
        assert g.state == GroupState.EMPTY and not g.members and g.leader is None
        assert coord.heartbeat("g", mid, 1, None) == E.UNKNOWN_MEMBER_ID
        assert coord.leave("g", [(mid, None)]).error == E.UNKNOWN_MEMBER_ID


@run
async def test_classic_request_checks_come_before_the_group(tmp_path: Path) -> None:
    async with coordinator(tmp_path, **FAST) as coord:
        assert (await coord.join(join_req(group=""))).error == E.INVALID_GROUP_ID
        assert (await coord.join(join_req(session_ms=5))).error == E.INVALID_SESSION_TIMEOUT
        assert coord.group("g") is None  # a refused join creates no group
        res = await join_new(coord)
        assert res.error == E.NONE
        other = dataclasses.replace(join_req(), protocols=[("roundrobin", b"")])
        assert (await coord.join(other)).error == E.INCONSISTENT_GROUP_PROTOCOL  # no protocol in common
        assert (await coord.join(dataclasses.replace(join_req(), protocols=[]))).error == E.INCONSISTENT_GROUP_PROTOCOL


@run
async def test_kip394_member_id_is_required_and_pending_ids_expire(tmp_path: Path) -> None:
    async with coordinator(tmp_path, **FAST) as coord:
        assert (await coord.join(join_req("made-up"))).error == E.UNKNOWN_MEMBER_ID
        first = await coord.join(join_req(session_ms=100))
        assert first.error == E.MEMBER_ID_REQUIRED and first.member_id.startswith("c-")
        assert not classic(coord).members and first.member_id in classic(coord).pending
        await until(coord, lambda: not classic(coord).pending)  # the sweeper forgets an id never used
        assert (await coord.join(join_req(first.member_id))).error == E.UNKNOWN_MEMBER_ID
        # Before v4 (no KIP-394) a member joins in one step.
        res = await coord.join(join_req(require_known=False))
        assert res.error == E.NONE and res.generation == 1 and res.leader == res.member_id


async def two_static_members(coord: Coordinator, session_a: int = 5000) -> tuple[str, str]:
    """Static members a ("a", leader) and b ("b") in generation 2 (b's arrival made a rejoin), not yet synced."""
    a1 = await coord.join(join_req(instance="a", session_ms=session_a))  # static members join in one step
    assert (a1.error, a1.generation) == (E.NONE, 1)
    b_join = asyncio.create_task(coord.join(join_req(instance="b")))
    await until(coord, lambda: classic(coord).state == GroupState.PREPARING)
    a = await coord.join(join_req(a1.member_id, instance="a", session_ms=session_a))
    b = await b_join
    assert a.generation == b.generation == 2 and a.leader == b.leader == a.member_id
    assert len(a.members) == 2 and b.members == []
    return a.member_id, b.member_id


@run
async def test_static_member_rejoin_takes_over_without_rebalance_and_fences_the_old_id(tmp_path: Path) -> None:
    async with coordinator(tmp_path, **FAST) as coord:
        a, b = await two_static_members(coord)
        follower_sync = asyncio.create_task(coord.sync("g", b, 2, "b", None, None, {}))
        await asyncio.sleep(0.01)
        assert await coord.sync("g", a, 2, "a", None, None, {a: b"A", b: b"B"}) == (E.NONE, b"A")
        assert await follower_sync == (E.NONE, b"B")

        # b restarts: a new member id, same generation, its old assignment, no rebalance.
        b2 = await coord.join(join_req(instance="b"))
        assert b2.error == E.NONE and b2.member_id != b and b2.generation == 2 and b2.leader == a
        assert classic(coord).state == GroupState.STABLE
        assert await coord.sync("g", b2.member_id, 2, "b", None, None, {}) == (E.NONE, b"B")
        # The old incarnation is fenced everywhere (not UNKNOWN_MEMBER_ID, on which it would rejoin).
        assert coord.heartbeat("g", b, 2, "b") == E.FENCED_INSTANCE_ID
        assert await coord.sync("g", b, 2, "b", None, None, {}) == (E.FENCED_INSTANCE_ID, b"")
        assert (await coord.join(join_req(b, instance="b"))).error == E.FENCED_INSTANCE_ID
        assert coord.check_commit("g", b, 2, "b") == E.FENCED_INSTANCE_ID
        assert coord.leave("g", [(b, "b")]).error == E.FENCED_INSTANCE_ID
        assert coord.heartbeat("g", a, 2, "a") == E.NONE  # the others never noticed

        # The leader restarts: v9+ is told to skip the assignment, older versions are named a follower.
        a3 = await coord.join(join_req(instance="a"))
        assert a3.leader == a3.member_id and a3.skip_assignment and len(a3.members) == 2
        a4 = await coord.join(join_req(instance="a", skip_assignment=False))
        assert a4.leader == a3.member_id != a4.member_id and not a4.members and not a4.skip_assignment
        assert classic(coord).generation == 2 and classic(coord).state == GroupState.STABLE

        # Leaving by instance id alone removes the current incarnation.
        left = coord.leave("g", [("", "b")])
        assert left.error == E.NONE and left.members == [(b2.member_id, "b", E.NONE)]
        assert b2.member_id not in classic(coord).members


@run
async def test_session_expiry_removes_the_member_and_rebalances_the_rest(tmp_path: Path) -> None:
    async with coordinator(tmp_path, sweeper=True, **FAST) as coord:  # the real sweeper task expires sessions
        a, b = await two_static_members(coord, session_a=150)
        await coord.sync("g", a, 2, "a", None, None, {})
        # Only b heartbeats; a's session runs out and b is told to rejoin.
        deadline = time.monotonic() + 2
        while a in classic(coord).members:
            assert time.monotonic() < deadline, "a was not expired"
            coord.heartbeat("g", b, 2, "b")
            await asyncio.sleep(0.02)
        assert coord.heartbeat("g", b, 2, "b") == E.REBALANCE_IN_PROGRESS
        assert coord.heartbeat("g", a, 2, "a") == E.UNKNOWN_MEMBER_ID
        rejoined = await coord.join(join_req(b, instance="b"))
        assert rejoined.generation == 3 and rejoined.leader == b
        assert [m for m, _, _ in rejoined.members] == [b]


@run
async def test_the_last_member_expiring_leaves_the_group_empty(tmp_path: Path) -> None:
    async with coordinator(tmp_path, **FAST) as coord:
        res = await coord.join(join_req(instance="s", session_ms=100))
        assert res.generation == 1
        start = time.monotonic()
        await until(coord, lambda: classic(coord).state == GroupState.EMPTY)
        assert time.monotonic() - start >= 0.05 and not classic(coord).members
        assert coord.heartbeat("g", res.member_id, 1, "s") == E.UNKNOWN_MEMBER_ID


@run
async def test_rebalance_with_two_members_bumps_the_generation(tmp_path: Path) -> None:
    async with coordinator(tmp_path, **FAST) as coord:
        a = await join_new(coord, metadata=b"ma")
        assert await coord.sync("g", a.member_id, 1, None, None, None, {a.member_id: b"all"}) == (E.NONE, b"all")

        first = await coord.join(join_req())
        b_join = asyncio.create_task(coord.join(join_req(first.member_id, metadata=b"mb")))
        await until(coord, lambda: classic(coord).state == GroupState.PREPARING)
        assert coord.heartbeat("g", a.member_id, 1, None) == E.REBALANCE_IN_PROGRESS
        assert (await coord.sync("g", a.member_id, 1, None, None, None, {})).error == E.REBALANCE_IN_PROGRESS
        a2 = await coord.join(join_req(a.member_id, metadata=b"ma"))
        b2 = await b_join
        assert a2.generation == b2.generation == 2
        assert a2.leader == b2.leader == a.member_id
        assert sorted(a2.members) == sorted([(a.member_id, None, b"ma"), (b2.member_id, None, b"mb")])
        assert b2.members == []  # followers get no metadata

        b_sync = asyncio.create_task(coord.sync("g", b2.member_id, 2, None, None, None, {}))
        await asyncio.sleep(0.02)
        assert not b_sync.done()  # a follower waits for the leader's assignment
        assignments = {a.member_id: b"p0", b2.member_id: b"p1"}
        assert await coord.sync("g", a.member_id, 2, None, None, None, assignments) == (E.NONE, b"p0")
        assert await b_sync == (E.NONE, b"p1")
        assert coord.heartbeat("g", a.member_id, 2, None) == coord.heartbeat("g", b2.member_id, 2, None) == E.NONE
        assert coord.heartbeat("g", b2.member_id, 1, None) == E.ILLEGAL_GENERATION

        # A follower rejoining unchanged gets the current generation back: no rebalance.
        same = await coord.join(join_req(b2.member_id, metadata=b"mb"))
        assert same.generation == 2 and classic(coord).state == GroupState.STABLE

        # One of two leaving: the other must rejoin, and becomes leader of generation 3.
        assert coord.leave("g", [(a.member_id, None)]).error == E.NONE
        assert coord.heartbeat("g", b2.member_id, 2, None) == E.REBALANCE_IN_PROGRESS
        b3 = await coord.join(join_req(b2.member_id, metadata=b"mb"))
        assert b3.generation == 3 and b3.leader == b2.member_id


@run
async def test_member_that_does_not_rejoin_within_the_rebalance_timeout_is_dropped(tmp_path: Path) -> None:
    async with coordinator(tmp_path, **FAST) as coord:
        a = await join_new(coord, rebalance_ms=150)
        await coord.sync("g", a.member_id, 1, None, None, None, {})
        first = await coord.join(join_req())
        b_join = asyncio.create_task(coord.join(join_req(first.member_id, rebalance_ms=150)))
        await until(coord, lambda: classic(coord).state == GroupState.PREPARING)
        start = time.monotonic()
        while not b_join.done():  # a heartbeats (so its session lives) but never rejoins
            assert time.monotonic() - start < 2, "the rebalance did not time out"
            coord.heartbeat("g", a.member_id, 1, None)
            coord.sweep(time.monotonic())
            await asyncio.sleep(0.02)
        assert time.monotonic() - start >= 0.1
        b = b_join.result()
        assert b.error == E.NONE and b.generation == 2 and b.leader == b.member_id
        assert list(classic(coord).members) == [b.member_id]
        assert coord.heartbeat("g", a.member_id, 1, None) == E.UNKNOWN_MEMBER_ID


@run
async def test_initial_rebalance_delay_gathers_members_starting_together(tmp_path: Path) -> None:
    async with coordinator(tmp_path, initial_rebalance_delay_ms=150, min_session_timeout_ms=10) as coord:
        ids = [(await coord.join(join_req())).member_id for _ in range(2)]
        start = time.monotonic()
        a = asyncio.create_task(coord.join(join_req(ids[0])))
        await asyncio.sleep(0.05)
        assert not a.done()  # the first member waits for the delay
        b = asyncio.create_task(coord.join(join_req(ids[1])))
        ra, rb = await a, await b
        assert time.monotonic() - start >= 0.15
        assert ra.generation == rb.generation == 1  # one generation for both
        assert ra.leader == rb.leader == ids[0] and len(ra.members) == 2
        follower = asyncio.create_task(coord.sync("g", ids[1], 1, None, None, None, {}))
        await asyncio.sleep(0.01)
        await coord.sync("g", ids[0], 1, None, None, None, {})
        await follower

        # The delay is for an empty group's first rebalance only: a rejoin of a live group is not held.
        start = time.monotonic()
        a = asyncio.create_task(coord.join(join_req(ids[0], metadata=b"changed")))
        await until(coord, lambda: classic(coord).state == GroupState.PREPARING)
        rb = await coord.join(join_req(ids[1]))
        ra = await a
        assert ra.generation == rb.generation == 2 and time.monotonic() - start < 0.15


@run
async def test_classic_group_and_offsets_survive_a_restart(tmp_path: Path) -> None:
    async with coordinator(tmp_path, **FAST) as coord:
        a = await join_new(coord)
        await coord.sync("g", a.member_id, 1, None, None, None, {a.member_id: b"x"})
        assert coord.check_commit("g", a.member_id, 1, None) == E.NONE
        assert coord.check_commit("g", a.member_id, 0, None) == E.ILLEGAL_GENERATION
        assert coord.check_commit("g", "", -1, None) == E.UNKNOWN_MEMBER_ID  # not while it has members
        await coord.commit("g", {("t", 0): Committed(42, 3, "meta", 1)})
        await coord.commit("other", {("t", 1): Committed(7, -1, None, 1)})  # a memberless group
    async with coordinator(tmp_path, **FAST) as coord:
        g = classic(coord)
        assert g.state == GroupState.STABLE and g.generation == 1 and g.members[a.member_id].assignment == b"x"
        assert coord.heartbeat("g", a.member_id, 1, None) == E.NONE  # members carry on
        assert coord.fetch_offsets("g", None) == {("t", 0): Committed(42, 3, "meta", 1)}
        assert coord.fetch_offsets("other", [("t", 1), ("t", 2)]) == {("t", 1): Committed(7, -1, None, 1)}
        assert await coord.delete_group("g") == E.NON_EMPTY_GROUP
        assert await coord.delete_group("other") == E.NONE
        coord.forget_topic("t")
        assert coord.fetch_offsets("g", None) == {}
        await asyncio.sleep(0.05)  # forget_topic persists in the background
    async with coordinator(tmp_path, **FAST) as coord:
        assert coord.group("other") is None and coord.fetch_offsets("g", None) == {}


# ---------------------------------------------------------------------------------------------- KIP-848


def hb(
    member_id: str = "",
    epoch: int = 0,
    *,
    group: str = "g",
    topics: list[str] | None = None,
    owned: set[int] | None = None,
    instance: str | None = None,
) -> Any:
    # Owning nothing is an empty list (what clients send when joining: Kafka refuses any entry then).
    tps = None if owned is None else [HB.TopicPartitions(topic_id=uuid.UUID(TOPIC_ID), partitions=sorted(owned))]
    if owned is not None and not owned:
        tps = []
    return HB(
        group_id=group,
        member_id=member_id,
        member_epoch=epoch,
        instance_id=instance,
        rebalance_timeout_ms=5000,
        subscribed_topic_names=topics,
        topic_partitions=tps,
    )


def parts(res: HeartbeatResult) -> set[int] | None:
    return None if res.assignment is None else res.assignment.get(TOPIC_ID, set())


TOPICS = {"t": (TOPIC_ID, 4)}


@run
async def test_kip848_epochs_bump_and_partitions_are_revoked_before_granted(tmp_path: Path) -> None:
    async with coordinator(tmp_path, TOPICS, **FAST) as coord:
        r1 = await coord.consumer_heartbeat(hb(topics=["t"], owned=set()), "c1", "/h")
        m1, e1 = r1.member_id or "", r1.epoch
        assert r1.error == E.NONE and m1 and parts(r1) == {0, 1, 2, 3}
        assert e1 == kip848(coord).epoch == kip848(coord).assignment_epoch > 0
        assert kip848(coord).state_name == "Stable"
        again = await coord.consumer_heartbeat(hb(m1, e1, owned={0, 1, 2, 3}), "c1", "/h")
        assert again.epoch == e1 and again.assignment is None  # nothing new, nothing sent

        r2 = await coord.consumer_heartbeat(hb(topics=["t"], owned=set()), "c2", "/h")
        m2, e2 = r2.member_id or "", r2.epoch
        assert e2 == kip848(coord).epoch > e1  # a member joining bumps the group epoch
        assert parts(r2) == set()  # its target is still owned by m1: nothing granted yet
        target1, target2 = (kip848(coord).target[m][TOPIC_ID] for m in (m1, m2))
        assert target1 | target2 == {0, 1, 2, 3} and len(target2) == 2 and not target1 & target2

        def owned_twice() -> set[int]:
            g = kip848(coord)
            held = [g.members[m].assigned.get(TOPIC_ID, set()) | (g.members[m].reported or {}).get(TOPIC_ID, set())
                    for m in (m1, m2)]  # fmt: skip
            return held[0] & held[1]

        # m1 is told to give up m2's partitions, keeping its epoch until it reports them released.
        r1 = await coord.consumer_heartbeat(hb(m1, e1, owned={0, 1, 2, 3}), "c1", "/h")
        assert r1.epoch == e1 and parts(r1) == target1
        assert kip848(coord).state_name == "Reconciling"
        r2 = await coord.consumer_heartbeat(hb(m2, e2, owned=set()), "c2", "/h")
        assert parts(r2) in (None, set()) and not owned_twice()  # m1 has not reported them released
        r1 = await coord.consumer_heartbeat(hb(m1, e1, owned=target1), "c1", "/h")
        assert r1.epoch == e2  # released: m1 moves to the new epoch
        r2 = await coord.consumer_heartbeat(hb(m2, e2, owned=set()), "c2", "/h")
        assert parts(r2) == target2 and r2.epoch == e2 and not owned_twice()
        assert kip848(coord).state_name == "Stable"

        # The previous epoch is still accepted (a response may have been lost), an older one is fenced.
        assert (await coord.consumer_heartbeat(hb(m1, e1, owned=target1), "c1", "/h")).error == E.NONE
        assert (await coord.consumer_heartbeat(hb(m1, e1 - 1), "c1", "/h")).error == E.FENCED_MEMBER_EPOCH
        assert coord.check_commit("g", m1, e2, None) == E.NONE
        assert coord.check_commit("g", m1, e1, None) == E.STALE_MEMBER_EPOCH


@run
async def test_kip848_member_leaving_with_epoch_minus_one(tmp_path: Path) -> None:
    async with coordinator(tmp_path, TOPICS, **FAST) as coord:
        r = await coord.consumer_heartbeat(hb(topics=["t"]), "c", "/h")
        mid = r.member_id or ""
        left = await coord.consumer_heartbeat(hb(mid, r.epoch), "c", "/h")
        left = await coord.consumer_heartbeat(hb(mid, -1), "c", "/h")
        assert (left.error, left.member_id, left.epoch) == (E.NONE, mid, -1)
        g = kip848(coord)
        assert not g.members and g.epoch == r.epoch + 1 and g.state_name == "Empty" and g.empty_since_ms > 0
        assert (await coord.consumer_heartbeat(hb(mid, r.epoch), "c", "/h")).error == E.UNKNOWN_MEMBER_ID
    async with coordinator(tmp_path, TOPICS, **FAST) as coord:  # the departure was persisted
        assert not kip848(coord).members and kip848(coord).epoch == r.epoch + 1
        assert await coord.delete_group("g") == E.NONE  # an empty KIP-848 group can be deleted
        assert coord.group("g") is None
    async with coordinator(tmp_path, TOPICS, **FAST) as coord:
        assert coord.group("g") is None


@run
async def test_kip848_fenced_and_unknown_members(tmp_path: Path) -> None:
    async with coordinator(tmp_path, TOPICS, **FAST) as coord:
        unknown = await coord.consumer_heartbeat(hb("ghost", 3), "c", "/h")
        assert unknown.error == E.GROUP_ID_NOT_FOUND and coord.group("g") is None  # no group made for it
        assert unknown.message == "Consumer group g not found."
        r = await coord.consumer_heartbeat(hb(topics=["t"]), "c", "/h")
        fenced = await coord.consumer_heartbeat(hb(r.member_id or "", r.epoch + 5), "c", "/h")
        assert fenced.error == E.FENCED_MEMBER_EPOCH
        assert (await coord.consumer_heartbeat(hb("ghost", 1), "c", "/h")).error == E.UNKNOWN_MEMBER_ID
        assert coord.check_commit("g", "ghost", 1, None) == E.UNKNOWN_MEMBER_ID
        assert (await coord.consumer_heartbeat(hb(group=""), "c", "/h")).error == E.INVALID_REQUEST
        bad = await coord.consumer_heartbeat(
            HB(group_id="g", member_id="", member_epoch=0, server_assignor="x", rebalance_timeout_ms=1,
               subscribed_topic_names=["t"]), "c", ""
        )  # fmt: skip
        assert bad.error == E.UNSUPPORTED_ASSIGNOR
        no_timeout = await coord.consumer_heartbeat(HB(group_id="g2", member_id="", member_epoch=0), "c", "")
        assert (no_timeout.error, no_timeout.message) == (
            E.INVALID_REQUEST,
            "RebalanceTimeoutMs must be provided in first request.",
        )
        assert coord.group("g2") is None


@run
async def test_kip848_session_expiry_and_static_instance_in_use(tmp_path: Path) -> None:
    async with coordinator(tmp_path, TOPICS, consumer_session_timeout_ms=150, **FAST) as coord:
        r = await coord.consumer_heartbeat(hb(topics=["t"], instance="i"), "c", "/h")
        dup = await coord.consumer_heartbeat(hb(topics=["t"], instance="i"), "c", "/h")
        assert dup.error == E.UNRELEASED_INSTANCE_ID
        assert list(kip848(coord).members) == [r.member_id]
        await until(coord, lambda: not kip848(coord).members)
        assert kip848(coord).epoch == r.epoch + 1


@run
async def test_a_group_id_is_one_kind_at_a_time(tmp_path: Path) -> None:
    async with coordinator(tmp_path, TOPICS, **FAST) as coord:
        a = await join_new(coord)
        refused = await coord.consumer_heartbeat(hb(topics=["t"]), "c", "/h")
        assert refused.error == E.GROUP_ID_NOT_FOUND
        await coord.commit("g", {("t", 0): Committed(5, -1, None, 1)})
        coord.leave("g", [(a.member_id, None)])
        r = await coord.consumer_heartbeat(hb(topics=["t"]), "c", "/h")  # empty now: it becomes KIP-848
        assert r.error == E.NONE and kip848(coord).offsets == {("t", 0): Committed(5, -1, None, 1)}
        # A classic member may join a live consumer group (KIP-848 migration), but only with a consumer-protocol
        # subscription it can read: this one's metadata is none.
        first = await coord.join(join_req())
        assert first.error == E.MEMBER_ID_REQUIRED
        assert (await coord.join(join_req(first.member_id))).error == E.INCONSISTENT_GROUP_PROTOCOL
        # The consumer-protocol member speaks no classic API.
        assert coord.heartbeat("g", r.member_id or "", 1, None) == E.UNKNOWN_MEMBER_ID
        assert (await coord.sync("g", r.member_id or "", 1, None, None, None, {})).error == E.UNKNOWN_MEMBER_ID


# ---------------------------------------------------------------------------------------------- offsets


@run
async def test_offset_delete_refuses_topics_a_member_subscribes_to(tmp_path: Path) -> None:
    sub = ConsumerProtocolSubscription(version=0, topics=["t"], user_data=None).encode(version=0, header=True)
    async with coordinator(tmp_path, TOPICS, **FAST) as coord:
        with pytest.raises(GroupError) as exc:
            await coord.delete_offsets("g", [("t", 0)])
        assert exc.value.code == E.GROUP_ID_NOT_FOUND
        a = await join_new(coord, metadata=sub)
        await coord.commit("g", {("t", 0): Committed(1, -1, None, 1), ("u", 0): Committed(2, -1, None, 1)})
        result = await coord.delete_offsets("g", [("t", 0), ("u", 0), ("v", 0)])
        assert result == {("t", 0): E.GROUP_SUBSCRIBED_TO_TOPIC, ("u", 0): E.NONE, ("v", 0): E.NONE}
        assert coord.fetch_offsets("g", None) == {("t", 0): Committed(1, -1, None, 1)}
        # Metadata that is no subscription at all: Kafka cannot tell what the group reads, so it keeps them all.
        await coord.join(join_req(a.member_id, metadata=b"\xff garbage"))
        assert await coord.delete_offsets("g", [("t", 0)]) == {("t", 0): E.GROUP_SUBSCRIBED_TO_TOPIC}
        # KIP-848 members subscribe by name in their heartbeats.
        await coord.commit("k", {("t", 0): Committed(1, -1, None, 1)})
        await coord.consumer_heartbeat(hb(group="k", topics=["t"]), "c", "/h")
        assert await coord.delete_offsets("k", [("t", 0)]) == {("t", 0): E.GROUP_SUBSCRIBED_TO_TOPIC}


@run
async def test_offsets_of_long_empty_groups_expire(tmp_path: Path) -> None:
    async with coordinator(tmp_path, offsets_retention_ms=100, **FAST) as coord:
        old = int(time.time() * 1000) - 1000
        await coord.commit("old", {("t", 0): Committed(1, -1, None, old)})
        classic(coord, "old").empty_since_ms = old
        await coord.commit("new", {("t", 0): Committed(1, -1, None, int(time.time() * 1000))})
        await coord.expire_offsets()
        assert coord.group("old") is None and coord.fetch_offsets("new", None)
    async with coordinator(tmp_path, offsets_retention_ms=100, **FAST) as coord:
        assert coord.group("old") is None and coord.group("new") is not None


# ---------------------------------------------------------------------------------------------- bounds


def _store_keys(data: Path) -> dict[tuple[Any, ...], Any]:
    """What a restart would load from the group store."""
    store = GroupStore(data, True)
    try:
        return store.load()
    finally:
        store.close()


@run
async def test_offsets_cleanup_follows_kafkas_expiration_rules(tmp_path: Path) -> None:
    """Kafka's cleanup, rule by rule: what an offset's retention counts from depends on the group; offsets of
    subscribed topics never expire; an empty group left without offsets goes, with a tombstone if it was
    stored, and stays gone after a restart."""
    sub = ConsumerProtocolSubscription(version=0, topics=["t"], user_data=None).encode(version=0, header=True)
    day = 24 * 3600 * 1000
    async with coordinator(tmp_path, TOPICS, offsets_retention_ms=day, **FAST) as coord:
        now = int(time.time() * 1000)
        # A classic group that had members: offsets go a retention period after it became Empty, whatever
        # their commit time (one committed long ago stays while the group was empty only briefly).
        a = await join_new(coord, group="emptied", metadata=sub)
        await coord.sync("emptied", a.member_id, 1, None, None, None, {a.member_id: b""})
        await coord.commit("emptied", {("t", 0): Committed(1, -1, None, now - 2 * day), ("u", 0): Committed(
            2, -1, None, now - 2 * day)})  # fmt: skip
        await coord.expire_offsets()  # Stable: "t" is subscribed and stays; "u" is not and is old
        assert set(coord.fetch_offsets("emptied", None)) == {("t", 0)}
        coord.leave("emptied", [(a.member_id, None)])
        await asyncio.sleep(0.02)  # the Empty group record is written in the background
        await coord.expire_offsets()
        assert set(coord.fetch_offsets("emptied", None)) == {("t", 0)}  # empty for less than a day
        classic(coord, "emptied").empty_since_ms = now - day
        # A simple group (commits only): each offset a retention period after its commit, unless it carries
        # an explicit expiry (OffsetCommit v2-4), which wins either way.
        await coord.commit("simple", {("t", 0): Committed(1, -1, None, now - day + 60_000),
                                      ("t", 1): Committed(1, -1, None, now - day - 1),
                                      ("t", 2): Committed(1, -1, None, now, now - 1),
                                      ("t", 3): Committed(1, -1, None, now - 2 * day, now + 60_000)})  # fmt: skip
        # A KIP-848 group with a member: offsets of topics nobody subscribes to expire, others never.
        r = await coord.consumer_heartbeat(hb(group="k", topics=["t"], owned=set()), "c", "/h")
        await coord.commit("k", {("t", 0): Committed(1, -1, None, now - 2 * day),
                                 ("u", 0): Committed(1, -1, None, now - 2 * day)})  # fmt: skip
        # Empty groups without offsets: a KIP-394 join left pending, a KIP-848 member that left.
        assert (await coord.join(join_req(group="pending"))).error == E.MEMBER_ID_REQUIRED
        left = await coord.consumer_heartbeat(hb(group="left", topics=["t"], owned=set()), "c", "/h")
        await coord.consumer_heartbeat(hb(left.member_id or "", -1, group="left"), "c", "/h")
        await coord.expire_offsets()
        assert coord.group("emptied") is None
        assert set(coord.fetch_offsets("simple", None)) == {("t", 0), ("t", 3)}
        assert set(coord.fetch_offsets("k", None)) == {("t", 0)} and kip848(coord, "k").members
        assert coord.group("pending") is None and coord.group("left") is None
        assert (await coord.join(join_req(first_id := "c-gone", group="pending"))).error == E.UNKNOWN_MEMBER_ID
        assert coord.group("pending") is None, first_id  # a join naming a member makes no group
        await coord.consumer_heartbeat(hb(r.member_id or "", -1, group="k"), "c", "/h")
    keys = _store_keys(tmp_path)
    assert not [k for k in keys if k[1] in ("emptied", "left", "pending")]  # tombstoned (or never written)
    async with coordinator(tmp_path, TOPICS, offsets_retention_ms=day, **FAST) as coord:
        assert coord.group("emptied") is None and coord.group("left") is None
        assert set(coord.fetch_offsets("simple", None)) == {("t", 0), ("t", 3)}
        # "k" is empty now but its "t" offset is two days old: the next check takes it and the group.
        assert kip848(coord, "k").is_empty
        await coord.expire_offsets()
        assert coord.group("k") is None
    assert not [k for k in _store_keys(tmp_path) if k[1] == "k"]


@run
async def test_classic_group_max_size_counts_waiting_members_while_rebalancing(tmp_path: Path) -> None:
    """Kafka's acceptJoiningMember with group.max.size 2: an Empty group takes anyone; a Stable one takes
    newcomers while it has fewer than 2 members; during a rebalance it counts the members waiting in
    JoinGroup, so a member that has not rejoined yet loses its place to newcomers already waiting (and, as
    in Kafka, the join then completes at the rebalance timeout)."""
    async with coordinator(tmp_path, max_group_size=2, **FAST) as coord:
        fast = {"rebalance_ms": 200}
        a = await join_new(coord, **fast)
        await coord.sync("g", a.member_id, 1, None, None, None, {})
        b_id = (await coord.join(join_req(**fast))).member_id  # Stable with 1 member: accepted (pending)
        b = asyncio.create_task(coord.join(join_req(b_id, **fast)))  # a rebalance: waits for a to rejoin
        await until(coord, lambda: classic(coord).state == GroupState.PREPARING)
        c_first = await coord.join(join_req(**fast))  # 1 member waiting (b) < 2: accepted
        assert c_first.error == E.MEMBER_ID_REQUIRED
        c = asyncio.create_task(coord.join(join_req(c_first.member_id, **fast)))
        await until(coord, lambda: c_first.member_id in classic(coord).members)
        late = await coord.join(join_req(a.member_id, **fast))  # a has not rejoined: 2 are waiting, a is out
        assert (late.error, late.member_id) == (E.GROUP_MAX_SIZE_REACHED, "")
        await until(coord, lambda: b.done() and c.done())
        rb, rc = b.result(), c.result()
        assert rb.error == rc.error == E.NONE and set(classic(coord).members) == {b_id, c_first.member_id}
        assert (await coord.join(join_req(**fast))).error == E.GROUP_MAX_SIZE_REACHED  # full and Completing
        assert coord.heartbeat("g", a.member_id, rb.generation, None) == E.UNKNOWN_MEMBER_ID


@run
async def test_kip848_group_max_size(tmp_path: Path) -> None:
    async with coordinator(tmp_path, TOPICS, consumer_max_group_size=1, **FAST) as coord:
        a = await coord.consumer_heartbeat(hb(topics=["t"], owned=set()), "c", "/h")
        full = await coord.consumer_heartbeat(hb(topics=["t"], owned=set()), "c", "/h")
        assert (full.error, full.message) == (
            E.GROUP_MAX_SIZE_REACHED,
            "The consumer group has reached its maximum capacity of 1 members.",
        )
        again = await coord.consumer_heartbeat(hb(a.member_id or "", a.epoch, owned={0, 1, 2, 3}), "c", "/h")
        assert again.error == E.NONE and list(kip848(coord).members) == [a.member_id]


def test_group_ids_in_logs_and_limits() -> None:
    """Client-chosen ids reach log lines escaped and cut short; Kafka's string limits are in UTF-8 bytes."""
    from logbroker.broker.groups.model import for_log, is_blank, too_long

    assert for_log("g\n2099 ERROR x\x1b[0m\x00") == "g\\n2099 ERROR x\\x1b[0m\\x00"
    assert for_log("plain-é") == "plain-é"
    assert for_log("x" * 500).endswith("...(500 chars)") and len(for_log("x" * 500)) < 230
    assert not too_long("é" * 16383) and too_long("é" * 16384) and too_long("x" * 32768)
    assert not too_long(None) and not too_long("x" * 32767)
    assert is_blank("") and is_blank(" \t\x00\x1f") and not is_blank(None) and not is_blank("\u00a0")


# ---------------------------------------------------------------------------------------------- transactions


def _txn(offset: int, commit_ms: int = 1, metadata: str = "") -> Committed:
    return Committed(offset, -1, metadata, commit_ms)


async def txn_commit(
    coord: Coordinator,
    group: str,
    pid: int,
    offsets: dict[tuple[str, int], Committed],
    member: str = "",
    generation: int = -1,
    instance: str | None = None,
) -> dict[tuple[str, int], E]:
    return await coord.txn_commit(group, pid, 0, member, generation, instance, offsets, 4)


def _pending_keys(data: Path) -> list[tuple[Any, ...]]:
    return sorted(k for k in _store_keys(data) if k[0] == "t")


@run
async def test_txn_offsets_pending_until_the_transaction_ends_and_across_restarts(tmp_path: Path) -> None:
    """Pending transactional offsets are invisible to OffsetFetch and reported unstable; they survive a
    restart; commit turns them into committed offsets (keeping their commit time), abort drops them, and a
    repeated completion changes nothing."""
    async with coordinator(tmp_path) as coord:
        assert coord.group("g") is None
        assert await txn_commit(coord, "g", 7, {("t", 0): _txn(10, 111, "m"), ("t", 1): _txn(11, 111)}) == {
            ("t", 0): E.NONE,
            ("t", 1): E.NONE,
        }
        assert classic(coord).is_empty  # a commit from outside any generation makes a simple group
        assert await txn_commit(coord, "g", 8, {("t", 2): _txn(20)}) == {("t", 2): E.NONE}
        await coord.commit("g", {("u", 0): Committed(5, -1, None, 1)})
        assert coord.fetch_offsets("g", None) == {("u", 0): Committed(5, -1, None, 1)}
        assert coord.unstable_offsets("g", [("t", 0), ("t", 2), ("t", 3), ("u", 0)]) == {("t", 0), ("t", 2)}
        assert coord.unstable_offsets("other", [("t", 0)]) == set()
        assert sorted(coord.pending_groups(7)) == ["g"] and coord.pending_groups(9) == []
    assert _pending_keys(tmp_path) == [("t", "g", 7, "t", 0), ("t", "g", 7, "t", 1), ("t", "g", 8, "t", 2)]
    async with coordinator(tmp_path) as coord:
        assert coord.unstable_offsets("g", [("t", 0), ("t", 1), ("t", 2)]) == {("t", 0), ("t", 1), ("t", 2)}
        assert set(coord.fetch_offsets("g", None)) == {("u", 0)}
        await coord.complete_txn(7, ["g"], commit=True)
        await coord.complete_txn(8, ["g", "unknown"], commit=False)
        expected = {("t", 0): _txn(10, 111, "m"), ("t", 1): _txn(11, 111), ("u", 0): Committed(5, -1, None, 1)}
        assert coord.fetch_offsets("g", None) == expected
        assert coord.unstable_offsets("g", [("t", 0), ("t", 1), ("t", 2)]) == set()
        await coord.complete_txn(7, ["g"], commit=False)  # a retried marker: nothing left to do
        await coord.complete_txn(8, ["g"], commit=True)
        assert coord.fetch_offsets("g", None) == expected
    assert _pending_keys(tmp_path) == []
    async with coordinator(tmp_path) as coord:
        assert coord.fetch_offsets("g", None) == expected
        # A producer's second write of a partition in one transaction replaces its first.
        await txn_commit(coord, "g", 9, {("t", 0): _txn(30)})
        await txn_commit(coord, "g", 9, {("t", 0): _txn(31)})
        await coord.complete_txn(9, None, commit=True)  # None: every group it has offsets pending in
        assert coord.fetch_offsets("g", [("t", 0)]) == {("t", 0): _txn(31)}


@run
async def test_txn_offset_commit_checks_follow_kip447(tmp_path: Path) -> None:
    """Kafka's validateTransactionalOffsetCommit, next to OffsetCommit's own checks where they differ."""
    async with coordinator(tmp_path, TOPICS, offset_metadata_max_bytes=8, **FAST) as coord:
        tp = ("t", 0)
        # Unknown group: created only by a commit from outside any generation; ILLEGAL_GENERATION in every
        # version otherwise (OffsetCommit v9 says GROUP_ID_NOT_FOUND); the empty id is refused.
        assert await txn_commit(coord, "new", 1, {tp: _txn(1)}, "m", 3) == {tp: E.ILLEGAL_GENERATION}
        assert coord.check_commit("new", "m", 3, None, 9) == E.GROUP_ID_NOT_FOUND
        assert coord.group("new") is None
        assert await txn_commit(coord, "", 1, {tp: _txn(1)}) == {tp: E.INVALID_GROUP_ID}
        assert coord.group("") is None
        # Metadata over offset.metadata.max.bytes (Java chars): that partition only.
        big = {tp: _txn(1, metadata="x" * 9), ("t", 1): _txn(1, metadata="é" * 8)}
        assert await txn_commit(coord, "new", 1, big) == {tp: E.OFFSET_METADATA_TOO_LARGE, ("t", 1): E.NONE}
        assert coord.unstable_offsets("new", [tp, ("t", 1)]) == {("t", 1)}

        # A classic group with a static member, completing its rebalance (no SyncGroup yet).
        a = await coord.join(join_req(instance="i1"))  # a static member joins at once
        gen = a.generation
        assert classic(coord).state == GroupState.COMPLETING
        assert coord.check_commit("g", a.member_id, gen, "i1") == E.REBALANCE_IN_PROGRESS
        assert await txn_commit(coord, "g", 1, {tp: _txn(1)}, a.member_id, gen, "i1") == {tp: E.NONE}
        assert await txn_commit(coord, "g", 1, {tp: _txn(1)}, a.member_id, gen + 1, "i1") == {tp: E.ILLEGAL_GENERATION}
        assert await txn_commit(coord, "g", 1, {tp: _txn(1)}, "ghost", gen) == {tp: E.UNKNOWN_MEMBER_ID}
        assert await txn_commit(coord, "g", 1, {tp: _txn(1)}, "ghost", gen, "i1") == {tp: E.FENCED_INSTANCE_ID}
        assert await txn_commit(coord, "g", 1, {tp: _txn(1)}, a.member_id, gen, "i2") == {tp: E.UNKNOWN_MEMBER_ID}
        # v0-2 (no member id, generation -1) commit even while the group has members; OffsetCommit may not.
        assert coord.check_commit("g", "", -1, None) == E.UNKNOWN_MEMBER_ID
        assert await txn_commit(coord, "g", 2, {tp: _txn(1)}) == {tp: E.NONE}
        assert coord.check_txn_commit("g", "", -1, None) == E.NONE

        # A KIP-848 group: a stale member epoch is ILLEGAL_GENERATION (OffsetCommit: STALE_MEMBER_EPOCH).
        r = await coord.consumer_heartbeat(hb(group="k", topics=["t"], owned=set()), "c", "/h")
        mid = r.member_id or ""
        assert coord.check_commit("k", mid, r.epoch - 1, None) == E.STALE_MEMBER_EPOCH
        assert await txn_commit(coord, "k", 1, {tp: _txn(1)}, mid, r.epoch - 1) == {tp: E.ILLEGAL_GENERATION}
        assert await txn_commit(coord, "k", 1, {tp: _txn(1)}, mid, r.epoch) == {tp: E.NONE}
        assert await txn_commit(coord, "k", 1, {tp: _txn(1)}, "ghost", r.epoch) == {tp: E.UNKNOWN_MEMBER_ID}
        assert await txn_commit(coord, "k", 1, {tp: _txn(1)}) == {tp: E.UNKNOWN_MEMBER_ID}  # it has members
        await coord.consumer_heartbeat(hb(mid, -1, group="k"), "c", "/h")  # the member leaves
        assert await txn_commit(coord, "k", 2, {tp: _txn(2)}) == {tp: E.NONE}


@run
async def test_txn_offsets_keep_the_most_recent_write(tmp_path: Path) -> None:
    """Kafka materializes a committed transaction's offset only if it was written after the partition's
    current committed offset: a plain commit in between, or a later transaction committed first, wins; the
    decision survives a restart."""
    tp = ("t", 0)
    async with coordinator(tmp_path) as coord:
        await txn_commit(coord, "g", 1, {tp: _txn(10)})
        await coord.commit("g", {tp: Committed(11, -1, None, 1)})  # written after producer 1's offset
        await txn_commit(coord, "g", 2, {tp: _txn(20)})
        await txn_commit(coord, "g", 3, {tp: _txn(30)})
    async with coordinator(tmp_path) as coord:
        await coord.complete_txn(1, ["g"], commit=True)
        assert coord.fetch_offsets("g", [tp]) == {tp: Committed(11, -1, None, 1)}
        await coord.complete_txn(3, ["g"], commit=True)
        assert coord.fetch_offsets("g", [tp]) == {tp: _txn(30)}
        assert coord.unstable_offsets("g", [tp]) == {tp}  # producer 2 is still open
    async with coordinator(tmp_path) as coord:
        await coord.complete_txn(2, ["g"], commit=True)  # older than producer 3's, committed already
        assert coord.fetch_offsets("g", [tp]) == {tp: _txn(30)}
        # An abort of a later write leaves an earlier transaction free to commit.
        await txn_commit(coord, "g", 4, {tp: _txn(40)})
        await txn_commit(coord, "g", 5, {tp: _txn(50)})
        await coord.complete_txn(5, ["g"], commit=False)
        await coord.complete_txn(4, ["g"], commit=True)
        assert coord.fetch_offsets("g", [tp]) == {tp: _txn(40)}
    assert _pending_keys(tmp_path) == []


@run
async def test_pending_txn_offsets_with_deletion_and_expiry(tmp_path: Path) -> None:
    """Kafka's rules: an offset with a transactional offset pending does not expire, nor does a group with an
    open transaction; OffsetDelete, DeleteGroups and topic deletion take pending offsets with them."""
    day = 24 * 3600 * 1000
    old = int(time.time() * 1000) - 2 * day
    async with coordinator(tmp_path, offsets_retention_ms=day) as coord:
        await coord.commit("s", {("t", 0): Committed(1, -1, None, old), ("t", 1): Committed(1, -1, None, old)})
        await txn_commit(coord, "s", 1, {("t", 0): _txn(2, old)})
        await txn_commit(coord, "only-pending", 2, {("t", 0): _txn(2, old)})
        await coord.expire_offsets()
        assert set(coord.fetch_offsets("s", None)) == {("t", 0)}  # ("t", 1) expired, ("t", 0) waits
        assert coord.group("only-pending") is not None
        await coord.complete_txn(1, ["s"], commit=False)
        await coord.complete_txn(2, ["only-pending"], commit=False)
        await coord.expire_offsets()  # nothing pending any more: the old offset and both groups go
        assert coord.group("s") is None and coord.group("only-pending") is None

        await txn_commit(coord, "d", 1, {("t", 0): _txn(1), ("t", 1): _txn(1), ("u", 0): _txn(1)})
        await txn_commit(coord, "d", 2, {("t", 0): _txn(2)})
        assert await coord.delete_offsets("d", [("t", 0)]) == {("t", 0): E.NONE}
        coord.forget_topic("u")
        await asyncio.sleep(0.01)  # forget_topic persists in the background
        assert coord.unstable_offsets("d", [("t", 0), ("t", 1), ("u", 0)]) == {("t", 1)}
        # Producer 2's transaction is still open in the group (Kafka keeps it so): the group is not expired.
        await coord.complete_txn(1, ["d"], commit=False)
        await coord.expire_offsets()
        assert coord.group("d") is not None
        await coord.complete_txn(2, ["d"], commit=True)
        assert coord.fetch_offsets("d", None) == {}
        await txn_commit(coord, "e", 3, {("t", 0): _txn(1)})
        assert await coord.delete_group("e") == E.NONE  # an empty group goes, pending offsets or not
        await coord.complete_txn(3, ["e"], commit=True)
        assert coord.group("e") is None
    assert _pending_keys(tmp_path) == []
