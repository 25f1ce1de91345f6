#!/usr/bin/env python3
"""Per-message cost of the protocol codec on the broker's hot path (decode requests, encode responses).

Backs the codec decision in docs/design.md: run it after upgrading kafka-python or changing messages.py.
"""

from __future__ import annotations

import timeit

from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from logbroker.broker.handlers import served_apis
from logbroker.protocol.connection import parse_request
from logbroker.protocol.messages import encode_body, encode_request
from logbroker.protocol.records import NewRecord, build_batch

APIS = served_apis()


def bench(label: str, fn, n: int) -> None:
    fn()
    best = min(timeit.repeat(fn, number=n, repeat=5)) / n
    print(f"{label:<48} {best * 1e6:8.2f} us")


def main() -> None:
    batch_1k = build_batch([NewRecord(None, b"x" * 1000)] * 1000)  # ~1 MB, as librdkafka sends with linger
    batch_small = build_batch([NewRecord(None, b"x" * 100)] * 10)
    P = ProduceRequest.TopicProduceData
    for v in (7, 9):
        for name, batch in (("1 MB batch", batch_1k), ("1 KB batch", batch_small)):
            req = ProduceRequest(
                transactional_id=None,
                acks=-1,
                timeout_ms=30000,
                topic_data=[P(name="topic", partition_data=[P.PartitionProduceData(index=0, records=batch)])],
            )
            frame = memoryview(encode_request(APIS[0], v, 1, "rdkafka", req)[4:])
            bench(f"decode Produce v{v} request ({name})", lambda f=frame: parse_request(f, APIS), 2000)
    R = ProduceResponse
    resp = R(
        throttle_time_ms=0,
        responses=[
            R.TopicProduceResponse(
                name="topic",
                partition_responses=[
                    R.TopicProduceResponse.PartitionProduceResponse(
                        index=0,
                        error_code=0,
                        base_offset=5,
                        log_append_time_ms=-1,
                        log_start_offset=0,
                        record_errors=[],
                    )
                ],
            )
        ],
    )
    for v in (7, 9):
        bench(f"encode Produce v{v} response", lambda v=v: encode_body(APIS[0], v, resp), 20000)
    F = FetchRequest.FetchTopic
    freq = FetchRequest(
        replica_id=-1,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=50 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            F(
                topic="topic",
                partitions=[
                    F.FetchPartition(
                        partition=0,
                        current_leader_epoch=0,
                        fetch_offset=0,
                        log_start_offset=-1,
                        partition_max_bytes=1 << 20,
                    )
                ],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )
    for v in (4, 11, 12):
        frame = memoryview(encode_request(APIS[1], v, 1, "rdkafka", freq)[4:])
        bench(f"decode Fetch v{v} request", lambda f=frame: parse_request(f, APIS), 20000)
    FR = FetchResponse
    for size, data in (("1 MB", batch_1k), ("1 KB", batch_small)):
        fresp = FR(
            throttle_time_ms=0,
            error_code=0,
            session_id=0,
            responses=[
                FR.FetchableTopicResponse(
                    topic="topic",
                    partitions=[
                        FR.FetchableTopicResponse.PartitionData(
                            partition_index=0,
                            error_code=0,
                            high_watermark=10,
                            last_stable_offset=10,
                            log_start_offset=0,
                            aborted_transactions=None,
                            preferred_read_replica=-1,
                            records=data,
                        )
                    ],
                )
            ],
        )
        for v in (11, 12):
            bench(f"encode Fetch v{v} response ({size} records)", lambda v=v, r=fresp: encode_body(APIS[1], v, r), 2000)
    md = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="topic")], allow_auto_topic_creation=True)
    frame = memoryview(encode_request(APIS[3], 12, 1, "rdkafka", md)[4:])
    bench("decode Metadata v12 request", lambda: parse_request(frame, APIS), 20000)
    M = MetadataResponse
    mresp = M(
        throttle_time_ms=0,
        brokers=[M.MetadataResponseBroker(node_id=1, host="127.0.0.1", port=9092)],
        cluster_id="c",
        controller_id=1,
        topics=[],
    )
    bench("encode Metadata v12 response", lambda: encode_body(APIS[3], 12, mresp), 20000)


if __name__ == "__main__":
    main()
