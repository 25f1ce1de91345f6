"""UpdateFeatures (57): `kafka-features upgrade / downgrade / disable` and Admin.updateFeatures change the
finalized feature levels (`broker/features.py`), durably, as Kafka's controller does.

Needs ALTER on the cluster (CLUSTER_AUTHORIZATION_FAILED with Kafka's message). Every update is checked first
and the first refusal fails the whole request (nothing changes): its code (INVALID_UPDATE_VERSION) at the top
with "The update failed for all features since the following feature had an error: " before Kafka's reason,
and no per-feature results. v0's AllowDowngrade is ignored, as Kafka's controller ignores it (a v0 downgrade is
refused as an upgrade would be); v1 adds ValidateOnly; v0-1 answer each feature with NONE and the message
"NONE", v2 only the top-level result.
"""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation
from ..auth.checks import cluster_denial
from ..context import BrokerContext
from ..dispatch import handles
from ..features import UPGRADE, FeatureError, FeatureUpdate

R = api(ApiKey.UpdateFeatures).response
FAILED = "The update failed for all features since the following feature had an error: "


@handles(ApiKey.UpdateFeatures, 0, 2)
def handle(ctx: BrokerContext, req: Request) -> R:
    b = req.body
    if (denied := cluster_denial(ctx, req, AclOperation.ALTER)) is not None:
        return R(throttle_time_ms=0, error_code=E.CLUSTER_AUTHORIZATION_FAILED, error_message=denied, results=[])
    updates = [
        FeatureUpdate(u.feature, u.max_version_level, u.upgrade_type if req.version >= 1 else UPGRADE)
        for u in b.feature_updates
    ]
    try:
        ctx.features.update(updates, bool(b.validate_only) if req.version >= 1 else False)
    except FeatureError as exc:
        return R(throttle_time_ms=0, error_code=exc.error, error_message=FAILED + str(exc), results=[])
    except OSError as exc:
        return R(throttle_time_ms=0, error_code=E.UNKNOWN_SERVER_ERROR,
                 error_message=f"the features could not be stored: {exc}", results=[])  # fmt: skip
    results = []
    if req.version < 2:
        results = [R.UpdatableFeatureResult(feature=u.name, error_code=0, error_message="NONE") for u in updates]
    return R(throttle_time_ms=0, error_code=0, error_message=None, results=results)
