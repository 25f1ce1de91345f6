"""ApiVersions (18): the table built from the handlers' declarations; an unsupported version is
answered in v0 with the full list (KIP-511).

From v3 the answer carries the features (KIP-584), as Kafka 4.4 sends them: each feature's supported range
and its finalized level, which clients and `kafka-features describe` read. logbroker's are what it serves
(`broker/features.py`, changed by UpdateFeatures): transaction.version 2 (KIP-890 part 2), group.version
1 (KIP-848), share.version 1 (no dead-letter queues), streams.version 1 (KIP-1071), no KRaft quorum to reconfigure;
metadata.version is 4.4's. A feature finalized at 0 is not sent, and below v4 a supported range starting
at 0 is left out, as Kafka does. The epoch is the metadata offset DescribeQuorum reports.

v5 (KIP-1242): a client naming the cluster and node it believes it reaches gets REBOOTSTRAP_REQUIRED when
either is not this broker's, and INVALID_REQUEST when it names only one of them.
"""

from __future__ import annotations

import re

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..context import BrokerContext
from ..dispatch import handles
from ..features import SUPPORTED

API = api(ApiKey.ApiVersions)
R = API.response


def _supported(ctx: BrokerContext) -> list:
    return [
        R.ApiVersion(api_key=s.key, min_version=s.min_version, max_version=s.max_version)
        for s in sorted(ctx.apis.values(), key=lambda s: s.key)
    ]


def _features(ctx: BrokerContext, version: int) -> dict:
    if version < 3:
        return {}
    return {
        "supported_features": [R.SupportedFeatureKey(name=n, min_version=lo, max_version=hi)
                               for n, (lo, hi) in SUPPORTED.items() if version >= 4 or lo > 0],
        "finalized_features_epoch": ctx.topics.changes + 1 + ctx.features.epoch,
        "finalized_features": [R.FinalizedFeatureKey(name=n, max_version_level=f, min_version_level=f)
                               for n, f in ctx.features.finalized() if f > 0],
    }  # fmt: skip


# KIP-511: what a client software name and version may look like; Kafka refuses anything else.
SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


@handles(ApiKey.ApiVersions, 0, 5)
def handle(ctx: BrokerContext, req: Request) -> R:
    if req.version_error is not None:
        req.header.api_version = 0  # the client parses an error reply as v0
        return R(error_code=req.version_error, api_keys=_supported(ctx))
    body = req.body  # None only when a test builds the request by hand
    if (
        req.version >= 3
        and body is not None
        and not (SOFTWARE.fullmatch(body.client_software_name) and SOFTWARE.fullmatch(body.client_software_version))
    ):
        return R(error_code=E.INVALID_REQUEST, api_keys=[], throttle_time_ms=0)
    if req.version >= 5 and body is not None:
        named_cluster, named_node = body.cluster_id is not None, body.node_id != -1
        if named_cluster != named_node:
            return R(error_code=E.INVALID_REQUEST, api_keys=[], throttle_time_ms=0)
        if named_cluster and (body.cluster_id != ctx.cluster_id or body.node_id != ctx.node_id):
            return R(error_code=E.REBOOTSTRAP_REQUIRED, api_keys=[], throttle_time_ms=0)
    return R(error_code=0, api_keys=_supported(ctx), throttle_time_ms=0, **_features(ctx, req.version))
