"""Produce (0): validate as Kafka 4.4 does, check idempotent sequences, assign offsets, append, then answer
once the fsync policy is satisfied.

Validation runs in Kafka's stages (`protocol/validate.py`), because the stage decides the answer: the
first batch of every partition is looked at before anything else, then each partition's batch count and
magic, then (over every partition still in play) whether a batch is too short to read at all, and only
then, partition by partition, the batch header and every record. Nothing is appended before the
request-wide checks have passed, so a request Kafka fails as a whole stores nothing.

Produce v0-v2 (clients from before Kafka 0.11) send message sets of magic 0 or 1: each partition's set
becomes one v2 batch first (`protocol/legacy.py`, Kafka 3.9's rules and codes), then goes the same way.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from typing import Any

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E
from logbroker.protocol.legacy import records_magic, to_batch
from logbroker.protocol.produce import FIRST_TOPIC_ID_VERSION, partition_response
from logbroker.protocol.records import ATTRIBUTES, HEADER_SIZE, PRODUCER_ID, TRANSACTIONAL_FLAG, InvalidBatch
from logbroker.protocol.validate import RequestRefused, first_batch_is_transactional, short_first_batch, single_batch

from ..auth.acls import CLUSTER_NAME, AclOperation, ResourceType
from ..auth.checks import KAFKA_INTERNAL_TOPICS
from ..context import NO_RESPONSE, NO_RESPONSE_CLOSE, BrokerContext
from ..dispatch import handles
from ..seams import SequenceError

log = logging.getLogger(__name__)
API = api(ApiKey.Produce)
R = API.response
TR = R.TopicProduceResponse
PR = TR.PartitionProduceResponse
RecordError = PR.BatchIndexAndErrorMessage
YIELD_AFTER_BYTES = 256 << 10
_PID_EPOCH = struct.Struct(">qh")
ADMIN_CLIENT_ID = "__admin_client"  # Kafka lets only this client id append to its internal topics
LAST_LEGACY_VERSION = 2  # Produce v0-v2 may carry message sets of magic 0 and 1


def _name(error: int) -> str:
    try:
        return E(error).name
    except ValueError:
        return f"error {error}"


def _part(
    index: int,
    error: int,
    base: int = -1,
    start: int = -1,
    message: str | None = None,
    append_time: int = -1,
    record_errors: list[Any] | None = None,
) -> PR:
    return partition_response(PR, index, error, base, start, message, append_time, record_errors or [])


def _error_response(body: Any, error: int, message: str | None) -> R:
    return R(
        throttle_time_ms=0,
        responses=[
            TR(name=t.name, topic_id=t.topic_id,
               partition_responses=[_part(p.index, error, message=message) for p in t.partition_data])
            for t in body.topic_data
        ],
    )  # fmt: skip


def _resolve_ids(ctx: BrokerContext, body: Any) -> None:
    """v13+ names topics by id only: each topic gets its name ("" for an unknown or zero id, which Kafka
    answers UNKNOWN_TOPIC_ID per partition before any other check)."""
    for t in body.topic_data:
        meta = ctx.topics.by_id(t.topic_id)
        t.name = meta.name if meta is not None else ""


def _refuse_request(ctx: BrokerContext, req: Request, error: E, message: str | None) -> Any:
    """Kafka's answer to a produce it fails as a whole: every partition gets `error` (acks=0: closed)."""
    log.info("refused produce request from client %r: %s: %s", req.header.client_id, error.name, message or "")
    ctx.metrics.errors(ApiKey.Produce, [error] * sum(len(t.partition_data) for t in req.body.topic_data))
    if req.body.acks == 0:
        return NO_RESPONSE_CLOSE
    return _error_response(req.body, error, message)


