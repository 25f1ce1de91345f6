"""The deployment examples work as written: the systemd unit passes `systemd-analyze verify` and its ExecStart
serves; the Containerfile's entrypoint, run with the image's environment (there is no container engine here),
serves on every interface and advertises what LOGBROKER_ADVERTISED_LISTENER says; the README's embedding
example runs as printed."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from logbroker_devtools.testing.net import free_port
from support import eventually, unique

ROOT = Path(__file__).resolve().parent.parent
UNIT = ROOT / "examples" / "systemd" / "logbroker.service"
CONTAINERFILE = ROOT / "examples" / "container" / "Containerfile"
README = ROOT / "README.md"
LOGBROKER = Path(sys.executable).parent / "logbroker"  # the venv's console script, what `pip install` puts on PATH


# ---------------------------------------------------------------------------------------------- helpers


def unit_entries(text: str, section: str) -> dict[str, list[str]]:
    """key -> values of one [section] of a unit file (a key may repeat)."""
    out: dict[str, list[str]] = {}
    current = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = line.strip("[]")
            continue
        if current == section:
            key, _, value = line.partition("=")
            out.setdefault(key.strip(), []).append(value.strip())
    return out


def containerfile_final_stage(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the last stage, continuation lines joined, comments dropped."""
    joined, buf = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        joined.append(buf + line)
        buf = ""
    instructions = [(ln.split(None, 1)[0].upper(), ln.split(None, 1)[1] if " " in ln else "") for ln in joined]
    last = max(i for i, (op, _) in enumerate(instructions) if op == "FROM")
    return instructions[last:]


