"""Group configs (the GROUP config resource, KIP-848/KIP-932): per-group overrides of the consumer- and
share-group settings, set with IncrementalAlterConfigs/AlterConfigs (`kafka-configs --entity-type groups`)
and described with DescribeConfigs, as Kafka 4.4 serves them.

A group need not exist to have configs (Kafka accepts them ahead of the group). Each config's default is
the broker setting it overrides (its synonym), and every value is checked against Kafka's bounds with
Kafka's messages. The overrides are kept in `<data>/__configs/groups.json`, written atomically and synced
before the answer; a damaged file is logged and ignored (the defaults hold), never a reason not to start.
The streams-group and dead-letter-queue configs Kafka also lists are not served here (no streams groups,
no DLQ): setting one is refused as an unknown group config.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from logbroker.config import BrokerSettings
from logbroker.storage.configs import ConfigError, ConfigType
from logbroker.storage.files import read_json_object, write_atomic

from .configs import DEFAULT, Entry
from .loggers import config_values

log = logging.getLogger(__name__)

GROUP_CONFIG = 8  # DescribeConfigs' config_source for a group's own value
FILE = "groups.json"
_DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$")


def _range(name: str, lo: int, hi: int) -> Callable[[str], str]:
    def check(raw: str) -> str:
        try:
            n = int(raw.strip())
        except ValueError:
            raise ConfigError(f"Invalid value {raw} for configuration {name}: Not a number of type INT") from None
        if not lo <= n <= hi:
            raise ConfigError(f"{name} must be in the range {lo} to {hi} inclusive.")
        return str(n)

    return check


def _one_of(name: str, *values: str) -> Callable[[str], str]:
    def check(raw: str) -> str:
        if raw not in values:
            raise ConfigError(f"Invalid value {raw} for configuration {name}: String must be one of: "
                              f"{', '.join(values)}")  # fmt: skip
        return raw

    return check


def _boolean(name: str) -> Callable[[str], str]:
    def check(raw: str) -> str:
        if raw.strip().lower() not in ("true", "false"):
            why = "Expected value to be either true or false"
            raise ConfigError(f"Invalid value {raw} for configuration {name}: {why}")
        return raw.strip().lower()

    return check


def duration_ms(spec: str) -> int | None:
    """The milliseconds of an ISO-8601 duration as Java's Duration.parse takes it (PnDTnHnMn.nS), or None."""
    m = _DURATION.fullmatch(spec)
    if m is None or spec in ("P", "PT") or spec.endswith("T"):
        return None
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in m.groups())
    return int(((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000)


def _offset_reset(raw: str) -> str:
    if raw in ("earliest", "latest"):
        return raw
    if raw.startswith("by_duration:") and duration_ms(raw.removeprefix("by_duration:")) is not None:
        return raw
    raise ConfigError(
        f"Invalid value {raw} for configuration share.auto.offset.reset: Invalid value `{raw}` for configuration "
        "share.auto.offset.reset. The value must be either 'earliest', 'latest' or of the format "
        "'by_duration:<PnDTnHnMn.nS>'."
    )


@dataclass(frozen=True)
class GroupConfigSpec:
    name: str
    type: ConfigType
    synonym: str  # the broker config whose value is the default
    setting: str | None  # its BrokerSettings field (None: a fixed default)
    default: str
    check: Callable[[str], str]


def _spec(name: str, t: ConfigType, synonym: str, setting: str | None, default: str,
          check: Callable[[str], str]) -> tuple[str, GroupConfigSpec]:  # fmt: skip
    return name, GroupConfigSpec(name, t, synonym, setting, default, check)


T = ConfigType
GROUP_CONFIGS: Mapping[str, GroupConfigSpec] = dict([
    _spec("consumer.session.timeout.ms", T.INT, "group.consumer.session.timeout.ms",
          "group_consumer_session_timeout_ms", "45000", _range("consumer.session.timeout.ms", 45000, 60000)),
    _spec("consumer.heartbeat.interval.ms", T.INT, "group.consumer.heartbeat.interval.ms",
          "group_consumer_heartbeat_interval_ms", "5000", _range("consumer.heartbeat.interval.ms", 5000, 15000)),
    _spec("share.session.timeout.ms", T.INT, "group.share.session.timeout.ms", "group_share_session_timeout_ms",
          "45000", _range("share.session.timeout.ms", 45000, 60000)),
    _spec("share.heartbeat.interval.ms", T.INT, "group.share.heartbeat.interval.ms",
          "group_share_heartbeat_interval_ms", "5000", _range("share.heartbeat.interval.ms", 5000, 15000)),
    _spec("share.record.lock.duration.ms", T.INT, "group.share.record.lock.duration.ms",
          "group_share_record_lock_duration_ms", "30000", _range("share.record.lock.duration.ms", 15000, 60000)),
    _spec("share.delivery.count.limit", T.INT, "group.share.delivery.count.limit",
          "group_share_delivery_count_limit", "5", _range("share.delivery.count.limit", 2, 10)),
    _spec("share.partition.max.record.locks", T.INT, "group.share.partition.max.record.locks",
          "group_share_partition_max_record_locks", "2000", _range("share.partition.max.record.locks", 100, 4000)),
    _spec("share.auto.offset.reset", T.STRING, "share.auto.offset.reset", None, "latest", _offset_reset),
    _spec("share.isolation.level", T.STRING, "share.isolation.level", None, "read_uncommitted",
          _one_of("share.isolation.level", "read_committed", "read_uncommitted")),
    _spec("share.renew.acknowledge.enable", T.BOOLEAN, "share.renew.acknowledge.enable", None, "true",
          _boolean("share.renew.acknowledge.enable")),
])  # fmt: skip


class GroupConfigs:
    """Every group's overrides; the only writer of `__configs/groups.json`."""

    def __init__(self, settings: BrokerSettings, data_dir: Path) -> None:
        self.settings = settings
        self.path = Path(data_dir) / "__configs" / FILE
        self.overrides: dict[str, dict[str, str]] = {}
        self._load()

    def _load(self) -> None:
        raw = read_json_object(self.path, "group configs are at their defaults")
        if raw is None:
            return
        for group, values in raw.items():
            if not isinstance(values, dict):
                continue
            kept = {}
            for k, v in values.items():
                spec = GROUP_CONFIGS.get(k)
                try:
                    if spec is not None and isinstance(v, str):
                        kept[k] = spec.check(v)
                except ConfigError as exc:
                    log.error("group %r: config %s ignored: %s", group, k, exc)
            if kept:
                self.overrides[str(group)] = kept
        if self.overrides:
            log.info("group configs in force for %d group(s)", len(self.overrides))

    def default(self, spec: GroupConfigSpec) -> str:
        if spec.setting is None:
            return spec.default
        return str(getattr(self.settings, spec.setting))

    def value(self, group: str, name: str) -> str:
        spec = GROUP_CONFIGS[name]
        return self.overrides.get(group, {}).get(name) or self.default(spec)

    def int_value(self, group: str, name: str) -> int:
        return int(self.value(group, name))

    def entries(self, group: str, keys: list[str] | None) -> list[Entry]:
        mine = self.overrides.get(group, {})
        out = []
        for name in GROUP_CONFIGS if keys is None else dict.fromkeys(keys):  # asked-for keys in their order
            spec = GROUP_CONFIGS.get(name)
            if spec is None:
                continue
            broker = (spec.synonym, self.default(spec), DEFAULT)
            if name in mine:
                out.append(Entry(name, mine[name], GROUP_CONFIG, False, spec.type, ((name, mine[name], GROUP_CONFIG),
                                                                                     broker)))  # fmt: skip
            else:
                out.append(Entry(name, self.default(spec), DEFAULT, False, spec.type, (broker,)))
        return out

    def check(self, values: Mapping[str, str]) -> dict[str, str]:
        """The values as they would be stored; ConfigError (INVALID_CONFIG) for an unknown name or bad value."""
        out = {}
        for name, raw in values.items():
            spec = GROUP_CONFIGS.get(name)
            if spec is None:
                raise ConfigError(f"Unknown group config name: {name}")
            out[name] = spec.check(raw)
        return out

    def replace(self, group: str, values: Mapping[str, str], validate_only: bool) -> None:
        """Make `values` the group's whole set of overrides (checked first), durable before returning."""
        checked = self.check(values)
        if validate_only:
            return
        new = {g: dict(v) for g, v in self.overrides.items()}
        if checked:
            new[group] = checked
        else:
            new.pop(group, None)
        self.path.parent.mkdir(exist_ok=True)
        write_atomic(self.path, json.dumps(new, sort_keys=True).encode())
        self.overrides = new
        log.info("group %r configs: %s", group, config_values(checked) if checked else "defaults")
