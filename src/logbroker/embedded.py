"""Run the broker inside the current process, on its own thread and event loop.

This is the standalone default of the user-facing APIs (the role RocksMQ plays in Milvus): a
program gets a durable Kafka-compatible broker without a second process, and talks to it over
loopback with ordinary Kafka clients exactly as it would to a cluster.
"""

from __future__ import annotations

import asyncio
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
