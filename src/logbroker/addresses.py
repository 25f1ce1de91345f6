"""HOST:PORT as every part of logbroker reads it: listeners, bootstrap lists, transport URLs.

One parser, so a bracketed IPv6 address, a missing port or a port out of range gets the same answer
everywhere, in a message that names what was being read.
"""

from __future__ import annotations


def parse_host_port(
    entry: str, what: str = "address", *, default_port: int | None = None, allow_port_zero: bool = False
) -> tuple[str, int]:
    """(host, port) of ``HOST:PORT`` or ``[IPv6]:PORT``; ``default_port`` when the entry has none (else an
    error). The host may be empty (the caller decides what that means); ValueError names ``what``."""
    text = entry.strip()
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError(f"{what}: {entry!r} has an unclosed '[' of an IPv6 address")
        host, rest = text[1:end], text[end + 1 :]
        if rest and not rest.startswith(":"):
            raise ValueError(f"{what}: expected ':PORT' after ']' in {entry!r}")
        port_text, has_port = rest[1:], bool(rest)
    elif text.count(":") > 1:
        raise ValueError(f"{what}: IPv6 addresses must be in brackets ([::1]:9092), got {entry!r}")
    else:
        host, has_port, port_text = text.rpartition(":") if ":" in text else (text, False, "")
        has_port = bool(has_port)
    if not has_port:
        if default_port is None:
            raise ValueError(f"{what} must be HOST:PORT, got {entry!r}")
        return host, default_port
    if not port_text:
        raise ValueError(f"{what}: the port of host {host!r} in {entry!r} is empty")
    low = 0 if allow_port_zero else 1
    if not port_text.isdigit() or not low <= int(port_text) <= 65535:
        raise ValueError(f"{what}: port {port_text!r} of {entry!r} is not a number in {low}-65535")
    return host, int(port_text)


def parse_bootstrap(servers: str, what: str = "bootstrap servers") -> list[tuple[str, int]]:
    """Every (host, port) of a comma-separated ``HOST:PORT[,HOST:PORT...]`` list; an empty host is refused."""
    out = []
    for part in servers.split(","):
        if not part.strip():
            raise ValueError(f"{what}: expected HOST:PORT[,HOST:PORT...], got {servers!r}")
        host, port = parse_host_port(part, what)
        if not host:
            raise ValueError(f"{what}: {part.strip()!r} names no host")
        out.append((host, port))
    return out
