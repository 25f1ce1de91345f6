"""StreamsGroupTopologyDescriptionUpdate (93, KIP-1331, Kafka 4.4): a Kafka Streams member sends its
topology's description when a StreamsGroupHeartbeat v1 answer asks for it, for a broker-side plugin to keep.
logbroker serves no streams groups (KIP-1071) yet, so it answers as a Kafka 4.4 broker whose streams
protocol is not enabled: UNSUPPORTED_VERSION with no message, before any other check
(KafkaApis.handleStreamsGroupTopologyDescriptionUpdate). No client sends it unprompted.
"""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..context import BrokerContext
from ..dispatch import handles

R = api(ApiKey.StreamsGroupTopologyDescriptionUpdate).response


@handles(ApiKey.StreamsGroupTopologyDescriptionUpdate, 0, 0)
def handle(ctx: BrokerContext, req: Request) -> R:
    return R(throttle_time_ms=0, error_code=E.UNSUPPORTED_VERSION, error_message=None)
