"""`logbroker demo`: the whole stack on one machine, from notifications to a chart.

It starts the embedded broker in this process, publishes an OpenStack-like notification stream
through `logbroker.notify` (simulated event time, an incident, a few late events), runs the
built-in `archive` and `rollup` Spark pipelines over it, checks what they wrote, and prints a
summary and the paths of the Parquet archive, the rollup and a PNG chart. Everything it starts is
stopped again, also on Ctrl-C or an error.

A run owns a fixed set of paths under OUT (see `OWNED`) and resets only those, so repeated runs
give the same result and nothing else in OUT is touched.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import math
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from rich.console import Console

__all__ = ["DEFAULT_NOTIFICATIONS", "DemoError", "DemoResult", "demo", "generate", "run_demo"]

DEFAULT_NOTIFICATIONS = 40_000
DEFAULT_MINUTES = 30
DEFAULT_SEED = 8
TOPIC = "notifications"
# Envelope priorities in severity order, as the rollup and the chart show them.
PRIORITY_ORDER = ("INFO", "WARN", "ERROR", "CRITICAL")
# What a run creates under OUT and therefore may delete on the next run; nothing else is removed.
# Checkpoints sit in OUT/checkpoints rather than inside the datasets: the rollup's upsert sink
# replaces its whole directory on every batch, and the data dirs then hold only data.
MARKER = ".logbroker-demo"
OWNED = ("broker", "archive", "rollup", "checkpoints", "rollup.png", "summary.json")
# Siblings the rollup's upsert sink writes next to its directory while swapping in a new version.
OWNED_GLOBS = ("rollup.tmp-*", "rollup.old")
INSTALL_HINT = "pip install 'logbroker[demo]'"
# Late events arrive at most this long after their event time: inside the rollup's 5-minute
# watermark, so they update their minute instead of being dropped and totals still match.
MAX_LATENESS_S = 150.0
LATE_FRACTION = 0.004


class DemoError(RuntimeError):
    """A failure the demo explains in one message (missing tool, pipeline failure, bad output dir)."""


@dataclass
class DemoResult:
    """What a run produced and measured; also written to OUT/summary.json."""

    out: Path
    archive: Path
    rollup: Path
    chart: Path
    summary: Path
    bootstrap: str
    published: int
    by_priority: dict[str, int]
    by_event_type: dict[str, int]
    late_events: int
    start: str
    end: str
    archived_records: int = 0
    archived_bytes: int = 0
    parquet_files: int = 0
    parquet_bytes: int = 0
    rollup_rows: int = 0
    rollup_total: int = 0
    rollup_by_priority: dict[str, int] = field(default_factory=dict)
    top_event_types: list[tuple[str, int]] = field(default_factory=list)
    incident_minutes: list[str] = field(default_factory=list)
    pipeline_rows: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("out", "archive", "rollup", "chart", "summary"):
            data[key] = str(data[key])
        data["top_event_types"] = [list(x) for x in self.top_event_types]
        return data


# ------------------------------------------------------------------------------ the stream


@dataclass
class Event:
    """One notification to publish: who, what, how severe, when it happened (UTC)."""

    publisher_id: str
    event_type: str
    priority: str
    payload: dict[str, Any]
    context: dict[str, Any]
    when: dt.datetime
    late: bool = False


class _World:
    """A small cloud whose state makes payloads plausible: tenants, hosts, instances, volumes, ports."""

    FLAVORS = (
        ("m1.tiny", 512, 1, 1),
        ("m1.small", 2048, 1, 20),
        ("m1.medium", 4096, 2, 40),
        ("m1.large", 8192, 4, 80),
        ("c1.xlarge", 16384, 8, 160),
    )
    IMAGES = ("ubuntu-24.04", "debian-12", "centos-stream-9", "cirros-0.6.2", "fedora-40", "windows-2022")

    def __init__(self, rng: random.Random, compute_hosts: int) -> None:
        self.rng = rng
        self.compute_hosts = [f"compute.host{i}" for i in range(1, compute_hosts + 1)]
        self.network_hosts = ["network.node1", "network.node2"]
        self.storage_hosts = ["volume.storage1", "volume.storage2", "volume.storage3"]
        self.identity_hosts = ["identity.keystone1", "identity.keystone2"]
        self.image_hosts = ["image.glance1"]
        self.projects = [(self.uid(), f"project-{n}") for n in ("web", "batch", "ml", "ci", "db", "edge", "qa")]
        self.users = [(self.uid(), f"user{i:02d}") for i in range(24)]
        self.image_ids = {name: self.uid() for name in self.IMAGES}
        self.instances: list[dict[str, Any]] = [self._new_instance() for _ in range(300)]
        self.volumes = [self.uid() for _ in range(200)]
        self.networks = [self.uid() for _ in range(12)]

    def uid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def _new_instance(self) -> dict[str, Any]:
        rng = self.rng
        flavor = rng.choice(self.FLAVORS)
        image = rng.choice(self.IMAGES)
        project = rng.choice(self.projects)
        return {
            "instance_id": self.uid(),
            "display_name": f"{project[1].split('-')[1]}-{rng.randrange(1000):03d}",
            "tenant_id": project[0],
            "user_id": rng.choice(self.users)[0],
            "host": rng.choice(self.compute_hosts),
            "flavor": flavor,
            "image": image,
        }

    def context(self) -> dict[str, Any]:
        rng = self.rng
        project = rng.choice(self.projects)
        user = rng.choice(self.users)
        return {
            "request_id": f"req-{self.uid()}",
            "global_request_id": None,
            "user_id": user[0],
            "user_name": user[1],
            "project_id": project[0],
            "project_name": project[1],
            "roles": ["member", "reader"] if rng.random() < 0.9 else ["admin", "member", "reader"],
            "is_admin": False,
        }

    # ---- payload builders: sizes vary from a few hundred bytes to several KB, as in real clouds

    def instance_payload(self, inst: dict[str, Any], when: dt.datetime, state: str, **extra: Any) -> dict[str, Any]:
        name, mem, vcpus, disk = inst["flavor"]
        payload: dict[str, Any] = {
            "tenant_id": inst["tenant_id"],
            "user_id": inst["user_id"],
            "instance_id": inst["instance_id"],
            "display_name": inst["display_name"],
            "host": inst["host"].split(".", 1)[1],
            "node": inst["host"].split(".", 1)[1] + ".cloud.example",
            "availability_zone": "nova",
            "instance_type": name,
            "memory_mb": mem,
            "vcpus": vcpus,
            "root_gb": disk,
            "ephemeral_gb": 0,
            "disk_gb": disk,
            "image_ref_url": f"http://image.cloud.example:9292/images/{self.image_ids[inst['image']]}",
            "image_meta": {"base_image_ref": self.image_ids[inst["image"]], "os_distro": inst["image"].split("-")[0]},
            "state": state,
            "state_description": extra.pop("state_description", ""),
            "created_at": (when - dt.timedelta(hours=self.rng.randrange(1, 500))).isoformat(),
            "launched_at": (when - dt.timedelta(minutes=self.rng.randrange(1, 600))).isoformat(),
            "metadata": {f"tag{i}": self.uid()[:8] for i in range(self.rng.randrange(0, 6))},
        }
        payload.update(extra)
        return payload

    def fixed_ips(self) -> list[dict[str, Any]]:
        rng = self.rng
        return [
            {
                "address": f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(2, 255)}",
                "type": "fixed",
                "version": 4,
                "vif_mac": ":".join(f"{rng.randrange(256):02x}" for _ in range(6)),
                "label": f"net-{rng.randrange(12)}",
                "meta": {},
            }
            for _ in range(rng.randrange(1, 4))
        ]

    def traceback(self, error: str) -> str:
        frames = [
            ("nova/compute/manager.py", "_build_and_run_instance", 2741),
            ("nova/virt/libvirt/driver.py", "spawn", 4412),
            ("nova/virt/block_device.py", "attach", 683),
            ("os_brick/initiator/connectors/iscsi.py", "connect_volume", 512),
            ("oslo_concurrency/processutils.py", "execute", 438),
        ]
        depth = self.rng.randrange(3, len(frames) + 1)
        lines = ["Traceback (most recent call last):"]
        for path, func, line in frames[:depth]:
            lines.append(f'  File "/usr/lib/python3/dist-packages/{path}", line {line}, in {func}')
            lines.append(f"    {func}(context, instance, block_device_info=block_device_info)")
        lines.append(error)
        return "\n".join(lines)


# (service, event_type, priority, weight) of normal minutes; the incident mix is separate.
_NORMAL: tuple[tuple[str, str, str, float], ...] = (
    ("compute", "compute.instance.create.start", "INFO", 6),
    ("compute", "compute.instance.create.end", "INFO", 6),
    ("compute", "compute.instance.delete.start", "INFO", 3),
    ("compute", "compute.instance.delete.end", "INFO", 3),
    ("compute", "compute.instance.update", "INFO", 10),
    ("compute", "compute.instance.exists", "INFO", 12),
    ("compute", "compute.instance.power_off.end", "INFO", 2),
    ("compute", "compute.instance.power_on.end", "INFO", 2),
    ("compute", "compute.instance.volume.attach", "INFO", 3),
    ("compute", "compute.instance.create.error", "ERROR", 0.12),
    ("network", "port.create.end", "INFO", 8),
    ("network", "port.update.end", "INFO", 6),
    ("network", "port.delete.end", "INFO", 5),
    ("network", "floatingip.update.end", "INFO", 3),
    ("network", "network.create.end", "INFO", 0.6),
    ("network", "router.interface.create", "INFO", 0.6),
    ("storage", "volume.create.start", "INFO", 3),
    ("storage", "volume.create.end", "INFO", 3),
    ("storage", "volume.attach.end", "INFO", 3),
    ("storage", "volume.detach.end", "INFO", 2),
    ("storage", "volume.usage", "INFO", 4),
    ("storage", "snapshot.create.end", "INFO", 1),
    ("identity", "identity.authenticate", "INFO", 15),
    ("identity", "identity.authenticate", "WARN", 0.8),
    ("identity", "identity.user.created", "INFO", 0.3),
    ("identity", "identity.role_assignment.created", "INFO", 0.4),
    ("image", "image.send", "INFO", 3),
    ("image", "image.upload", "INFO", 0.5),
    ("image", "image.activate", "INFO", 0.5),
)
# A storage back end failing: attaches and volume-backed boots fail, clients retry and re-authenticate.
_INCIDENT: tuple[tuple[str, str, str, float], ...] = (
    ("storage", "volume.attach.error", "ERROR", 10),
    ("storage", "volume.create.error", "ERROR", 4),
    ("compute", "compute.instance.volume.attach.error", "ERROR", 8),
    ("compute", "compute.instance.create.error", "ERROR", 4),
    ("storage", "volume.backend.degraded", "WARN", 3),
    ("compute", "compute.instance.update", "WARN", 5),
    ("identity", "identity.authenticate", "WARN", 4),
    ("storage", "volume.service.down", "CRITICAL", 0.15),
)
# Share of the incident mix in each incident minute (the rest is the normal mix) and extra load.
_INCIDENT_SHAPE = (0.15, 0.45, 0.6, 0.35, 0.1)


def _payload(world: _World, service: str, event_type: str, priority: str, when: dt.datetime) -> dict[str, Any]:
    rng = world.rng
    if service == "compute":
        inst = rng.choice(world.instances)
        if event_type.endswith("create.start"):
            inst = world._new_instance()
            world.instances[rng.randrange(len(world.instances))] = inst
            return world.instance_payload(inst, when, "building", state_description="scheduling")
        if event_type.endswith("create.end"):
            return world.instance_payload(inst, when, "active", fixed_ips=world.fixed_ips(), message="Success")
        if event_type.endswith(".error"):
            err = (
                "VolumeDeviceNotFound: Volume device not found at /dev/disk/by-path/ip-10.0.3.17:3260-iscsi"
                if "volume" in event_type or rng.random() < 0.7
                else "NoValidHost: No valid host was found. There are not enough hosts available."
            )
            return world.instance_payload(
                inst,
                when,
                "error",
                state_description="spawning" if "create" in event_type else "attaching",
                code=500,
                message=err.split(":", 1)[0],
                exception=world.traceback(err),
                volume_id=rng.choice(world.volumes),
            )
        if event_type == "compute.instance.exists":
            audit_end = when.replace(minute=0, second=0, microsecond=0)
            return world.instance_payload(
                inst,
                when,
                "active",
                audit_period_beginning=(audit_end - dt.timedelta(hours=1)).isoformat(),
                audit_period_ending=audit_end.isoformat(),
                bandwidth={
                    f"net-{i}": {"bw_in": rng.randrange(10**9), "bw_out": rng.randrange(10**9)}
                    for i in range(rng.randrange(1, 4))
                },
            )
        if priority == "WARN":
            return world.instance_payload(
                inst, when, "active", state_description="volume attach retry", old_task_state="attaching"
            )
        if event_type.endswith("volume.attach"):
            return world.instance_payload(inst, when, "active", volume_id=rng.choice(world.volumes))
        return world.instance_payload(inst, when, "active" if "power_off" not in event_type else "stopped")
    if service == "network":
        return {
            "port" if "port" in event_type else event_type.split(".")[0]: {
                "id": world.uid(),
                "network_id": rng.choice(world.networks),
                "tenant_id": rng.choice(world.projects)[0],
                "mac_address": "fa:16:3e:" + ":".join(f"{rng.randrange(256):02x}" for _ in range(3)),
                "fixed_ips": [
                    {"subnet_id": world.uid(), "ip_address": f"10.{rng.randrange(256)}.0.{rng.randrange(2, 255)}"}
                ],
                "device_owner": rng.choice(("compute:nova", "network:dhcp", "network:router_interface")),
                "status": "ACTIVE" if not event_type.endswith("delete.end") else "DOWN",
                "binding:host_id": rng.choice(world.compute_hosts).split(".", 1)[1],
                "admin_state_up": True,
            }
        }
    if service == "storage":
        payload: dict[str, Any] = {
            "volume_id": rng.choice(world.volumes),
            "tenant_id": rng.choice(world.projects)[0],
            "host": f"{rng.choice(world.storage_hosts).split('.', 1)[1]}@ceph#rbd",
            "size": rng.choice((1, 10, 20, 50, 100, 500)),
            "volume_type": rng.choice(("ssd", "hdd", "replicated")),
            "status": "available",
            "display_name": f"vol-{rng.randrange(10000):04d}",
            "availability_zone": "nova",
            "created_at": (when - dt.timedelta(days=rng.randrange(0, 90))).isoformat(),
        }
        if event_type.startswith("volume.attach") or event_type.startswith("volume.detach"):
            payload["instance_uuid"] = rng.choice(world.instances)["instance_id"]
            payload["status"] = "in-use" if event_type == "volume.attach.end" else "available"
        if priority in ("ERROR", "CRITICAL"):
            payload["status"] = "error"
            payload["reason"] = "rbd: cluster health HEALTH_ERR, 12 pgs inactive; operation timed out after 60s"
        if priority == "WARN":
            payload["reason"] = "rbd: slow ops, oldest one blocked for 32 sec"
        if event_type == "volume.usage":
            payload["usage"] = [{"t": i, "read_bytes": rng.randrange(10**8)} for i in range(rng.randrange(2, 12))]
        return payload
    if service == "identity":
        success = priority == "INFO"
        return {
            "typeURI": "http://schemas.dmtf.org/cloud/audit/1.0/event",
            "id": world.uid(),
            "eventTime": when.isoformat(),
            "action": "authenticate" if event_type == "identity.authenticate" else event_type.split(".", 1)[1],
            "eventType": "activity",
            "outcome": "success" if success else "failure",
            "initiator": {
                "typeURI": "service/security/account/user",
                "id": rng.choice(world.users)[0],
                "host": {"address": f"192.0.2.{rng.randrange(1, 255)}", "agent": "python-keystoneclient"},
            },
            "target": {"typeURI": "service/security/account/user", "id": world.uid()},
            "observer": {"typeURI": "service/security", "id": "openstack:keystone"},
            "reason": {} if success else {"reasonCode": "401", "reasonType": "HTTP"},
        }
    # image
    return {
        "id": world.uid(),
        "name": rng.choice(world.IMAGES),
        "owner": rng.choice(world.projects)[0],
        "size": rng.randrange(10**7, 10**10),
        "disk_format": rng.choice(("qcow2", "raw")),
        "container_format": "bare",
        "status": "active",
        "checksum": f"{rng.getrandbits(128):032x}",
        "bytes_sent": rng.randrange(10**6, 10**9),
        "receiver_tenant_id": rng.choice(world.projects)[0],
    }


def _publisher(world: _World, service: str) -> str:
    hosts = {
        "compute": world.compute_hosts,
        "network": world.network_hosts,
        "storage": world.storage_hosts,
        "identity": world.identity_hosts,
        "image": world.image_hosts,
    }[service]
    return world.rng.choice(hosts)


def _per_minute(total: int, minutes: int, incident: dict[int, float], rng: random.Random) -> list[int]:
    """Split `total` over the minutes: a slow daily-like wave, noise, and extra load in the incident."""
    phase = rng.random() * math.tau
    weights = [
        max(0.2, 1 + 0.25 * math.sin(phase + math.tau * m / max(minutes, 1) * 1.3) + rng.uniform(-0.08, 0.08))
        * (1 + 1.2 * incident.get(m, 0.0))
        for m in range(minutes)
    ]
    scale = total / sum(weights)
    counts = [int(w * scale) for w in weights]
    # Largest remainders get the rounding leftovers so the counts add up exactly.
    for m in sorted(range(minutes), key=lambda m: weights[m] * scale - counts[m], reverse=True)[
        : total - sum(counts)
    ]:
        counts[m] += 1
    return counts


def incident_window(minutes: int, rng: random.Random) -> dict[int, float]:
    """Minute index -> share of incident events, placed in the second half of the run."""
    if minutes < 3:
        return {minutes - 1: _INCIDENT_SHAPE[2]}
    length = min(len(_INCIDENT_SHAPE), max(1, minutes // 6))
    shape = _INCIDENT_SHAPE[(len(_INCIDENT_SHAPE) - length) // 2 :][:length]
    first = rng.randrange(minutes // 2, max(minutes // 2 + 1, minutes - length))
    return {first + i: s for i, s in enumerate(shape)}


def generate(
    count: int, minutes: int = DEFAULT_MINUTES, seed: int = DEFAULT_SEED, start: dt.datetime | None = None
) -> Iterator[Event]:
    """The demo's notification stream in publish order, deterministic for a seed (except `start`).

    Events are spread over `minutes` of simulated time from `start` (default: that many minutes
    before now, on a minute boundary); a few are published up to MAX_LATENESS_S after their event
    time, out of order, as a slow host or a retry would deliver them.
    """
    rng = random.Random(seed)
    if start is None:
        now = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0)
        start = now - dt.timedelta(minutes=minutes)
    world = _World(rng, compute_hosts=8)
    incident = incident_window(minutes, rng)
    normal_kinds, normal_w = zip(*((k[:3], k[3]) for k in _NORMAL), strict=True)
    incident_kinds, incident_w = zip(*((k[:3], k[3]) for k in _INCIDENT), strict=True)
    held: list[tuple[float, Event]] = []  # late events waiting for their publish time
    for minute, n in enumerate(_per_minute(count, minutes, incident, rng)):
        base = start + dt.timedelta(minutes=minute)
        share = incident.get(minute, 0.0)
        for offset in sorted(rng.random() * 60.0 for _ in range(n)):
            when = base + dt.timedelta(seconds=offset)
            now_s = minute * 60.0 + offset
            while held and held[0][0] <= now_s:
                yield held.pop(0)[1]
            kinds, weights = (incident_kinds, incident_w) if rng.random() < share else (normal_kinds, normal_w)
            service, event_type, priority = rng.choices(kinds, weights)[0]
            event = Event(
                publisher_id=_publisher(world, service),
                event_type=event_type,
                priority=priority,
                payload=_payload(world, service, event_type, priority, when),
                context=world.context(),
                when=when,
            )
            if rng.random() < LATE_FRACTION:
                event.late = True
                held.append((now_s + rng.uniform(20.0, MAX_LATENESS_S), event))
                held.sort(key=lambda x: x[0])
                continue
            yield event
    for _, event in held:  # the end of the run flushes whatever is still delayed
        yield event


# ------------------------------------------------------------------------------ the run


class _SimClock:
    """The Notifier's clock: returns the event time of the notification being published."""

    def __init__(self) -> None:
        self.now = dt.datetime.now(dt.UTC)

    def __call__(self) -> dt.datetime:
        return self.now