@handles(ApiKey.Produce, 0, 13, kafka4_min=3, kafka4_advertises=True)
async def handle(ctx: BrokerContext, req: Request) -> Any:
    body = req.body
    by_id = req.version >= FIRST_TOPIC_ID_VERSION
    if by_id:
        _resolve_ids(ctx, body)
    # Stage 1: the first batch of each partition, until a transactional one is found (Kafka's order).
    try:
        transactional = any(
            first_batch_is_transactional(p.records)
            for t in body.topic_data
            for p in t.partition_data
            if p.records is not None
        )
    except RequestRefused as exc:
        return _refuse_request(ctx, req, exc.error, exc.message)
    if transactional and body.transactional_id is None:
        return _refuse_request(
            ctx, req, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "transactional records need a transactional id"
        )
    writable: set[str] | None = None  # None: no authorizer, every topic may be written
    if ctx.access.authorizer is not None:
        if transactional and not ctx.access.authorize(
            req, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id
        ):
            return _refuse_request(ctx, req, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None)
        writable = ctx.access.authorize_names(
            req, AclOperation.WRITE, ResourceType.TOPIC, (t.name for t in body.topic_data if t.name)
        )
    acks = body.acks
    if acks not in (-1, 0, 1):
        log.info("refused produce from client %r: acks=%d is not -1, 0 or 1", req.header.client_id, acks)
        refused = _error_response(body, E.INVALID_REQUIRED_ACKS, f"acks={acks} is not -1, 0 or 1")
        for tr in refused.responses:
            if by_id and not tr.name:
                tr.partition_responses = [_part(pr.index, E.UNKNOWN_TOPIC_ID) for pr in tr.partition_responses]
            elif writable is not None and tr.name not in writable:  # Kafka refuses these before the acks
                tr.partition_responses = [
                    _part(pr.index, E.TOPIC_AUTHORIZATION_FAILED) for pr in tr.partition_responses
                ]
        _count_errors(ctx, refused.responses)
        return refused

    # Stage 2: topics, partitions and one magic-2 batch each; nothing is written yet.
    responses = []
    accepted: list[
        tuple[list[Any], int, str, int, Any, Any, int]
    ] = []  # (slots, slot, topic, index, log, records, size)
    failed = False
    for t in body.topic_data:
        if by_id and not t.name:
            log.info("refused produce to topic id %s: UNKNOWN_TOPIC_ID", t.topic_id)
            responses.append(TR(name="", topic_id=t.topic_id, partition_responses=[
                _part(p.index, E.UNKNOWN_TOPIC_ID) for p in t.partition_data]))  # fmt: skip
            failed = True
            continue
        if writable is not None and t.name not in writable:
            # Kafka: TOPIC_AUTHORIZATION_FAILED for each partition, before looking the topic up.
            log.info("refused produce to %s: TOPIC_AUTHORIZATION_FAILED for %s", t.name, req.principal)
            responses.append(TR(name=t.name, topic_id=t.topic_id, partition_responses=[
                _part(p.index, E.TOPIC_AUTHORIZATION_FAILED) for p in t.partition_data]))  # fmt: skip
            failed = True
            continue
        if t.name in KAFKA_INTERNAL_TOPICS:
            # Never auto-created here; once the broker has made it, Kafka refuses appends from clients.
            err = E.NONE if ctx.topics.get(t.name) is not None else E.UNKNOWN_TOPIC_OR_PARTITION
            if not err and req.header.client_id != ADMIN_CLIENT_ID:
                err = E.INVALID_TOPIC_EXCEPTION
        else:
            err = ctx.topics.ensure(t.name, writable is None or _may_create(ctx, req, t.name), by=req)
            if err == E.INVALID_TOPIC_EXCEPTION:
                err = E.UNKNOWN_TOPIC_OR_PARTITION  # Kafka looks the name up; an invalid one is simply not there
        parts: list[Any] = []
        for p in t.partition_data:
            plog = None if err else ctx.topics.log(t.name, p.index)
            if err or plog is None:
                code = err or E.UNKNOWN_TOPIC_OR_PARTITION
                log.info("refused produce to %s-%d: %s", t.name, p.index, _name(code))
                parts.append(_part(p.index, code))
                failed = True
                continue
            if p.records is None:
                parts.append(_part(p.index, E.INVALID_RECORD, message="produce request without records"))
                failed = True
                continue
            records = p.records
            try:
                if req.version <= LAST_LEGACY_VERSION and records_magic(records) in (0, 1):
                    # A pre-0.11 message set: stored as one v2 batch, as Kafka 3.x's LogValidator does.
                    cfg, most = plog.config, ctx.settings.socket_request_max_bytes
                    records = memoryview(
                        to_batch(
                            records,
                            log_append_time=cfg.log_append_time,
                            max_message_bytes=cfg.max_message_bytes,
                            max_inflated_bytes=most,
                        )
                    )
                size = single_batch(records, req.version)
            except InvalidBatch as exc:
                log.info("refused produce to %s-%d: %s", t.name, p.index, exc)
                parts.append(_part(p.index, exc.error, message=str(exc),
                                   record_errors=[RecordError(batch_index=i, batch_index_error_message=m)
                                                  for i, m in exc.record_errors]))  # fmt: skip
                failed = True
                continue
            except RequestRefused as exc:
                return _refuse_request(ctx, req, exc.error, exc.message)
            accepted.append((parts, len(parts), t.name, p.index, plog, records, size))
            parts.append(None)  # filled in by stage 4
        responses.append(TR(name=t.name, topic_id=t.topic_id, partition_responses=parts))

    # Stage 3: a batch too short to read its producer id fails the whole request.
    if any(short_first_batch(size) for *_, size in accepted):
        return _refuse_request(ctx, req, E.UNKNOWN_SERVER_ERROR, None)

    # Transaction version 2 (Produce v12+): the transactional batches' partitions join the producer's
    # transaction before anything is appended (Kafka's ADD_PARTITION verification).
    if req.version >= 12 and body.transactional_id is not None:
        joined = await _join_transaction(ctx, body.transactional_id, accepted)
        if joined is not None and not isinstance(joined, set):
            return _refuse_request(ctx, req, joined, None)
        if joined:
            failed = True
            accepted = [a for a in accepted if (a[2], a[3]) not in joined]

    # Stage 4: each partition's batch and records, then the append. Walking records costs up to ~75 ms per
    # MB of tiny records, so after a large batch the loop serves other clients; the sequencer keeps
    # produces (and so each connection's pipelined produces) appending in the order they arrived.
    written = False
    now_ms = int(time.time() * 1000)
    turns = ctx.append_turns.reserve((topic, index) for _, _, topic, index, *_ in accepted)
    try:
        for turn, (parts, slot, topic, index, plog, records, size) in zip(turns, accepted, strict=True):
            await turn.wait()
            result = _append(ctx, plog, topic, index, records, size, now_ms, body.transactional_id, req.version)
            turn.release()
            parts[slot] = result
            if result.error_code:
                failed = True
            elif result.base_offset >= 0:
                written = True
            if size >= YIELD_AFTER_BYTES:
                await asyncio.sleep(0)
    finally:
        for turn in turns:
            turn.release()
    if acks == 0:
        # Kafka closes the connection on a failed acks=0 produce: the only signal such a client gets.
        if failed:
            _count_errors(ctx, responses)
        return NO_RESPONSE_CLOSE if failed else NO_RESPONSE
    if written:
        synced = time.monotonic()
        try:
            await ctx.sync()
        except OSError as exc:
            log.error("produce not durable: %s", exc)
            for tr in responses:
                for pr in tr.partition_responses:
                    if not pr.error_code:
                        pr.error_code = E.KAFKA_STORAGE_ERROR
                        pr.error_message = f"fsync failed: {exc}"
                        failed = True
        ctx.metrics.waited(time.monotonic() - synced)  # the fsync round: Kafka's RemoteTimeMs
    if failed:
        _count_errors(ctx, responses)
    return R(throttle_time_ms=0, responses=responses)


