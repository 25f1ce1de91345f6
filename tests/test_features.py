"""UpdateFeatures (KIP-584) and what the levels turn on and off, asserted on logbroker and Apache Kafka 4.4 (each
broker the module's own, since the levels are changed): `kafka-features upgrade/downgrade/disable` and the
refusals of Kafka's controller with its messages; a disabled streams or consumer-group protocol answering
UNSUPPORTED_VERSION; the levels surviving kill -9 (logbroker)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from logbroker.protocol import ApiKey, api
from logbroker.protocol.errors import ErrorCode as E
from logbroker_devtools.client.connection import Connection, parse_bootstrap
from logbroker_devtools.testing.process import BrokerProcess
from support import both_targets, kafka_peer, kafka_tool, unique

pytestmark = pytest.mark.timeout(240)

UF = api(ApiKey.UpdateFeatures).request
AV = api(ApiKey.ApiVersions).request
CGH = api(ApiKey.ConsumerGroupHeartbeat).request
SGH = api(ApiKey.StreamsGroupHeartbeat).request
FAILED = "The update failed for all features since the following feature had an error: "


@pytest.fixture(scope="module", params=both_targets())
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if request.param == "logbroker":
        with BrokerProcess(tmp_path_factory.mktemp("features") / "data") as proc:
            yield proc.bootstrap
        return
    with kafka_peer(own=True) as kafka:
        yield kafka


def update(bootstrap: str, *updates: tuple[str, int, int], validate_only: bool = False, version: int = 1) -> Any:
    K = UF.FeatureUpdateKey
    keys = [K(feature=n, max_version_level=lvl, upgrade_type=t, allow_downgrade=t != 1) for n, lvl, t in updates]
    with Connection(*parse_bootstrap(bootstrap), timeout=30) as c:
        return c.do(UF(timeout_ms=30_000, feature_updates=keys, validate_only=validate_only), version)


def finalized(bootstrap: str) -> dict[str, int]:
    with Connection(*parse_bootstrap(bootstrap), timeout=30) as c:
        r = c.do(AV(client_software_name="t", client_software_version="1"), 4)
    return {f.name: f.max_version_level for f in r.finalized_features}


def test_refusals_carry_kafkas_messages_and_change_nothing(target: str) -> None:
    before = finalized(target)
    controller = 1  # the node id of both brokers here

    def refused(*updates: tuple[str, int, int], version: int = 1) -> tuple[int, str]:
        r = update(target, *updates, version=version)
        assert r.results == []  # a refusal has no per-feature results
        return r.error_code, r.error_message

    assert refused(("transaction.version", 3, 1)) == (
        E.INVALID_UPDATE_VERSION, f"{FAILED}Invalid update version 3 for feature transaction.version. Local controller "
        f"{controller} only supports versions 0-2")  # fmt: skip
    assert refused(("transaction.version", 1, 1)) == (
        E.INVALID_UPDATE_VERSION, f"{FAILED}Invalid update version 1 for feature transaction.version. Can't downgrade "
        "the version of this feature without setting the upgrade type to either safe or unsafe downgrade.")  # fmt: skip
    # v0's AllowDowngrade is not looked at: a downgrade is refused as an upgrade would be.
    assert refused(("transaction.version", 1, 2), version=0)[1].endswith("either safe or unsafe downgrade.")
    assert refused(("no.such.feature", 1, 1)) == (
        E.INVALID_UPDATE_VERSION, f"{FAILED}Invalid update version 1 for feature no.such.feature. Local controller "
        f"{controller} does not support this feature.")  # fmt: skip
    assert refused(("metadata.version", 20, 2)) == (
        E.INVALID_UPDATE_VERSION, f"{FAILED}Unsupported metadata.version downgrade from 33 to 20. Refusing to perform "
        "the requested downgrade because it might delete metadata information.")  # fmt: skip
    assert (
        refused(("metadata.version", 99, 1))[1]
        == f"{FAILED}Invalid update version 99 for feature metadata.version. Local controller {controller} only "
        "supports versions 7-33"
    )
    # One bad update fails the others with it.
    assert refused(("share.version", 0, 2), ("transaction.version", 5, 1))[0] == E.INVALID_UPDATE_VERSION
    r = update(target, ("transaction.version", 1, 2), validate_only=True)
    assert (r.error_code, [(x.feature, x.error_code, x.error_message) for x in r.results]) == (
        0, [("transaction.version", 0, "NONE")])  # fmt: skip
    assert finalized(target) == before  # nothing changed


def test_kafka_features_downgrades_disables_and_upgrades(target: str) -> None:
    """The operator's tool on both brokers; disabled protocols answer UNSUPPORTED_VERSION meanwhile."""

    def tool(*args: str) -> str:
        r = kafka_tool("kafka-features", target, *args)
        assert r.returncode == 0, r.output
        return r.stdout

    assert "transaction.version was downgraded to 1." in tool("downgrade", "--feature", "transaction.version=1")
    disabled = tool("disable", "--feature", "streams.version", "--feature", "group.version")
    assert "streams.version was disabled." in disabled and "group.version was disabled." in disabled
    levels = finalized(target)
    assert levels["transaction.version"] == 1 and "streams.version" not in levels and "group.version" not in levels
    with Connection(*parse_bootstrap(target), timeout=30) as c:
        r = c.do(CGH(group_id=unique("g"), member_id=unique("m"), member_epoch=0, rebalance_timeout_ms=30000,
                     subscribed_topic_names=["t"], topic_partitions=[]), 0)  # fmt: skip
        assert (r.error_code, r.error_message) == (E.UNSUPPORTED_VERSION, None)
        r = c.do(SGH(group_id=unique("g"), member_id=unique("m"), member_epoch=0, endpoint_information_epoch=-1,
                     rebalance_timeout_ms=30000, topology=SGH.Topology(epoch=0, subtopologies=[]), active_tasks=[],
                     standby_tasks=[], warmup_tasks=[]), 1)  # fmt: skip
        assert r.error_code == E.UNSUPPORTED_VERSION
    described = tool("describe")
    assert "FinalizedVersionLevel: 1" in next(x for x in described.splitlines() if "transaction.version" in x)
    upgraded = tool("upgrade", "--feature", "transaction.version=2", "--feature", "streams.version=1", "--feature",
                    "group.version=1")  # fmt: skip
    assert upgraded.count("was upgraded to") == 3, upgraded
    deadline = time.monotonic() + 10
    while finalized(target).get("group.version") != 1 and time.monotonic() < deadline:
        time.sleep(0.2)  # Kafka publishes the new levels to its broker shortly after the controller
    levels = finalized(target)
    assert (levels["transaction.version"], levels["streams.version"], levels["group.version"]) == (2, 1, 1)


def test_levels_survive_kill_9(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data") as proc:
        assert update(proc.bootstrap, ("transaction.version", 1, 2), ("share.version", 0, 3)).error_code == 0
        before = finalized(proc.bootstrap)
        proc.kill()
        proc.start()
        after = finalized(proc.bootstrap)
        assert after == before and after["transaction.version"] == 1 and "share.version" not in after


def test_a_damaged_features_file_is_logged_and_the_defaults_hold(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data") as proc:
        assert update(proc.bootstrap, ("transaction.version", 1, 2)).error_code == 0
        proc.stop()
        (tmp_path / "data" / "__configs" / "features.json").write_bytes(b"{not json")
        proc.start()
        assert finalized(proc.bootstrap)["transaction.version"] == 2  # the default, the damage said in the log
        assert "features.json is unreadable" in proc.log_tail(200)
        assert update(proc.bootstrap, ("transaction.version", 1, 2)).error_code == 0  # and rewritten whole
        proc.kill()
        proc.start()
        assert finalized(proc.bootstrap)["transaction.version"] == 1