def check_prerequisites() -> None:
    """Fail before anything starts when a piece is missing, with what to install."""
    missing = [m for m in ("pyspark", "matplotlib") if importlib.util.find_spec(m) is None]
    if missing:
        raise DemoError(f"the demo needs {' and '.join(missing)}: {INSTALL_HINT}")
    from logbroker.spark import SparkSetupError
    from logbroker.spark.session import _check_java  # session()'s own message, but before anything starts

    try:
        _check_java()
    except SparkSetupError as exc:
        raise DemoError(str(exc)) from None


def reset_outputs(out: Path) -> None:
    """Remove what an earlier run wrote (only the OWNED paths), refusing a directory the demo
    did not create when one of those names already exists there."""
    out.mkdir(parents=True, exist_ok=True)
    marker = out / MARKER
    present = [name for name in OWNED if (out / name).exists() or (out / name).is_symlink()]
    present += sorted(p.name for pattern in OWNED_GLOBS for p in out.glob(pattern))
    if present and not marker.exists():
        raise DemoError(
            f"{out} already holds {', '.join(present)} not written by logbroker demo "
            f"(no {MARKER} marker); choose another --out or remove them"
        )
    for name in present:
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    marker.write_text("written by `logbroker demo`; a new run replaces: " + ", ".join(OWNED) + "\n")


