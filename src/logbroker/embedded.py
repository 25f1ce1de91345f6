"""Run the broker inside the current process, on its own thread and event loop.

This is the standalone default of the user-facing APIs (the role RocksMQ plays in Milvus): a
program gets a durable Kafka-compatible broker without a second process, and talks to it over
loopback with ordinary Kafka clients exactly as it would to a cluster. The faces share brokers through
`acquire_embedded` (one per data directory, reference counted) rather than starting their own.
"""

from __future__ import annotations

import asyncio
import atexit
import threading
from pathlib import Path
from typing import Any, Self

from logbroker.config import BrokerSettings, load_settings


class EmbeddedBroker:
    """`with EmbeddedBroker("./data") as b: use b.bootstrap` — started and stopped cleanly."""

    def __init__(self, data_dir: str | Path | None = None, listen: str = "127.0.0.1:0", **settings: Any) -> None:
        overrides = {"listen": listen, **settings}
        if data_dir is not None:
            overrides["data_dir"] = Path(data_dir)
        self.settings: BrokerSettings = load_settings(None, **overrides)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._broker: Any = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._stop: asyncio.Event | None = None

    @property
    def bootstrap(self) -> str:
        if self._broker is None:
            raise RuntimeError("the embedded broker is not running")
        return f"{self._broker.host}:{self._broker.port}"

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self._ready.is_set()

    def start(self, timeout: float = 30.0) -> Self:
        if self._thread is not None:
            return self
        self._thread = threading.Thread(target=self._run, name="logbroker-embedded", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError(f"embedded broker did not start within {timeout}s")
        if self._error is not None:
            err, self._error = self._error, None
            self._thread.join()
            self._thread = None
            raise RuntimeError(f"embedded broker failed to start: {err}") from err
        return self

    def _run(self) -> None:
        from logbroker.broker import Broker

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            broker = Broker(self.settings)
            try:
                await broker.start()
            except BaseException as exc:  # reported to the starting thread
                self._error = exc
                self._ready.set()
                return
            self._broker = broker
            self._ready.set()
            await self._stop.wait()
            await broker.stop()

        asyncio.run(main())

    def stop(self, timeout: float = 30.0) -> None:
        """Finish in-flight requests, sync, release the data directory."""
        if self._thread is None:
            return
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)
        self._thread = None
        self._broker = None
        self._ready.clear()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class EmbeddedLease:
    """One user's hold on a shared embedded broker (see `EmbeddedRegistry`); release it when done."""

    def __init__(self, registry: EmbeddedRegistry, entry: _Entry) -> None:
        self._registry = registry
        self._entry: _Entry | None = entry

    @property
    def broker(self) -> EmbeddedBroker:
        if self._entry is None:
            raise RuntimeError("embedded broker lease was released")
        return self._entry.broker

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    @property
    def data_dir(self) -> Path:
        return self.broker.settings.data_dir

    @property
    def released(self) -> bool:
        return self._entry is None or self._entry.refs <= 0

    def release(self) -> None:
        """Give the broker up; the last holder's release stops it. Idempotent."""
        entry, self._entry = self._entry, None
        if entry is not None:
            self._registry._release(entry)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class _Entry:
    def __init__(self, key: Path, broker: EmbeddedBroker, listen: str | None, settings: dict[str, Any]) -> None:
        self.key, self.broker, self.listen, self.settings = key, broker, listen, settings
        self.refs = 0


class EmbeddedRegistry:
    """Embedded brokers shared per data directory, reference counted.

    A data directory can serve one broker (it is flock'ed), yet one process may open it from several
    places: an mq Client, notifiers and listeners on an ``embedded://`` URL. Each user acquires a lease;
    the first starts the broker, the last release stops it (cleanly, so the next start skips recovery),
    and whatever is still held is stopped at interpreter exit.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[Path, _Entry] = {}

    def acquire(
        self, data_dir: str | Path, listen: str | None = None, settings: dict[str, Any] | None = None
    ) -> EmbeddedLease:
        """A lease on the broker of ``data_dir``, started now if needed (or if it died).

        ``listen``/``settings`` apply when the broker starts; ``None`` means "whatever runs" (default
        ``127.0.0.1:0``). Asking for other values than the running broker's is refused, not ignored.
        """
        key = Path(data_dir).resolve()
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                if (listen is not None and entry.listen is not None and listen != entry.listen) or (
                    settings is not None and settings != entry.settings
                ):
                    raise RuntimeError(
                        f"the embedded broker of {key} already runs with listen={entry.listen!r}, settings="
                        f"{entry.settings!r}; asked for listen={listen!r}, settings={settings!r}"
                    )
                if not entry.broker.running:  # its thread died: start a fresh one for every holder
                    entry.broker.stop()
                    entry.broker = EmbeddedBroker(key, listen=entry.listen or "127.0.0.1:0", **entry.settings).start()
            else:
                broker = EmbeddedBroker(key, listen=listen or "127.0.0.1:0", **(settings or {})).start()
                entry = self._entries[key] = _Entry(key, broker, listen, dict(settings or {}))
            entry.refs += 1
            return EmbeddedLease(self, entry)

    def _release(self, entry: _Entry) -> None:
        with self._lock:
            entry.refs -= 1
            if entry.refs > 0 or self._entries.get(entry.key) is not entry:
                return
            del self._entries[entry.key]
            entry.broker.stop()

    def refs(self, data_dir: str | Path) -> int:
        """How many leases hold the broker of ``data_dir`` (0: not running through this registry)."""
        entry = self._entries.get(Path(data_dir).resolve())
        return entry.refs if entry is not None else 0

    def stop_all(self) -> None:
        """Stop every broker, held or not (interpreter exit); outstanding leases become no-ops."""
        with self._lock:
            entries, self._entries = list(self._entries.values()), {}
        for entry in entries:
            entry.refs = 0
            entry.broker.stop()


registry = EmbeddedRegistry()
atexit.register(registry.stop_all)


def acquire_embedded(
    data_dir: str | Path, listen: str | None = None, settings: dict[str, Any] | None = None
) -> EmbeddedLease:
    """A lease on this process's shared embedded broker of ``data_dir`` (see `EmbeddedRegistry.acquire`)."""
    return registry.acquire(data_dir, listen, settings)
