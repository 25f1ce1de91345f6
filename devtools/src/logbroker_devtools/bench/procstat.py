"""The broker seen from /proc: which processes serve a port, their CPU seconds, memory and sockets.

A benchmark client on a 2-core machine competes with the broker for CPU, so a rate alone mixes the
two; the broker's own user+system seconds per GB (and per request) do not. The broker is found by the
port it listens on, which works alike for logbroker, Tansu and Kafka's JVM without their launchers
having to tell us a pid. Linux only: elsewhere the functions return empty/None.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_LISTEN, _ESTABLISHED = "0A", "01"


def _stat_fields(pid: int) -> list[str]:
    # The command name may hold spaces and parentheses: split after the last ')'.
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _sockets(port: int, state: str) -> set[str]:
    """Inodes of the TCP sockets whose local port is ``port`` and whose state is ``state``."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                cols = line.split()
                if len(cols) > 9 and cols[3] == state and int(cols[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(cols[9])
    return inodes


def listener_pids(port: int) -> list[int]:
    """Processes holding a listening socket on ``port`` (several with SO_REUSEPORT workers)."""
    inodes = {f"socket:[{i}]" for i in _sockets(port, _LISTEN)}
    pids: list[int] = []
    if not inodes:
        return pids
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (entry / "fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) in inodes:
                        pids.append(int(entry.name))
                        break
    return sorted(pids)


def process_tree(roots: list[int]) -> list[int]:
    """``roots`` and every live descendant (a broker's worker processes count as the broker)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                children.setdefault(int(_stat_fields(int(entry.name))[1]), []).append(int(entry.name))
    out, todo = [], list(roots)
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.append(pid)
            todo.extend(children.get(pid, []))
    return sorted(out)


def cpu_times(pids: list[int]) -> tuple[float, float]:
    """(user, system) CPU seconds of ``pids`` (all their threads; reaped children included): system time
    is where a broker's fsyncs and socket copies show."""
    user = system = 0
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            f = _stat_fields(pid)
            user += int(f[11]) + int(f[13])  # utime + cutime
            system += int(f[12]) + int(f[14])  # stime + cstime
    return user / TICK, system / TICK


def cpu_seconds(pids: list[int]) -> float:
    """User+system CPU seconds of ``pids``."""
    return sum(cpu_times(pids))


def rss_bytes(pids: list[int]) -> int:
    """Resident memory of ``pids`` added up (shared pages of a forked worker count twice)."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE
    return total


def established(port: int) -> int:
    """Established TCP connections whose local port is ``port``: the broker's side of its clients."""
    return len(_sockets(port, _ESTABLISHED))


@dataclass
class BrokerView:
    """The process tree serving ``port``, looked up once the broker listens."""

    port: int
    pids: list[int]

    @classmethod
    def find(cls, bootstrap: str) -> BrokerView | None:
        """None when no local process listens on the bootstrap port (a remote cluster)."""
        try:
            port = int(bootstrap.rsplit(":", 1)[1])
        except (IndexError, ValueError):
            return None
        roots = listener_pids(port)
        return cls(port, process_tree(roots)) if roots else None

    def cpu(self) -> float:
        return cpu_seconds(self.pids)

    def cpu_times(self) -> tuple[float, float]:
        return cpu_times(self.pids)

    def rss(self) -> int:
        return rss_bytes(self.pids)

    def connections(self) -> int:
        return established(self.port)