class _Stage:
    """A running stage: `update` shows live detail next to the spinner, `done` ends its ✓ line."""

    def __init__(self, status: Any, text: str) -> None:
        self.status, self.text, self.done = status, text, ""

    def update(self, detail: str) -> None:
        self.status.update(f"{self.text} [dim]{detail}[/]")


@contextmanager
def _stage(result: DemoResult, name: str, console: Console, text: str) -> Iterator[_Stage]:
    """Time a stage under a spinner and print one ✓ line with its duration when it succeeds."""
    started = time.monotonic()
    with console.status(text, spinner="dots") as status:
        stage = _Stage(status, text)
        yield stage
    result.seconds[name] = round(time.monotonic() - started, 2)
    done = f", {stage.done}" if stage.done else ""
    console.print(f"[green]✓[/] {text}{done} [dim]({result.seconds[name]:.1f}s)[/]", highlight=False)


def _publish(
    bootstrap: str, count: int, minutes: int, seed: int, console: Console
) -> tuple[Counter[str], Counter[str], int, dt.datetime, dt.datetime]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from logbroker.notify import Notifier

    clock = _SimClock()
    base = Notifier(
        f"kafka://{bootstrap}",
        topics=[TOPIC],
        confirm=False,
        clock=clock,
        # Batches of many small JSON records: what a busy cloud's notifier would configure.
        driver_options={"producer_batch_timeout": 0.02, "producer_batch_size": 10_000, "send_timeout": 60.0},
    )
    by_priority: Counter[str] = Counter()
    by_event_type: Counter[str] = Counter()
    late = 0
    first = last = None
    notifiers: dict[str, Notifier] = {}
    try:
        with Progress(
            TextColumn("publishing"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[sim]}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            disable=not console.is_terminal,  # logs get the summary line below, not bar redraws
        ) as progress:
            task = progress.add_task("publish", total=count, sim="")
            for i, event in enumerate(generate(count, minutes, seed), 1):
                notifier = notifiers.get(event.publisher_id)
                if notifier is None:
                    notifier = notifiers[event.publisher_id] = base.prepare(publisher_id=event.publisher_id)
                clock.now = event.when
                getattr(notifier, event.priority.lower())(event.context, event.event_type, event.payload)
                by_priority[event.priority] += 1
                by_event_type[event.event_type] += 1
                late += event.late
                first = event.when if first is None or event.when < first else first
                last = event.when if last is None or event.when > last else last
                if i % 500 == 0 or i == count:
                    progress.update(task, completed=i, sim=f"event time {event.when:%H:%M:%S}")
            base.flush()
    finally:
        base.close()
    assert first is not None and last is not None
    return by_priority, by_event_type, late, first, last


