"""The demo's notification stream: a small simulated cloud, normal traffic, an incident, late events."""

from __future__ import annotations

import datetime as dt
import math
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

DEFAULT_NOTIFICATIONS = 40_000
DEFAULT_MINUTES = 30
DEFAULT_SEED = 8
TOPIC = "notifications"
# Envelope priorities in severity order, as the rollup and the chart show them.
PRIORITY_ORDER = ("INFO", "WARN", "ERROR", "CRITICAL")
# Late events arrive at most this long after their event time: inside the rollup's 5-minute
# watermark, so they update their minute instead of being dropped and totals still match.
MAX_LATENESS_S = 150.0
LATE_FRACTION = 0.004


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
    for m in sorted(range(minutes), key=lambda m: weights[m] * scale - counts[m], reverse=True)[: total - sum(counts)]:
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
