"""Loopback ports for the processes tests and benchmarks start."""

from __future__ import annotations

import socket

__all__ = ["LOOPBACK", "free_port", "free_ports"]

LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    """Ask the kernel for an unused TCP port (racy by nature, fine on loopback CI)."""
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """``count`` distinct unused TCP ports."""
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