def _progress(stage: _Stage) -> Callable[[dict[str, Any]], None]:
    """Adapt a pipeline's progress reports (rows, rows/s, lag) to a one-line spinner detail."""

    def report(p: dict[str, Any]) -> None:
        lag = p.get("lag")
        stage.update(
            f"{int(p.get('rows') or 0):,} rows, {float(p.get('rows_per_second') or 0):,.0f} rows/s, "
            f"lag {'?' if lag is None else f'{lag:,}'}"
        )

    return report


def _check_run(run: Any) -> int:
    """A pipeline that stopped early is a failure of the demo, and Ctrl-C inside it (which the
    pipeline runner turns into a clean stop) must still end the demo."""
    if run.stopped == "interrupted":
        raise KeyboardInterrupt
    if run.stopped != "finished":
        raise DemoError(f"the {run.name} pipeline stopped early ({run.stopped}) after {run.rows_in:,} rows")
    return int(run.rows_in)


# Spark's default log4j profile prints WARN lines (native Hadoop, profile in use) meant for
# operators, not for someone watching a demo; errors still get through.
_QUIET_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
"""


@contextmanager
def _spark_session(master: str) -> Iterator[SparkSession]:
    """A session for the run; the JVM it launched is shut down afterwards, so a caller of
    run_demo() keeps no Java process (one already running in this process is left alone)."""
    from pyspark import SparkContext

    from logbroker.spark import session

    had_gateway = SparkContext._gateway is not None
    with tempfile.TemporaryDirectory(prefix="logbroker-demo-") as tmp:
        log4j = Path(tmp) / "log4j2.properties"
        log4j.write_text(_QUIET_LOG4J)
        spark = session(
            master=master,
            app_name="logbroker-demo",
            conf={"spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={log4j.as_uri()}"},
        )
        try:
            spark.sparkContext.setLogLevel("ERROR")
            yield spark
        finally:
            spark.stop()
            if not had_gateway:
                _shutdown_gateway()


def _shutdown_gateway() -> None:
    """Stop the py4j gateway JVM that pyspark launched (spark.stop() leaves it running)."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:
        return
    proc = getattr(gateway, "proc", None)
    try:
        gateway.shutdown()
    finally:
        SparkContext._gateway = None
        SparkContext._jvm = None
        if proc is not None:
            if proc.stdin is not None:
                proc.stdin.close()  # the gateway JVM exits when its stdin closes
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)