def serve_and_check(argv: list[str], env: dict[str, str], bootstrap: str, advertised: str | None = None) -> str:
    """Run `argv` (a logbroker serve command line) until it answers a client at `bootstrap`: Metadata (the
    advertised address), a produce and a read back; then SIGTERM, which must end it with 0. Its output."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        md = eventually(lambda: admin.list_topics(timeout=5), timeout=30)
        if advertised is not None:
            assert [f"{b.host}:{b.port}" for b in md.brokers.values()] == [advertised]
        topic = unique("deploy")
        p = Producer({"bootstrap.servers": bootstrap})
        p.produce(topic, b"hello")
        assert p.flush(30) == 0
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, "auto.offset.reset": "earliest"})
        c.subscribe([topic])
        msg = None
        while msg is None:
            msg = c.poll(1.0)
        c.close()
        assert msg.error() is None and msg.value() == b"hello"
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out.decode(errors="replace")
    return out.decode(errors="replace")


@pytest.fixture
def logbroker_bin() -> Iterator[str]:
    if not LOGBROKER.exists():
        pytest.skip(f"no logbroker console script beside {sys.executable} (pip install -e . makes it)")
    yield str(LOGBROKER)


# ---------------------------------------------------------------------------------------------- systemd


def test_systemd_unit_verifies(tmp_path: Path) -> None:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed (systemd's tools)")
    text = UNIT.read_text()
    exec_start = shlex.split(unit_entries(text, "Service")["ExecStart"][0])
    # verify checks that ExecStart's binary exists: point it at this installation, change nothing else.
    installed = text.replace(exec_start[0], str(LOGBROKER))
    unit = tmp_path / "logbroker.service"
    unit.write_text(installed)
    r = subprocess.run([tool, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and not (r.stdout + r.stderr).strip(), r.stdout + r.stderr
    # The check has teeth: a misspelt key or value is reported.
    unit.write_text(installed.replace("Restart=on-failure", "Restart=on-failur").replace("UMask=", "UMsk="))
    r = subprocess.run([tool, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert "UMsk" in r.stdout + r.stderr and "on-failur" in r.stdout + r.stderr, r.stdout + r.stderr


def test_systemd_unit_settings() -> None:
    service = unit_entries(UNIT.read_text(), "Service")
    one = {k: v[-1] for k, v in service.items()}
    assert one["Type"] in ("exec", "notify")
    assert one["User"] not in ("", "root")
    assert one["Restart"] == "on-failure"
    assert one["KillSignal"] == "SIGTERM" and int(one["TimeoutStopSec"]) >= 30
    assert int(one["LimitNOFILE"]) >= 65536
    state = f"/var/lib/{one['StateDirectory']}"
    assert f"--data-dir {state}" in one["ExecStart"]
    # Hardening that would break the broker is absent: fsync (@sync) and setrlimit (@resources) stay allowed
    # (@system-service holds both), and it can open IPv4/IPv6 sockets.
    for filt in service.get("SystemCallFilter", []):
        assert filt == "@system-service" or not {"@sync", "@resources"} & set(filt.lstrip("~").split()), filt
    assert {"AF_INET", "AF_INET6"} <= set(one["RestrictAddressFamilies"].split())
    assert one["ProtectSystem"] == "strict" and one["NoNewPrivileges"] == "yes"


def test_systemd_exec_start_serves(tmp_path: Path, logbroker_bin: str) -> None:
    service = unit_entries(UNIT.read_text(), "Service")
    state = f"/var/lib/{service['StateDirectory'][-1]}"
    argv = shlex.split(service["ExecStart"][-1])
    argv = [logbroker_bin if a == argv[0] else a.replace(state, str(tmp_path / "state")) for a in argv]
    port = free_port()
    env = dict(os.environ) | {"LOGBROKER_LISTEN": f"127.0.0.1:{port}"}  # what /etc/logbroker/logbroker.env sets
    out = serve_and_check(argv, env, f"127.0.0.1:{port}")
    assert (tmp_path / "state").is_dir()
    assert all(json.loads(line)["level"] for line in out.splitlines())  # --log-format json, as the unit says


# ---------------------------------------------------------------------------------------------- container


def test_containerfile_recipe() -> None:
    stage = containerfile_final_stage(CONTAINERFILE.read_text())
    ops = dict(stage)  # the last of each instruction
    assert stage[0] == ("FROM", "python:3.11-slim")
    assert ops["USER"] not in ("root", "0")
    env = dict(p.split("=", 1) for op, args in stage if op == "ENV" for p in shlex.split(args))
    host, _, port = env["LOGBROKER_LISTEN"].rpartition(":")
    assert host == "0.0.0.0"
    assert ops["EXPOSE"].split() == [port]
    volumes = json.loads(ops["VOLUME"]) if ops["VOLUME"].startswith("[") else ops["VOLUME"].split()
    assert volumes == [env["LOGBROKER_DATA_DIR"]]
    assert "pip install" in " ".join(args for op, args in stage if op == "RUN")


def test_container_command_serves_and_advertises(tmp_path: Path, logbroker_bin: str) -> None:
    stage = containerfile_final_stage(CONTAINERFILE.read_text())
    entrypoint = next(json.loads(args) for op, args in reversed(stage) if op == "ENTRYPOINT")
    cmd = next((json.loads(args) for op, args in reversed(stage) if op == "CMD"), [])
    argv = [*entrypoint, *cmd]
    assert argv[0] == "logbroker"
    argv[0] = logbroker_bin
    image_env = dict(p.split("=", 1) for op, args in stage if op == "ENV" for p in shlex.split(args))
    port = free_port()
    # The image's environment; the data volume and port differ here, and the operator's `-e` advertises.
    env = (
        dict(os.environ)
        | image_env
        | {
            "LOGBROKER_DATA_DIR": str(tmp_path / "volume"),
            "LOGBROKER_LISTEN": image_env["LOGBROKER_LISTEN"].rsplit(":", 1)[0] + f":{port}",
            "LOGBROKER_ADVERTISED_LISTENER": f"localhost:{port}",
        }
    )
    out = serve_and_check(argv, env, f"127.0.0.1:{port}", advertised=f"localhost:{port}")
    assert (tmp_path / "volume").is_dir()
    records = [json.loads(line) for line in out.splitlines()]
    assert any(re.search(rf"0\.0\.0\.0:{port}", r["message"]) for r in records), records[:5]


# ---------------------------------------------------------------------------------------------- README


def test_readme_embedding_example_runs(tmp_path: Path) -> None:
    text = README.read_text()
    section = text[text.index("## Embedding") :]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    r = subprocess.run([sys.executable, "-c", code[1]], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert re.fullmatch(r"serving on 127\.0\.0\.1:\d+", lines[0]), lines
    assert lines[1] == "b'user-1' b'signed up'"
    assert (tmp_path / "app-data").is_dir()


def test_readme_keeps_its_two_setup_commands_first() -> None:
    blocks = re.findall(r"```(\w*)\n(.*?)```", README.read_text(), re.S)
    assert blocks[:2] == [
        ("bash", "python3 -m venv .venv && .venv/bin/pip install -e '.[demo]' && .venv/bin/logbroker demo\n"),
        ("bash", ".ci/run\n"),
    ]
    assert README.read_text().index("## Embedding") > README.read_text().index("## Layout")
