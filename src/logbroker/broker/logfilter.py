"""Rate limiting of repeated log lines: a hostile or broken client must not be able to fill the disk
through the broker's log (one refused connection or bad request per line, thousands a second)."""

from __future__ import annotations

import logging
import time

# Loggers whose lines a client can provoke at will: ours and asyncio's ("socket.accept() out of system
# resource" repeats for as long as descriptors run out).
LOGGER_PREFIXES = ("logbroker", "asyncio")


class RepeatFilter(logging.Filter):
    """Lets `burst` lines of one message template through per `window` seconds, then counts the rest
    and says how many were suppressed on the next line of that template that gets through."""

    def __init__(self, burst: int = 100, window: float = 10.0) -> None:
        super().__init__()
        self.burst = burst
        self.window = window
        self._seen: dict[tuple[str, int, str], list[float | int]] = {}  # key -> [window start, count, dropped]
        self._installed: list[logging.Logger] = []

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.levelno, str(record.msg))
        now = time.monotonic()
        slot = self._seen.get(key)
        if slot is None or now - slot[0] >= self.window:
            dropped = int(slot[2]) if slot is not None else 0
            self._seen[key] = [now, 1, 0]
            if len(self._seen) > 10_000:  # templates are few; keys only grow with unusual messages
                self._seen = {k: v for k, v in self._seen.items() if now - v[0] < self.window}
            if dropped:
                record.msg = f"{record.msg} [{dropped} similar lines suppressed]"
            return True
        slot[1] += 1
        if slot[1] <= self.burst:
            return True
        slot[2] += 1
        return False

    def install(self) -> None:
        """Filter every logger the broker and asyncio have made (loggers apply filters only to their own
        records, not to those propagated from children, so each one gets it)."""
        names = [n for n in logging.root.manager.loggerDict if n.startswith(LOGGER_PREFIXES)]
        for name in names:
            logger = logging.getLogger(name)
            if self not in logger.filters:
                logger.addFilter(self)
                self._installed.append(logger)

    def uninstall(self) -> None:
        for logger in self._installed:
            logger.removeFilter(self)
        self._installed.clear()