def _analyse(spark: SparkSession, result: DemoResult) -> list[dict[str, Any]]:
    """Read back what the pipelines wrote (the archive through its _spark_metadata log) and fill in
    the summary; returns the rollup rows for the chart."""
    from pyspark.sql import functions as F

    from logbroker.spark.builtins import read_archive

    archive = read_archive(str(result.archive), spark)
    row = archive.agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("bytes")).first()
    result.archived_records = int(row["n"] or 0)
    result.archived_bytes = int(row["bytes"] or 0)
    files = [Path(f.removeprefix("file://").removeprefix("file:")) for f in archive.inputFiles()]
    result.parquet_files = len(files)
    result.parquet_bytes = sum(f.stat().st_size for f in files if f.exists())

    rollup = spark.read.parquet(str(result.rollup))
    rows = [
        {**r.asDict(), "priority": r["priority"] or "UNKNOWN"}  # undecodable records have no priority
        for r in rollup.select("window_start", "event_type", "priority", "count", "bytes").collect()
    ]
    result.rollup_rows = len(rows)
    result.rollup_total = sum(int(r["count"]) for r in rows)
    by_priority: Counter[str] = Counter()
    by_type: Counter[str] = Counter()
    for r in rows:
        by_priority[r["priority"]] += int(r["count"])
        by_type[r["event_type"]] += int(r["count"])
    result.rollup_by_priority = dict(by_priority)
    result.top_event_types = by_type.most_common(8)
    result.incident_minutes = _incident_minutes(rows)
    return rows


