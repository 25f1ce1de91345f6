"""ListConfigResources (74; v0 was ListClientMetricsResources, v1 adds the type filter, KIP-1142): the
resources that have configs, in Kafka's order (KafkaApis.handleListConfigResources): groups with configs of
their own, client-metrics subscriptions (logbroker has none), the broker's logger, the broker, every topic
(internal ones too). An empty filter means every type the version supports (v0: client metrics only; v1:
topic, broker, broker logger, client metrics, group); a type outside them fails the whole request with
UNSUPPORTED_VERSION and lists nothing. Needs DESCRIBE_CONFIGS on the cluster: CLUSTER_AUTHORIZATION_FAILED
without it.
"""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation
from ..auth.checks import (
    CONFIG_BROKER,
    CONFIG_BROKER_LOGGER,
    CONFIG_CLIENT_METRICS,
    CONFIG_GROUP,
    CONFIG_TOPIC,
    cluster_denial,
)
from ..context import BrokerContext
from ..dispatch import handles

API = api(ApiKey.ListConfigResources)
R = API.response
CR = R.ConfigResource

_SUPPORTED = {0: {CONFIG_CLIENT_METRICS},
              1: {CONFIG_TOPIC, CONFIG_BROKER, CONFIG_BROKER_LOGGER, CONFIG_CLIENT_METRICS, CONFIG_GROUP}}  # fmt: skip


@handles(ApiKey.ListConfigResources, 0, 1)
def handle(ctx: BrokerContext, req: Request) -> R:
    if cluster_denial(ctx, req, AclOperation.DESCRIBE_CONFIGS) is not None:
        return R(throttle_time_ms=0, error_code=E.CLUSTER_AUTHORIZATION_FAILED, config_resources=[])
    supported = _SUPPORTED[min(req.version, 1)]
    asked = set(req.body.resource_types or ()) if req.version >= 1 else set()
    if asked - supported:
        return R(throttle_time_ms=0, error_code=E.UNSUPPORTED_VERSION, config_resources=[])
    wanted = asked or supported
    node = str(ctx.node_id)
    out: list[CR] = []
    if CONFIG_GROUP in wanted:
        out += [
            CR(resource_name=g, resource_type=CONFIG_GROUP) for g, cfg in ctx.group_configs.overrides.items() if cfg
        ]
    if CONFIG_BROKER_LOGGER in wanted:
        out.append(CR(resource_name=node, resource_type=CONFIG_BROKER_LOGGER))
    if CONFIG_BROKER in wanted:
        out.append(CR(resource_name=node, resource_type=CONFIG_BROKER))
    if CONFIG_TOPIC in wanted:
        out += [CR(resource_name=m.name, resource_type=CONFIG_TOPIC) for m in ctx.topics.all()]
    return R(throttle_time_ms=0, error_code=E.NONE, config_resources=out)
