"""The one HOST:PORT parser: listeners, bootstrap lists and transport URLs read addresses alike."""

from __future__ import annotations

import pytest

from logbroker.addresses import parse_bootstrap, parse_host_port


@pytest.mark.parametrize(
    ("entry", "kwargs", "expected"),
    [
        ("h:9092", {}, ("h", 9092)),
        ("[::1]:9092", {}, ("::1", 9092)),
        (":0", {"allow_port_zero": True}, ("", 0)),
        ("h", {"default_port": 9092}, ("h", 9092)),
        ("[fe80::1]", {"default_port": 1}, ("fe80::1", 1)),
        (" 10.0.0.1:65535 ", {}, ("10.0.0.1", 65535)),
    ],
)
def test_good_addresses(entry: str, kwargs: dict, expected: tuple[str, int]) -> None:
    assert parse_host_port(entry, **kwargs) == expected


@pytest.mark.parametrize(
    ("entry", "kwargs", "message"),
    [
        ("h", {}, "must be HOST:PORT"),
        ("h:", {}, "port of host 'h'"),
        ("h:0", {}, "not a number in 1-65535"),
        ("h:65536", {"allow_port_zero": True}, "not a number in 0-65535"),
        ("h:x", {}, "port 'x'"),
        ("::1:9092", {}, "IPv6 addresses must be in brackets"),
        ("[::1:9092", {}, "unclosed '\\['"),
        ("[::1]9092", {}, "expected ':PORT' after ']'"),
    ],
)
def test_bad_addresses_say_what_was_read(entry: str, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message) as exc:
        parse_host_port(entry, "listen", **kwargs)
    assert str(exc.value).startswith("listen")


def test_bootstrap_lists() -> None:
    assert parse_bootstrap("a:1,[::1]:2, b:3") == [("a", 1), ("::1", 2), ("b", 3)]
    for bad in ("a:1,,b:2", ":9092", "a:1,b"):
        with pytest.raises(ValueError, match="bootstrap servers"):
            parse_bootstrap(bad)
