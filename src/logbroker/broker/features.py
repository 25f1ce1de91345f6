"""Finalized features (KIP-584): the levels this broker runs at, what ApiVersions reports, what UpdateFeatures
(`kafka-features upgrade/downgrade/disable`) changes, and what the feature-gated protocols check.

Each feature has the range this broker supports and a finalized level. The first start finalizes Kafka 4.4's
defaults (transaction.version from the `transaction_version` setting, as `kafka-storage format --feature`
would); a change made with UpdateFeatures is kept in `<data>/__configs/features.json` (written atomically and
synced before the answer) and wins over the setting from then on. Levels gate as in Kafka: group.version 0
turns off KIP-848 consumer groups, share.version 0 share groups, streams.version 0 streams groups (their APIs
answer UNSUPPORTED_VERSION); transaction.version is what clients read to pick the transaction protocol and
what the coordinator's own aborts use. Validation and messages are Kafka's FeatureControlManager's.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from logbroker.config import BrokerSettings
from logbroker.protocol.errors import ErrorCode as E
from logbroker.storage.files import read_json_object, write_atomic

log = logging.getLogger(__name__)

FILE = "features.json"
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3

# Name -> (supported min, supported max), in the order Kafka 4.4 lists them.
SUPPORTED: dict[str, tuple[int, int]] = {
    "metadata.version": (7, 33),
    "kraft.version": (0, 0),
    "transaction.version": (0, 2),
    "group.version": (0, 1),
    "eligible.leader.replicas.version": (0, 1),
    "share.version": (0, 1),
    "streams.version": (0, 1),
}
METADATA_VERSION = 33  # Kafka 4.4's latest (4.4-IV2)
ELR_NEEDS_METADATA_VERSION = 23


# A feature-gated API while its feature is finalized below 1: UNSUPPORTED_VERSION, and no message (Kafka 4.4).
DISABLED_MESSAGE = None


class FeatureError(Exception):
    def __init__(self, error: E, message: str) -> None:
        super().__init__(message)
        self.error = error


@dataclass(frozen=True)
class FeatureUpdate:
    name: str
    level: int
    upgrade_type: int = UPGRADE


def _range(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"{lo}+" if hi == 32767 else f"{lo}-{hi}"


class Features:
    """This broker's finalized feature levels; the only writer of `__configs/features.json`."""

    def __init__(self, settings: BrokerSettings, data_dir: Path, node_id: int) -> None:
        self.node_id = node_id
        self.path = Path(data_dir) / "__configs" / FILE
        self.levels: dict[str, int] = {
            "metadata.version": METADATA_VERSION,
            "kraft.version": 0,
            "transaction.version": settings.transaction_version,
            "group.version": 1,
            "eligible.leader.replicas.version": 1,
            "share.version": 1,
            "streams.version": 1,
        }
        self.epoch = 0  # bumped by every change, kept with the levels
        self._load()

    def _load(self) -> None:
        raw = read_json_object(self.path, "features are at their defaults")
        if raw is None:
            return
        levels = raw.get("levels")
        if not isinstance(levels, dict):
            log.error("%s holds no feature levels; features are at their defaults", self.path)
            return
        for name, level in levels.items():
            lo, hi = SUPPORTED.get(name, (0, -1))
            if isinstance(level, int) and (level == 0 or lo <= level <= hi):
                self.levels[name] = level
            else:
                log.error("%s: %s=%r is not a level this broker supports; kept at %d", self.path, name, level,
                          self.levels.get(name, 0))  # fmt: skip
        self.epoch = int(raw.get("epoch", 0))

    def level(self, name: str) -> int:
        return self.levels.get(name, 0)

    def finalized(self) -> list[tuple[str, int]]:
        """(name, level) of each feature, in Kafka's order (ApiVersions leaves out those at 0)."""
        return [(name, self.levels.get(name, 0)) for name in SUPPORTED]

    def update(self, updates: list[FeatureUpdate], validate_only: bool) -> None:
        """Kafka's FeatureControlManager: every update is checked, the first failure fails them all and
        nothing changes; otherwise all are applied together, durably. Raises FeatureError."""
        new = dict(self.levels)
        for u in updates:
            self._check(u, new)
            new[u.name] = u.level
        if validate_only or new == self.levels:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, json.dumps({"levels": new, "epoch": self.epoch + 1}, sort_keys=True).encode())
        changed = {n: (self.levels.get(n, 0), lvl) for n, lvl in new.items() if self.levels.get(n, 0) != lvl}
        self.levels, self.epoch = new, self.epoch + 1
        log.info("features updated: %s", ", ".join(f"{n} {a} -> {b}" for n, (a, b) in sorted(changed.items())))

    def _check(self, u: FeatureUpdate, levels: dict[str, int]) -> None:
        def invalid(reason: str) -> FeatureError:
            return FeatureError(E.INVALID_UPDATE_VERSION, f"Invalid update version {u.level} for feature {u.name}. "
                                f"{reason}")  # fmt: skip

        if u.upgrade_type not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
            raise invalid("The controller does not support the given upgrade type.")
        if u.level < 0:
            raise invalid("A feature version cannot be less than 0.")
        if u.name == "metadata.version":
            self._check_metadata_version(u)
            return
        supported = SUPPORTED.get(u.name)
        if supported is None:
            if u.level > 0:
                raise invalid(f"Local controller {self.node_id} does not support this feature.")
            raise invalid(f"Feature {u.name} not found.")
        lo, hi = supported
        if u.level != 0 and not lo <= u.level <= hi:
            raise invalid(f"Local controller {self.node_id} only supports versions {_range(lo, hi)}")
        current = levels.get(u.name, 0)
        if u.level < current and u.upgrade_type == UPGRADE:
            raise invalid("Can't downgrade the version of this feature without setting the upgrade type to either "
                          "safe or unsafe downgrade.")  # fmt: skip
        if u.level > current and u.upgrade_type != UPGRADE:
            raise invalid("Can't downgrade to a newer version.")
        if u.name == "kraft.version" and u.level < current:
            raise invalid("Can't downgrade the version of this feature.")
        if (
            u.name == "eligible.leader.replicas.version"
            and u.level >= 1
            and METADATA_VERSION < ELR_NEEDS_METADATA_VERSION
        ):
            raise invalid(f"{u.name} could not be set to {u.level} because it depends on metadata.version level "
                          f"{ELR_NEEDS_METADATA_VERSION}")  # fmt: skip

    def _check_metadata_version(self, u: FeatureUpdate) -> None:
        lo, hi = SUPPORTED["metadata.version"]
        if not lo <= u.level <= hi:
            raise FeatureError(E.INVALID_UPDATE_VERSION, f"Invalid update version {u.level} for feature "
                               f"metadata.version. Local controller {self.node_id} only supports versions "
                               f"{_range(lo, hi)}")  # fmt: skip
        current = self.levels["metadata.version"]
        if u.level < current:
            if u.upgrade_type == UPGRADE:
                raise FeatureError(E.INVALID_UPDATE_VERSION,
                                   f"Invalid update version {u.level} for feature metadata.version. Can't downgrade "
                                   f"the version of this feature without setting the upgrade type to either safe or "
                                   f"unsafe downgrade.")  # fmt: skip
            extra = " Unsafe metadata downgrade is not supported in this version." if u.upgrade_type == 3 else ""
            raise FeatureError(E.INVALID_UPDATE_VERSION,
                               f"Unsupported metadata.version downgrade from {current} to {u.level}. Refusing to "
                               f"perform the requested downgrade because it might delete metadata information."
                               f"{extra}")  # fmt: skip
