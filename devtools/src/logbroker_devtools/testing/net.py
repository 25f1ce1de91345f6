"""Loopback ports for the processes tests and benchmarks start."""

from __future__ import annotations

import itertools
import os
import random
import socket
import threading

__all__ = ["LOOPBACK", "PORT_BLOCK_ENV", "free_port", "free_ports"]

LOOPBACK = "127.0.0.1"
# "LO-HI": hand out ports from this block only. Parallel test workers each get a block of their own below the
# kernel's ephemeral range, so a port chosen here is never the one another worker just chose, nor the source
# port of some client's outgoing connection (both happen when the kernel picks: it picks from that range).
PORT_BLOCK_ENV = "LOGBROKER_PORT_BLOCK"

_lock = threading.Lock()
_cursor: itertools.cycle[int] | None = None
_cursor_block: str | None = None


def free_port(host: str = LOOPBACK) -> int:
    """An unused TCP port (racy by nature: nothing holds it until the caller's server binds it)."""
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """``count`` distinct unused TCP ports."""
    block = os.environ.get(PORT_BLOCK_ENV, "").strip()
    if block:
        return _from_block(block, count, host)
    # Hold every socket until all are chosen so one call never returns duplicates.
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _from_block(block: str, count: int, host: str) -> list[int]:
    """Walk the block round-robin from a random start (children inheriting the block start elsewhere than their
    parent), skipping ports something listens on or is connected from."""
    global _cursor, _cursor_block
    try:
        lo, hi = (int(p) for p in block.split("-", 1))
    except ValueError:
        raise ValueError(f"{PORT_BLOCK_ENV} must be LO-HI, not {block!r}") from None
    if not 1024 <= lo < hi <= 65535:
        raise ValueError(f"{PORT_BLOCK_ENV} must be LO-HI within 1024-65535, not {block!r}")
    out: list[int] = []
    with _lock:
        if _cursor is None or _cursor_block != block:
            ports = list(range(lo, hi + 1))
            start = random.randrange(len(ports))
            _cursor, _cursor_block = itertools.cycle(ports[start:] + ports[:start]), block
        for _ in range(hi - lo + 1):
            port = next(_cursor)
            if port not in out and _bindable(host, port):
                out.append(port)
                if len(out) == count:
                    return out
    raise OSError(f"no {count} free ports in {PORT_BLOCK_ENV}={block}")


def _bindable(host: str, port: int) -> bool:
    # SO_REUSEADDR as servers set it: a port whose last connection is in TIME_WAIT is free for a listener.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True