CONCURRENT_RETRY_S, CONCURRENT_RETRY_MAX_S = 0.02, 0.1  # Kafka's add.partitions.to.txn.retry.backoff(.max).ms
_UNVERIFIABLE = (E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS)


async def _join_transaction(
    ctx: BrokerContext, transactional_id: str, accepted: list[Any]
) -> E | set[tuple[str, int]] | None:
    """Add the partitions of the transactional batches to the producer's transaction. Returns an error for
    the whole request (batches of two producers), or the partitions refused (their answers filled in)."""
    found: dict[tuple[int, int], list[Any]] = {}
    for entry in accepted:
        records, size = entry[5], entry[6]
        batch = records[:size]
        if len(batch) >= HEADER_SIZE and batch[ATTRIBUTES + 1] & TRANSACTIONAL_FLAG:
            found.setdefault(_PID_EPOCH.unpack_from(batch, PRODUCER_ID), []).append(entry)
    if not found:
        return None
    if len(found) > 1:
        return E.INVALID_PRODUCER_ID_MAPPING
    ((pid, epoch), entries) = next(iter(found.items()))
    parts = {(e[2], e[3]) for e in entries}
    deadline = asyncio.get_running_loop().time() + CONCURRENT_RETRY_MAX_S
    while True:
        err = await ctx.txns.add_partitions(transactional_id, pid, epoch, parts, tv=2)
        if err != E.CONCURRENT_TRANSACTIONS or asyncio.get_running_loop().time() >= deadline:
            break
        await asyncio.sleep(CONCURRENT_RETRY_S)  # the coordinator is writing this id's state: briefly, retry
    if err == E.NONE:
        return set()
    message = None
    if err == E.PRODUCER_FENCED:
        err = E.INVALID_PRODUCER_EPOCH
    elif err in _UNVERIFIABLE:
        message = f"Unable to verify the partition has been added to the transaction. Underlying error: {err.name}"
        err = E.NOT_ENOUGH_REPLICAS
    log.info("refused transactional produce from %r to %s: %s", transactional_id, sorted(parts), err.name)
    for slots, slot, _topic, index, *_ in entries:
        slots[slot] = _part(index, err, message=message)
    return parts


