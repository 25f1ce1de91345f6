"""ShareFetch (78): acknowledge, then acquire records for a share-group member (KIP-932).

In Kafka's order: the request's checks (INVALID_REQUEST for a missing group or member id), the share
session (epoch 0 opens one and may carry no acknowledgements; n continues it; -1 closes it and may fetch
nothing), the piggybacked acknowledgements (durable before the answer; each partition's result in its
AcknowledgeErrorCode), then the acquisition: from every partition of the session, available records are
locked for this member (delivery count incremented, lock for `group.share.record.lock.duration.ms`) up to
MaxRecords, whole batches, long-polling up to MaxWaitMs when there is nothing. The answer carries the
batches read and the acquired offset ranges; the client delivers only those.

With an authorizer: READ on the group (GROUP_AUTHORIZATION_FAILED for the request), READ on each topic
(TOPIC_AUTHORIZATION_FAILED for its partitions)."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from typing import Any

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E
from logbroker.protocol.records import CONTROL_FLAG, TRANSACTIONAL_FLAG, iter_headers

from ..auth.acls import AclOperation, ResourceType
from ..context import BrokerContext
from ..dispatch import handles
from ..seams import OffsetOutOfRange
from ..share import ShareError
from ._share import AckErrors, error_response, read_acks, readable_acks, refusal

API = api(ApiKey.ShareFetch)
R = API.response
TR = R.ShareFetchableTopicResponse
PD = TR.PartitionData
READ_BYTES = 8 << 20


def _pd(ctx: BrokerContext, index: int, error: int = 0, message: str | None = None) -> Any:
    return PD(partition_index=index, error_code=error, error_message=message, acknowledge_error_code=0,
              acknowledge_error_message=None, records=b"", acquired_records=[],
              current_leader=PD.LeaderIdAndEpoch(leader_id=ctx.node_id, leader_epoch=0))  # fmt: skip


@handles(ApiKey.ShareFetch, 1, 2)
async def handle(ctx: BrokerContext, req: Request) -> R:
    b = req.body
    share = ctx.share
    if (refused := refusal(ctx, req)) is not None:
        return error_response(ctx, req, *refused)
    epoch = b.share_session_epoch
    acks, bad = read_acks(b.topics, req.version)
    if epoch == 0 and (acks or bad):
        return error_response(ctx, req, E.INVALID_REQUEST, "Acknowledge data present on initial fetch request")
    wanted = [(str(t.topic_id), p.partition_index) for t in b.topics for p in t.partitions]
    if epoch == -1 and any(not (p.acknowledgement_batches or ()) for t in b.topics for p in t.partitions):
        return error_response(ctx, req, E.INVALID_REQUEST, "The final share fetch request may not fetch partitions")
    forgotten = [(str(t.topic_id), p) for t in (b.forgotten_topics_data or ()) for p in t.partitions]
    try:
        session = share.session(b.group_id, b.member_id, epoch, wanted, forgotten, req.connection_id)
    except ShareError as exc:
        return error_response(ctx, req, exc.error, exc.message)
    errors: AckErrors = {k: (int(E.INVALID_REQUEST), why) for k, why in bad.items()}
    acks = readable_acks(ctx, req, acks, errors)
    for key, (code, message) in (await share.acknowledge(b.group_id, b.member_id, acks) if acks else {}).items():
        errors[key] = (int(code), message)
    results: dict[tuple[str, int], Any] = {}
    for key, (code, message) in errors.items():
        pd = results[key] = _pd(ctx, key[1])
        pd.acknowledge_error_code, pd.acknowledge_error_message = code, message
    for tid, index, _batches in acks:
        results.setdefault((tid, index), _pd(ctx, index))
    if epoch == -1:
        share.close_session(b.group_id, b.member_id)
        await share.release_member(b.group_id, b.member_id)
    else:
        await _acquire(ctx, req, list(session.partitions), results, full=epoch == 0)
    topics: dict[str, list[Any]] = {}
    for (tid, _index), pd in results.items():
        topics.setdefault(tid, []).append(pd)
    return R(throttle_time_ms=0, error_code=0, error_message=None,
             acquisition_lock_timeout_ms=share.settings(b.group_id).record_lock_duration_ms,
             responses=[TR(topic_id=uuid.UUID(t), partitions=ps) for t, ps in topics.items()],
             node_endpoints=[])  # fmt: skip


async def _acquire(ctx: BrokerContext, req: Request, partitions: list[tuple[str, int]],
                   results: dict[tuple[str, int], Any], full: bool) -> None:  # fmt: skip
    b = req.body
    share = ctx.share
    cfg = share.settings(b.group_id)
    names = share.topic_ids()
    readable: set[str] | None = None
    if ctx.access.authorizer is not None:
        wanted = {names.get(t, "") for t, _ in partitions}
        readable = ctx.access.authorize_names(req, AclOperation.READ, ResourceType.TOPIC, wanted)
    deadline = time.monotonic() + max(b.max_wait_ms, 0) / 1000
    max_records = b.max_records if b.max_records > 0 else 500
    max_bytes = b.max_bytes if b.max_bytes > 0 else 1 << 20
    record_limit = req.version >= 2 and b.share_acquire_mode == 1
    while True:
        taken = 0
        used = 0
        keys = []
        for tid, index in partitions:
            name = names.get(tid)
            if name is None:
                results[(tid, index)] = _pd(ctx, index, int(E.UNKNOWN_TOPIC_ID))
                continue
            if readable is not None and name not in readable:
                results[(tid, index)] = _pd(ctx, index, int(E.TOPIC_AUTHORIZATION_FAILED))
                continue
            plog = ctx.topics.log(name, index)
            if plog is None:
                results[(tid, index)] = _pd(ctx, index, int(E.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            keys.append((name, index))
            if full:
                results.setdefault((tid, index), _pd(ctx, index))
            if taken >= max_records or used >= max_bytes:
                continue
            sp = share.partition(req.body.group_id, tid, index)
            if sp.move_start(plog.log_start_offset):
                await share.save([(req.body.group_id, tid, index)])
            start = sp.acquirable(cfg.partition_max_record_locks)
            limit = plog.last_stable_offset if cfg.read_committed else plog.next_offset
            if start is None or start >= limit:
                continue
            try:  # whole batches, at most READ_BYTES at a time (MaxBytes is often tens of MB)
                data = bytes(plog.read(start, max(min(max_bytes - used, READ_BYTES), 1), first_whole=True))
            except OffsetOutOfRange:
                continue
            headers = list(iter_headers(data))
            batches = _batches(plog, headers, start, cfg.read_committed)
            got = sp.acquire(req.body.member_id, batches, limit, max_records - taken, cfg.partition_max_record_locks,
                             cfg.record_lock_duration_ms / 1000, time.monotonic(), strict=record_limit)  # fmt: skip
            if not got:
                continue
            last = got[-1][1]
            end = 0
            for h in headers:  # only the batches that hold acquired records
                if h.base_offset > last:
                    break
                end = h.position + h.size
            pd = results.get((tid, index)) or _pd(ctx, index)
            pd.records = data[:end]
            pd.acquired_records = [PD.AcquiredRecords(first_offset=f, last_offset=la, delivery_count=c)
                                   for f, la, c in got]  # fmt: skip
            results[(tid, index)] = pd
            taken += sum(la - f + 1 for f, la, _c in got)
            used += end
        remaining = deadline - time.monotonic()
        if taken or remaining <= 0 or not keys or ctx.polls.stopping:
            return
        released = share.released()
        waiting = asyncio.ensure_future(ctx.polls.wait_for_data(keys, remaining))
        try:
            await asyncio.wait([released, waiting], timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waiting
            if not released.done():
                released.cancel()


def _batches(plog: Any, headers: list[Any], start: int, read_committed: bool) -> list[tuple[int, int, bool]]:
    """(base offset, last offset, never deliver) of each batch read: control batches are never delivered,
    nor, under read_committed, the batches of aborted transactions (archived, as Kafka does)."""
    if not read_committed or not headers or not plog.aborts_from(start):
        return [(h.base_offset, h.last_offset, bool(h.attributes & CONTROL_FLAG)) for h in headers]
    aborted = sorted(plog.aborted_transactions(start, headers[-1].last_offset + 1), key=lambda a: a.first_offset)
    active: set[int] = set()  # producers whose aborted transaction the walk is inside
    out = []
    i = 0
    for h in headers:
        while i < len(aborted) and aborted[i].first_offset <= h.last_offset:
            active.add(aborted[i].producer_id)
            i += 1
        control = bool(h.attributes & CONTROL_FLAG)
        skip = control or (bool(h.attributes & TRANSACTIONAL_FLAG) and h.producer_id in active)
        if control:
            active.discard(h.producer_id)  # its marker ends the transaction (commit or abort)
        out.append((h.base_offset, h.last_offset, skip))
    return out
