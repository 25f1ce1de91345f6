"""The in-process broker: starts on its own thread, serves real clients, keeps data across restarts."""

from __future__ import annotations

from pathlib import Path

import confluent_kafka as ck
import pytest

from logbroker.embedded import EmbeddedBroker


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