def _count_errors(ctx: BrokerContext, responses: list[Any]) -> None:
    ctx.metrics.errors(ApiKey.Produce, (pr.error_code for tr in responses for pr in tr.partition_responses))


def _may_create(ctx: BrokerContext, req: Request, topic: str) -> bool:
    """This broker auto-creates a topic on produce; with an authorizer only for a principal that could
    create it (CREATE on the cluster or the topic, as a Metadata auto-creation needs)."""
    if ctx.topics.get(topic) is not None:
        return True
    cluster = ctx.access.authorize(req, AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME)
    return cluster or ctx.access.authorize(req, AclOperation.CREATE, ResourceType.TOPIC, topic)


def _append(
    ctx: BrokerContext,
    plog: Any,
    topic: str,
    index: int,
    records: Any,
    size: int,
    now_ms: int,
    transactional_id: str | None,
    version: int,
) -> PR:
    # A writable view into the request frame: offsets are stamped where the batch arrived (no copy). Bytes
    # after the batch that make no whole batch are left out, as Kafka trims them.
    buf = records if isinstance(records, memoryview) and not records.readonly else memoryview(bytearray(records))
    batch = buf[:size]
    if (
        transactional_id is not None
        and len(batch) >= HEADER_SIZE
        and batch[ATTRIBUTES + 1] & TRANSACTIONAL_FLAG
        and (ctx.settings.transaction_partition_verification_enable or version >= 12)
    ):
        # Verified with the coordinator before anything else, as Kafka does (KIP-890 part 1): the partition
        # must be in the producer's open transaction. Checked and appended with no await in between, so an
        # EndTxn cannot slip its marker in before this batch. Kafka skips it when
        # transaction.partition.verification.enable is false, for Produce up to v11 (v12+ adds the partition).
        pid, epoch = _PID_EPOCH.unpack_from(batch, PRODUCER_ID)
        err = ctx.txns.check_produce(transactional_id, pid, epoch, (topic, index), version)
        if err != E.NONE:
            log.info("refused transactional produce to %s-%d from %r: %s", topic, index, transactional_id, err.name)
            return _part(index, err, message=f"transactional produce refused: {err.name}")
    try:
        done = plog.append_as_leader(batch, now_ms=now_ms, max_inflated_bytes=ctx.settings.socket_request_max_bytes)
    except InvalidBatch as exc:
        log.info("refused produce to %s-%d: %s", topic, index, exc)
        return _part(
            index,
            exc.error,
            start=plog.log_start_offset if exc.log_start else -1,
            message=str(exc),
            record_errors=[RecordError(batch_index=i, batch_index_error_message=m) for i, m in exc.record_errors],
        )
    except SequenceError as exc:
        log.info("refused produce to %s-%d: %s: %s", topic, index, exc.error.name, exc)
        return _part(index, exc.error, start=plog.log_start_offset, message=str(exc))
    except OSError as exc:
        log.error("append to %s-%d failed: %s", topic, index, exc)
        return _part(index, E.KAFKA_STORAGE_ERROR, message=str(exc))
    if done.duplicate:
        return _part(index, 0, done.base_offset, plog.log_start_offset)
    ctx.metrics.produced(topic, size, done.records)
    return _part(index, 0, done.base_offset, plog.log_start_offset, append_time=done.append_time)