def _incident_minutes(rows: list[dict[str, Any]]) -> list[str]:
    """Minutes whose WARN/ERROR/CRITICAL count stands out: at least four times the median minute
    and a fifth of the worst one (background failures never qualify, the whole burst does)."""
    bad: Counter[dt.datetime] = Counter()
    minutes: set[dt.datetime] = set()
    for r in rows:
        minutes.add(r["window_start"])
        if r["priority"] != "INFO":
            bad[r["window_start"]] += int(r["count"])
    if not bad:
        return []
    values = [bad.get(m, 0) for m in minutes]
    threshold = max(4 * statistics.median(values), 0.2 * max(values), 1)
    return [f"{m:%Y-%m-%d %H:%M}" for m in sorted(minutes) if bad.get(m, 0) >= threshold]


def write_chart(rows: list[dict[str, Any]], path: Path, incident: list[str], title: str) -> Path:
    """Stacked notifications per minute by priority, payload bytes on a second axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    minutes = sorted({r["window_start"] for r in rows})
    counts = {p: dict.fromkeys(minutes, 0) for p in PRIORITY_ORDER}
    others = sorted({r["priority"] for r in rows} - set(PRIORITY_ORDER))
    for p in others:
        counts[p] = dict.fromkeys(minutes, 0)
    volume = dict.fromkeys(minutes, 0)
    for r in rows:
        counts[r["priority"]][r["window_start"]] += int(r["count"])
        volume[r["window_start"]] += int(r["bytes"])
    colors = {"INFO": "#4c8bd6", "WARN": "#f2a93b", "ERROR": "#d9453d", "CRITICAL": "#7a1f1f"}
    fig, ax = plt.subplots(figsize=(11, 5.5))
    bottom = [0] * len(minutes)
    width = 1 / 24 / 60 * 0.85  # days, as matplotlib's date axis counts
    for p in (*PRIORITY_ORDER, *others):
        values = [counts[p][m] for m in minutes]
        if not any(values):
            continue
        ax.bar(minutes, values, width, bottom=bottom, label=p, color=colors.get(p), align="edge")
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    top = max(bottom or [1]) * 1.18
    for label in incident:
        start = dt.datetime.strptime(label, "%Y-%m-%d %H:%M")
        ax.axvspan(start, start + dt.timedelta(minutes=1), color="#d9453d", alpha=0.08, lw=0, zorder=0)
    if incident:
        first = dt.datetime.strptime(incident[0], "%Y-%m-%d %H:%M")
        ax.annotate("incident", (first, top * 0.86), color="#a02a25", fontsize=9, ha="right",
                    xytext=(-4, 0), textcoords="offset points")  # fmt: skip
    ax.set_ylabel("notifications per minute")
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M"))
    ax.set_xlabel("event time (UTC)")
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax2 = ax.twinx()
    ax2.plot(
        [m + dt.timedelta(seconds=30) for m in minutes],
        [volume[m] / 1e6 for m in minutes],
        color="#333333",
        lw=1.5,
        marker=".",
        label="MB of notifications",
    )
    ax2.set_ylabel("MB per minute")
    ax2.set_ylim(bottom=0)
    handles, labels = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(handles + h2, labels + l2, loc="upper left", fontsize=9, ncol=5, framealpha=0.95)
    ax.set_ylim(top=top)
    ax.set_title(title, fontsize=11, loc="left")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _fmt_bytes(n: float) -> str:
    """Decimal units, as the chart's MB axis."""
    for unit in ("B", "KB", "MB"):
        if n < 1000:
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n:,.1f} GB"


