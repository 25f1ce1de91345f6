"""ApiVersions v5 (KIP-1242) and the features block (KIP-584), asserted on logbroker and Apache Kafka 4.4: the
same answers to a client naming the wrong cluster or node (REBOOTSTRAP_REQUIRED) or only one of them
(INVALID_REQUEST), and features shaped as Kafka sends them, which `kafka-features describe` prints."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from logbroker.protocol import ApiKey, api
from logbroker.protocol.errors import ErrorCode as E
from logbroker_devtools.client.connection import Connection, parse_bootstrap
from support import both_targets, kafka_tool, target_bootstrap

pytestmark = pytest.mark.timeout(180)

AV = api(ApiKey.ApiVersions).request
DC = api(ApiKey.DescribeCluster).request


@pytest.fixture(scope="module", params=both_targets())
def target(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from target_bootstrap(request)


def versions(bootstrap: str, version: int, **fields: Any) -> Any:
    with Connection(*parse_bootstrap(bootstrap)) as c:
        return c.do(AV(client_software_name="lb-test", client_software_version="1.0", **fields), version)


def cluster_id(bootstrap: str) -> str:
    with Connection(*parse_bootstrap(bootstrap)) as c:
        return c.do(DC(include_cluster_authorized_operations=False), 0).cluster_id


def test_v5_checks_the_cluster_and_node_a_client_names(target: str) -> None:
    cid = cluster_id(target)
    ok = versions(target, 5, cluster_id=cid, node_id=1)
    assert ok.error_code == 0 and any(k.api_key == ApiKey.ApiVersions and k.max_version >= 5 for k in ok.api_keys)
    assert versions(target, 5).error_code == 0  # naming neither: no check
    for fields, code in (({"cluster_id": "AAAAAAAAAAAAAAAAAAAAAA", "node_id": 1}, E.REBOOTSTRAP_REQUIRED),
                         ({"cluster_id": cid, "node_id": 7}, E.REBOOTSTRAP_REQUIRED),
                         ({"cluster_id": cid}, E.INVALID_REQUEST), ({"node_id": 1}, E.INVALID_REQUEST)):  # fmt: skip
        r = versions(target, 5, **fields)
        assert (r.error_code, r.api_keys) == (code, []), fields


@pytest.mark.parametrize("version", [3, 4, 5])
def test_features_are_shaped_as_kafka_sends_them(target: str, version: int) -> None:
    r = versions(target, version)
    supported = {f.name: (f.min_version, f.max_version) for f in r.supported_features}
    finalized = {f.name: (f.min_version_level, f.max_version_level) for f in r.finalized_features}
    assert r.finalized_features_epoch >= 0
    assert supported["metadata.version"][0] == 7 and finalized["metadata.version"][0] >= 7
    if version < 4:  # ranges starting at 0 are left out below v4
        assert set(supported) == {"metadata.version"}
    else:
        assert {"group.version", "transaction.version", "share.version", "kraft.version"} <= set(supported)
        assert supported["group.version"] == (0, 1) and supported["transaction.version"][0] == 0
    assert all(lo == hi and lo > 0 for lo, hi in finalized.values())  # a level 0 is never sent
    assert finalized["group.version"] == (1, 1) and finalized["transaction.version"][0] >= 1


def test_kafka_features_describe(target: str) -> None:
    r = kafka_tool("kafka-features", target, "describe")
    assert r.returncode == 0, r.output
    lines = {line.split()[1]: line for line in r.stdout.splitlines() if line.startswith("Feature:")}
    assert {"metadata.version", "group.version", "transaction.version"} <= set(lines)
    assert "FinalizedVersionLevel: 1" in lines["group.version"] and "SupportedMaxVersion: 1" in lines["group.version"]
