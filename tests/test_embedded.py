"""The in-process broker: starts on its own thread, serves real clients, keeps data across restarts; and the
registry through which the faces share one broker per data directory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import confluent_kafka as ck
import pytest

from logbroker.embedded import EmbeddedBroker, EmbeddedRegistry


def test_embedded_round_trip_and_restart(tmp_path: Path) -> None:
    with EmbeddedBroker(tmp_path / "data") as b:
        p = ck.Producer({"bootstrap.servers": b.bootstrap})
        for i in range(100):
            p.produce("emb", value=str(i).encode())
        assert p.flush(30) == 0
    assert (tmp_path / "data" / ".clean-shutdown").exists()
    with EmbeddedBroker(tmp_path / "data") as b:
        c = ck.Consumer({"bootstrap.servers": b.bootstrap, "group.id": "emb", "auto.offset.reset": "earliest"})
        c.subscribe(["emb"])
        got: list[int] = []
        for _ in range(100):
            for m in c.consume(100, 0.2):
                got.append(int(m.value()))
            if len(got) == 100:
                break
        c.close()
        assert got == list(range(100))


def test_embedded_refuses_a_locked_data_dir_clearly(tmp_path: Path) -> None:
    with EmbeddedBroker(tmp_path / "d"), pytest.raises(RuntimeError, match="in use"):
        EmbeddedBroker(tmp_path / "d").start()


def test_embedded_bad_setting_names_the_key(tmp_path: Path) -> None:
    from logbroker.config import ConfigError

    with pytest.raises(ConfigError, match="fsync"):
        EmbeddedBroker(tmp_path / "d", fsync="sometimes")


# ------------------------------------------------------------------- the registry shared by the faces


def test_registry_shares_one_broker_per_data_dir_and_counts_references(tmp_path: Path) -> None:
    reg = EmbeddedRegistry()
    a = reg.acquire(tmp_path / "d")
    b = reg.acquire(tmp_path / "x" / ".." / "d")  # the same directory, spelled differently
    other = reg.acquire(tmp_path / "e")
    try:
        assert a.broker is b.broker and a.bootstrap == b.bootstrap and reg.refs(tmp_path / "d") == 2
        assert other.broker is not a.broker
        a.release()
        a.release()  # idempotent: the other holder keeps it
        assert b.broker.running and reg.refs(tmp_path / "d") == 1
        p = ck.Producer({"bootstrap.servers": b.bootstrap})
        p.produce("kept", b"v")
        assert p.flush(15) == 0
        broker = b.broker
        b.release()  # the last holder: stopped cleanly, directory unlocked
        assert not broker.running and reg.refs(tmp_path / "d") == 0
        assert (tmp_path / "d" / ".clean-shutdown").exists()
        with EmbeddedBroker(tmp_path / "d"):  # the flock is gone
            pass
    finally:
        other.release()
    assert other.released and reg.refs(tmp_path / "e") == 0


def test_registry_refuses_other_settings_and_restarts_a_dead_broker(tmp_path: Path) -> None:
    reg = EmbeddedRegistry()
    with reg.acquire(tmp_path / "d", "127.0.0.1:0", {"fsync": "interval"}) as lease:
        with pytest.raises(RuntimeError, match="already runs with"):
            reg.acquire(tmp_path / "d", settings={"fsync": "never"})
        with reg.acquire(tmp_path / "d") as any_settings:  # None: whatever runs
            assert any_settings.broker is lease.broker
        lease.broker.stop()  # died behind the registry's back
        with reg.acquire(tmp_path / "d") as again:
            assert again.broker.running and lease.broker is again.broker  # every holder sees the new one
            assert again.broker.settings.fsync == "interval"


def test_registry_stop_all_stops_what_is_still_held(tmp_path: Path) -> None:
    reg = EmbeddedRegistry()
    lease = reg.acquire(tmp_path / "d")
    broker = lease.broker
    reg.stop_all()
    assert not broker.running and lease.released
    lease.release()  # a no-op now


def test_interpreter_exit_stops_held_brokers_cleanly(tmp_path: Path) -> None:
    """A process that never releases its lease still shuts its broker down cleanly (no recovery next start)."""
    code = (
        "import sys; from logbroker.embedded import acquire_embedded; "
        "lease = acquire_embedded(sys.argv[1]); print(lease.bootstrap)"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "d")], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "d" / ".clean-shutdown").exists()


def test_mq_and_notify_share_the_embedded_broker(tmp_path: Path) -> None:
    """An mq Client and an `embedded://` URL on one data directory use one broker (the directory is locked,
    two would not start); closing the Client leaves it to notify, stop_embedded() then stops it."""
    from logbroker.mq import Client, InitialPosition
    from logbroker.notify import Notifier, get_transport, stop_embedded

    data = tmp_path / "data"
    url = f"embedded://{data}"
    client = Client({"embedded": {"data_dir": data}})
    try:
        assert get_transport(url).bootstrap == client.bootstrap
        with Notifier(url, "p", ["n"]) as n:
            n.info({}, "e", 1)
        broker = client._embedded
    finally:
        client.close()
    assert broker.running  # notify still holds it
    with Client({"embedded": {"data_dir": data}}) as c2, c2.subscribe("n.info", "s", InitialPosition.EARLIEST) as cons:
        m = cons.receive(15)
        assert m is not None and b'"payload":1' in m.payload
    stop_embedded()
    assert not broker.running