def print_summary(result: DemoResult, console: Console) -> None:
    from rich.table import Table

    table = Table(title="logbroker demo", show_header=True, header_style="bold", title_justify="left")
    table.add_column("", no_wrap=True)
    table.add_column("value", justify="right", no_wrap=True)
    table.add_column("", style="dim")
    table.add_row("notifications published", f"{result.published:,}", f"{result.late_events} late, out of order")
    for p in (*PRIORITY_ORDER, *sorted(set(result.by_priority) - set(PRIORITY_ORDER))):
        if p in result.by_priority:
            table.add_row(f"  {p}", f"{result.by_priority[p]:,}", f"topic {TOPIC}.{p.lower()}")
    table.add_row("event time", f"{result.start[11:16]} - {result.end[11:16]}", "UTC, simulated")
    table.add_row("archived records", f"{result.archived_records:,}", _fmt_bytes(result.archived_bytes) + " of values")
    table.add_row("Parquet files", f"{result.parquet_files:,}", _fmt_bytes(result.parquet_bytes))
    table.add_row("rollup rows", f"{result.rollup_rows:,}", f"{result.rollup_total:,} notifications counted")
    for name, n in result.top_event_types[:5]:
        table.add_row(f"  top: {name}", f"{n:,}", "")
    table.add_row("incident minute(s)", ", ".join(m[11:] for m in result.incident_minutes) or "-", "WARN/ERROR burst")
    for stage, secs in result.seconds.items():
        table.add_row(f"time: {stage}", f"{secs:.1f}s", "")
    console.print(table)


def run_demo(
    out: Path | str = Path("logbroker-demo"),
    *,
    master: str = "local[2]",
    notifications: int = DEFAULT_NOTIFICATIONS,
    minutes: int = DEFAULT_MINUTES,
    seed: int = DEFAULT_SEED,
    console: Console | None = None,
) -> DemoResult:
    """Run the demo into `out`; raises DemoError with a readable message when something is missing
    or a stage fails (KeyboardInterrupt passes through), always after stopping what it started."""
    from rich.console import Console

    from logbroker.embedded import EmbeddedBroker

    if notifications < 1 or minutes < 1:
        raise DemoError("--notifications and --minutes must be at least 1")
    console = console or Console()
    out = Path(out).absolute()
    check_prerequisites()
    reset_outputs(out)
    started = time.monotonic()
    broker = EmbeddedBroker(out / "broker", num_partitions=3, fsync="interval")
    result: DemoResult | None = None
    stage = "starting the embedded broker"
    try:
        t0 = time.monotonic()
        broker.start()
        bootstrap = broker.bootstrap
        console.print(
            f"[green]✓[/] embedded broker at {bootstrap}, data in {out / 'broker'} "
            f"[dim]({time.monotonic() - t0:.1f}s)[/]"
        )
        stage = "publishing"
        t0 = time.monotonic()
        by_priority, by_type, late, first, last = _publish(
            bootstrap, notifications, minutes, seed, console
        )
        result = DemoResult(
            out=out,
            archive=out / "archive",
            rollup=out / "rollup",
            chart=out / "rollup.png",
            summary=out / "summary.json",
            bootstrap=bootstrap,
            published=sum(by_priority.values()),
            by_priority=dict(by_priority),
            by_event_type=dict(by_type),
            late_events=late,
            start=first.isoformat(),
            end=last.isoformat(),
        )
        result.seconds["publish"] = round(time.monotonic() - t0, 2)
        rate = result.published / max(result.seconds["publish"], 1e-9)
        console.print(
            f"[green]✓[/] published {result.published:,} notifications from "
            f"{len({*by_type})} event types ({rate:,.0f}/s) [dim]({result.seconds['publish']:.1f}s)[/]"
        )
        topics = [f"{TOPIC}.{p.lower()}" for p in by_priority]

        stage = "running the Spark pipelines"
        rows = _spark_stages(result, topics, master, console)
        stage = "writing the chart"
        title = (
            f"logbroker demo: {result.published:,} notifications, rollup per minute "
            f"({result.start[:16].replace('T', ' ')} - {result.end[11:16]} UTC)"
        )
        with _stage(result, "chart", console, f"chart written to {result.chart}"):
            write_chart(rows, result.chart, result.incident_minutes, title)
        result.seconds["total"] = round(time.monotonic() - started, 2)
        result.summary.write_text(json.dumps(result.to_json(), indent=2, default=str) + "\n")
    except (KeyboardInterrupt, DemoError):
        raise
    except Exception as exc:
        raise DemoError(f"demo failed while {stage}: {_short(exc)}") from exc
    finally:
        broker.stop()
    return result


