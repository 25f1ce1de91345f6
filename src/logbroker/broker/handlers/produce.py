"""Produce (0): validate batch headers and CRCs, check idempotent sequences, assign offsets, append,
then answer once the fsync policy is satisfied. Records are never decoded here."""

from __future__ import annotations

import logging
from typing import Any

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E
from logbroker.protocol.records import InvalidBatch, validate_produce
from logbroker.storage.producers import SequenceError

from ..context import NO_RESPONSE, NO_RESPONSE_CLOSE, BrokerContext
from ..dispatch import handles

log = logging.getLogger(__name__)
API = api(ApiKey.Produce)
R = API.response
TR = R.TopicProduceResponse
PR = TR.PartitionProduceResponse


def _name(error: int) -> str:
    try:
        return E(error).name
    except ValueError:
        return f"error {error}"


def _part(
    index: int, error: int, base: int = -1, start: int = -1, message: str | None = None, append_time: int = -1
) -> PR:
    return PR(
        index=index,
        error_code=error,
        base_offset=base,
        log_append_time_ms=append_time,
        log_start_offset=start,
        record_errors=[],
        error_message=message,
    )


def _error_response(body: Any, error: int, message: str) -> R:
    return R(
        throttle_time_ms=0,
        responses=[
            TR(name=t.name, partition_responses=[_part(p.index, error, message=message) for p in t.partition_data])
            for t in body.topic_data
        ],
    )


@handles(ApiKey.Produce, 0, 11, rejected_below=3)
async def handle(ctx: BrokerContext, req: Request) -> Any:
    body = req.body
    if req.version_error is not None:
        # Advertised only for old clients' feature probes (magic v0/v1 message sets are not stored).
        return _error_response(body, E.UNSUPPORTED_VERSION, f"Produce v{req.version} is not supported")
    acks = body.acks
    if acks not in (-1, 0, 1):
        log.info("refused produce from client %r: acks=%d is not -1, 0 or 1", req.header.client_id, acks)
        return _error_response(body, E.INVALID_REQUIRED_ACKS, f"acks={acks} is not -1, 0 or 1")
    if body.transactional_id is not None:
        return _error_response(
            body, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "transactions are not supported by this broker"
        )
    responses = []
    written = False
    failed = False
    for t in body.topic_data:
        err = ctx.ensure_topic(t.name)
        parts = []
        for p in t.partition_data:
            if err:
                log.info("refused produce to %s-%d: %s", t.name, p.index, _name(err))
                parts.append(_part(p.index, err))
                failed = True
                continue
            plog = ctx.get_log(t.name, p.index)
            if plog is None:
                log.info("refused produce to %s-%d: no such partition", t.name, p.index)
                parts.append(_part(p.index, E.UNKNOWN_TOPIC_OR_PARTITION))
                failed = True
                continue
            result = _append(ctx, plog, t.name, p.index, p.records)
            parts.append(result)
            if result.error_code:
                failed = True
            elif result.base_offset >= 0:
                written = True
        responses.append(TR(name=t.name, partition_responses=parts))
    if acks == 0:
        # Kafka closes the connection on a failed acks=0 produce: the only signal such a client gets.
        return NO_RESPONSE_CLOSE if failed else NO_RESPONSE
    if written:
        try:
            await ctx.sync()
        except OSError as exc:
            log.error("produce not durable: %s", exc)
            for tr in responses:
                for pr in tr.partition_responses:
                    if not pr.error_code:
                        pr.error_code = E.KAFKA_STORAGE_ERROR
                        pr.error_message = f"fsync failed: {exc}"
    return R(throttle_time_ms=0, responses=responses)


def _append(ctx: BrokerContext, plog: Any, topic: str, index: int, records: Any) -> PR:
    if records is None:
        return _part(index, E.INVALID_RECORD, message="produce request without records")
    # A writable view into the request frame: offsets are stamped where the batches arrived (no copy).
    buf = records if isinstance(records, memoryview) and not records.readonly else bytearray(records)
    try:
        headers = validate_produce(buf, plog.config.max_message_bytes)
        if len(headers) > 1 and any(h.producer_id >= 0 for h in headers):
            raise InvalidBatch("idempotent produce must carry exactly one batch per partition", E.INVALID_RECORD)
        dup = plog.check_duplicates(headers)
    except InvalidBatch as exc:
        log.info("refused produce to %s-%d: %s", topic, index, exc)
        return _part(index, exc.error, message=str(exc))
    except SequenceError as exc:
        log.info("refused produce to %s-%d: %s: %s", topic, index, exc.error.name, exc)
        return _part(index, exc.error, message=str(exc))
    if dup is not None:
        return _part(index, 0, dup.base_offset, plog.log_start_offset)
    try:
        base, _last = plog.append(buf, headers)
    except OSError as exc:
        log.error("append to %s-%d failed: %s", topic, index, exc)
        return _part(index, E.KAFKA_STORAGE_ERROR, message=str(exc))
    ctx.appended(plog, topic, index)
    append_time = headers[0].max_timestamp if plog.config.log_append_time else -1
    return _part(index, 0, base, plog.log_start_offset, append_time=append_time)