class _GentleInterrupt:
    """Ctrl-C while Spark runs: stop the streaming queries and cancel jobs from a helper thread,
    then end the demo as interrupted when the current call returns.

    pyspark's own SIGINT handler makes a py4j call from inside the signal handler, in the middle
    of another py4j call on the same thread; that breaks the connection and prints pages of
    tracebacks. A second Ctrl-C interrupts immediately.
    """

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self.requested = False
        self._previous: Any = None

    def __enter__(self) -> _GentleInterrupt:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)

    def _handle(self, _signum: int, _frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        threading.Thread(target=self._cancel, name="demo-interrupt", daemon=True).start()

    def _cancel(self) -> None:
        try:
            for query in self.spark.streams.active:
                query.stop()
            self.spark.sparkContext.cancelAllJobs()
        except Exception:  # the session may be stopping already; the main thread still ends the run
            pass

    def check(self) -> None:
        if self.requested:
            raise KeyboardInterrupt


def _spark_stages(result: DemoResult, topics: list[str], master: str, console: Console) -> list[dict[str, Any]]:
    """Archive, roll up and read back in one session. Errors are turned into DemoError here, while
    the JVM still runs: pyspark needs it even to format a captured Java exception."""
    stage = "starting Spark"
    interrupt: _GentleInterrupt | None = None
    with ExitStack() as stack:
        try:
            with _stage(result, "spark start", console, f"Spark session started ({master})"):
                spark = stack.enter_context(_spark_session(master))
                interrupt = stack.enter_context(_GentleInterrupt(spark))
            from logbroker.spark import builtins

            stage = "running the archive pipeline"
            with _stage(result, "archive", console, "archive pipeline") as st:
                run = builtins.archive(
                    result.bootstrap, str(result.archive), topics=topics, spark=spark, progress=_progress(st),
                    checkpoint=str(result.out / "checkpoints" / "archive"),
                )  # fmt: skip
                interrupt.check()
                result.pipeline_rows["archive"] = _check_run(run)
                st.done = f"{run.rows_in:,} records -> {result.archive}"
            stage = "running the rollup pipeline"
            with _stage(result, "rollup", console, "rollup pipeline") as st:
                run = builtins.rollup(
                    result.bootstrap, str(result.rollup), topics=topics, spark=spark, progress=_progress(st),
                    checkpoint=str(result.out / "checkpoints" / "rollup"),
                )  # fmt: skip
                interrupt.check()
                result.pipeline_rows["rollup"] = _check_run(run)
                st.done = f"{run.rows_in:,} notifications -> {result.rollup}"
            stage = "reading the outputs back"
            with _stage(result, "read back", console, "archive and rollup read back") as st:
                rows = _analyse(spark, result)
                interrupt.check()
                st.done = f"{result.archived_records:,} archived, {result.rollup_total:,} counted in the rollup"
            return rows
        except (KeyboardInterrupt, DemoError):
            raise
        except Exception as exc:
            if interrupt is not None and interrupt.requested:  # a job cancelled by Ctrl-C
                raise KeyboardInterrupt from None
            raise DemoError(f"demo failed while {stage}: {_short(exc)}") from exc
    raise AssertionError("unreachable")


def _short(exc: BaseException) -> str:
    """The first lines of an error: Spark's Java stack traces run to hundreds of lines."""
    from logbroker.spark import SparkSetupError

    try:
        text = str(exc).strip() or type(exc).__name__
    except Exception:  # a captured Java exception cannot be formatted once its JVM is gone
        text = type(exc).__name__
    if isinstance(exc, SparkSetupError):
        return text
    lines = text.splitlines()
    head = "\n".join(lines[:6])
    return f"{type(exc).__name__}: {head}" + ("\n  ..." if len(lines) > 6 else "")


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--out",
    default="logbroker-demo",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory for the broker data, Parquet archive, rollup and chart.",
)
@click.option("--master", default="local[2]", show_default=True, help="Spark master URL.")
@click.option(
    "-n", "--notifications", default=DEFAULT_NOTIFICATIONS, show_default=True, type=click.IntRange(min=1),
    help="Notifications to publish.",
)  # fmt: skip
@click.option(
    "--minutes", default=DEFAULT_MINUTES, show_default=True, type=click.IntRange(1, 24 * 60),
    help="Simulated event time the stream spans.",
)  # fmt: skip
@click.option("--seed", default=DEFAULT_SEED, show_default=True, type=int, help="Same seed, same stream.")
def demo(out: Path, master: str, notifications: int, minutes: int, seed: int) -> None:
    """Publish notifications to the embedded broker, archive and roll them up with Spark, chart them."""
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 120)  # pipes and logs: keep table rows and paths on one line
    console.print(
        f"[bold]logbroker demo[/]: {notifications:,} notifications over {minutes} simulated minutes "
        f"-> embedded broker -> Spark archive + rollup ({master}) -> {out}/"
    )
    try:
        result = run_demo(out, master=master, notifications=notifications, minutes=minutes, seed=seed, console=console)
    except DemoError as exc:
        console.print(f"[bold red]error:[/] {exc}", highlight=False)
        sys.exit(1)
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/]: broker and Spark stopped")
        sys.exit(130)
    print_summary(result, console)
    console.print(f"archive (Parquet, by topic/date): {result.archive}", highlight=False, soft_wrap=True)
    console.print(f"rollup (Parquet, per minute):     {result.rollup}", highlight=False, soft_wrap=True)
    console.print(f"chart (PNG):                      {result.chart}", highlight=False, soft_wrap=True)
    console.print(f"summary (JSON):                   {result.summary}", highlight=False, soft_wrap=True)


if __name__ == "__main__":
    demo()
