"""What the record commands share: kcat's delimiters, `-X` properties and `-f` format strings, the JSON
envelope, start offsets and input splitting.

Kept apart from `records.py` so other verbs (a group's records, a topic's tail) print records the same way;
everything here is bytes in, bytes out: a value is never decoded unless a format asks for text.
"""

from __future__ import annotations

import base64
import json
import re
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from logbroker.cli.common import BadInput

if TYPE_CHECKING:
    from confluent_kafka import Message

__all__ = [
    "Offsets",
    "json_record",
    "parse_offsets",
    "parse_properties",
    "record_formatter",
    "split_input",
    "unescape",
]

# librdkafka's logical offsets (confluent_kafka.OFFSET_*) and its tail base (RD_KAFKA_OFFSET_TAIL_BASE).
OFFSET_BEGINNING, OFFSET_END, OFFSET_STORED, OFFSET_TAIL_BASE = -2, -1, -1000, -2000


# ------------------------------------------------------------------------------------ client settings


def parse_properties(items: Iterable[str], hint: str = "-X") -> dict[str, str]:
    """``-X name=value`` librdkafka properties (kcat's flag); librdkafka itself names an unknown one."""
    props = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise BadInput(f"{hint} {item!r}: expected NAME=VALUE")
        props[name.strip()] = value
    return props


# ------------------------------------------------------------------------------------ kcat's notation

_ESCAPE = re.compile(rb"\\(x[0-9a-fA-F]{1,2}|[nrt0\\])")
_SIMPLE = {b"n": b"\n", b"r": b"\r", b"t": b"\t", b"0": b"\0", b"\\": b"\\"}


def unescape(text: str) -> bytes:
    r"""kcat's delimiter and format escapes (``\n \r \t \0 \\ \xNN``) -> bytes; other text is UTF-8."""
    raw = text.encode("utf-8", "surrogateescape")

    def one(m: re.Match[bytes]) -> bytes:
        s = m[1]
        return bytes([int(s[1:], 16)]) if s[:1] == b"x" else _SIMPLE[s]

    return _ESCAPE.sub(one, raw)


def split_input(stream: IO[bytes], delimiter: bytes, chunk: int = 1 << 20) -> Iterator[tuple[list[bytes], int]]:
    """Records of a binary stream separated by ``delimiter``: lists of records with the bytes read for them.

    Reads what is available (``read1``: an interactive stdin sends each line as it is typed) and keeps a
    partial record for the next read; a last record without a trailing delimiter counts, an empty tail
    does not."""
    read = getattr(stream, "read1", stream.read)
    rest = b""
    while True:
        data = read(chunk)
        if not data:
            break
        parts = (rest + data).split(delimiter) if rest else data.split(delimiter)
        rest = parts.pop()
        if parts:
            yield parts, len(data)
        elif len(rest) > 64 << 20:
            raise BadInput(f"a record longer than 64 MiB without a delimiter ({delimiter!r}): wrong -D?")
    if rest:
        yield [rest], 0


# ------------------------------------------------------------------------------------ start offsets


@dataclass(frozen=True)
class Offsets:
    """Where reading starts (a librdkafka offset, a logical one, or a timestamp) and an optional stop time."""

    start: int | None = None  # None: the group's committed offset (or --group's reset policy)
    start_ms: int | None = None
    stop_ms: int | None = None
    label: str = "end"

    def librdkafka(self) -> int:
        return OFFSET_STORED if self.start is None else self.start


def parse_offsets(values: Iterable[str]) -> Offsets:
    """kcat's ``-o``: beginning | end | stored | N | -N (N before the end) | s@MS or @MS (first record at or
    after that time) | e@MS (stop before that time; combine with a start form)."""
    start: int | None = OFFSET_END
    start_ms = stop_ms = None
    label = "end"
    seen_start = False
    for raw in values:
        v = raw.strip().lower()
        if v.startswith("e@"):
            if stop_ms is not None:
                raise BadInput(f"-o {raw!r}: one e@ stop time only")
            stop_ms = _ms(raw, v[2:])
            continue
        if seen_start:
            raise BadInput(f"-o {raw!r}: one start offset only (beginning, end, stored, N, -N, s@MS)")
        seen_start = True
        label = v
        if v == "beginning":
            start = OFFSET_BEGINNING
        elif v == "end":
            start = OFFSET_END
        elif v == "stored":
            start = None
        elif v.startswith(("s@", "@")):
            start, start_ms = None, _ms(raw, v.split("@", 1)[1])
        elif re.fullmatch(r"-?\d+", v):
            n = int(v)
            start = OFFSET_TAIL_BASE + n if n < 0 else n  # -N: librdkafka's OFFSET_TAIL(N)
        else:
            raise BadInput(f"-o {raw!r}: expected beginning, end, stored, an offset N, -N, s@MS, @MS or e@MS")
    return Offsets(start, start_ms, stop_ms, label)


def _ms(raw: str, digits: str) -> int:
    if not digits.isdigit():
        raise BadInput(f"-o {raw!r}: a timestamp is milliseconds since the epoch")
    return int(digits)


# ------------------------------------------------------------------------------------ record output


def _text(field: str, data: bytes | None, out: dict[str, Any]) -> None:
    if data is None:
        out[field] = None
        return
    try:
        out[field] = data.decode("utf-8")
    except UnicodeDecodeError:
        out[field] = base64.b64encode(data).decode("ascii")
        out[f"{field}_encoding"] = "base64"


def json_record(msg: Message) -> dict[str, Any]:
    """The JSON envelope of one record: key/value as UTF-8 text, or base64 with ``key_encoding`` /
    ``value_encoding: "base64"`` when they are not UTF-8; headers as ``[name, value]`` pairs in order
    (names may repeat), a third element ``"base64"`` on a value that is not UTF-8."""
    ts_type, ts = msg.timestamp()
    out: dict[str, Any] = {
        "topic": msg.topic(),
        "partition": msg.partition(),
        "offset": msg.offset(),
        "timestamp": ts if ts_type else None,
        "timestamp_type": _TS_TYPES.get(ts_type),
    }
    _text("key", msg.key(), out)
    _text("value", msg.value(), out)
    headers = []
    for name, value in msg.headers() or ():
        if value is None:
            headers.append([name, None])
            continue
        try:
            headers.append([name, value.decode("utf-8")])
        except UnicodeDecodeError:
            headers.append([name, base64.b64encode(value).decode("ascii"), "base64"])
    out["headers"] = headers
    return out


_TS_TYPES = {1: "CreateTime", 2: "LogAppendTime"}
_TOKEN = re.compile(r"%(.)|\\x[0-9a-fA-F]{1,2}|\\[nrt0\\]|[^%\\]+|\\|%", re.S)
NAMED_FORMATS = ("value", "kv", "json")

Formatter = Callable[["Message"], bytes]


def record_formatter(
    fmt: str | None, delimiter: bytes = b"\n", key_delimiter: bytes | None = None, null: bytes = b""
) -> Formatter:
    """One record -> the bytes to print.

    ``fmt``: None or "value" (the value then ``delimiter``; with ``key_delimiter``, key first, as kcat -K),
    "kv" (key TAB value), "json" (`json_record` per line), or a kcat ``-f`` string: %s value, %S its
    length (-1 for null), %R that length as a big-endian int32, %k key, %K its length, %t topic,
    %p partition, %o offset, %T timestamp (ms, -1 if none), %h headers as name=value,..., %% a percent
    sign; escapes \\n \\r \\t \\0 \\\\ \\xNN. ``null`` is printed for a null key or value (kcat -Z: NULL)."""
    if fmt is None or fmt == "value":
        if key_delimiter is None:
            return lambda m: (m.value() or null) + delimiter
        return lambda m: (m.key() or null) + key_delimiter + (m.value() or null) + delimiter
    if fmt == "kv":
        return lambda m: (m.key() or null) + b"\t" + (m.value() or null) + b"\n"
    if fmt == "json":
        dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
        return lambda m: dumps(json_record(m)).encode("utf-8", "surrogatepass") + delimiter
    return _compile(fmt, null)


def _compile(fmt: str, null: bytes) -> Formatter:
    def length(b: bytes | None) -> bytes:
        return b"-1" if b is None else str(len(b)).encode()

    def headers(m: Message) -> bytes:
        return b",".join(n.encode() + b"=" + (v if v is not None else null) for n, v in m.headers() or ())

    fields: dict[str, Formatter] = {
        "s": lambda m: m.value() if m.value() is not None else null,
        "S": lambda m: length(m.value()),
        "R": lambda m: struct.pack(">i", -1 if m.value() is None else len(m.value())),
        "k": lambda m: m.key() if m.key() is not None else null,
        "K": lambda m: length(m.key()),
        "t": lambda m: m.topic().encode(),
        "p": lambda m: str(m.partition()).encode(),
        "o": lambda m: str(m.offset()).encode(),
        "T": lambda m: str(m.timestamp()[1] if m.timestamp()[0] else -1).encode(),
        "h": headers,
    }
    parts: list[bytes | Formatter] = []
    pos = 0
    while pos < len(fmt):
        m = _TOKEN.match(fmt, pos)
        assert m is not None  # the pattern matches any character
        pos = m.end()
        if m[1] is not None:
            if m[1] == "%":
                parts.append(b"%")
            elif m[1] in fields:
                parts.append(fields[m[1]])
            else:
                raise BadInput(f"-f {fmt!r}: unknown token %{m[1]} (known: %s %S %R %k %K %t %p %o %T %h %%)")
        elif m[0] == "%":
            raise BadInput(f"-f {fmt!r}: a lone % at the end (write %% for a percent sign)")
        else:
            parts.append(unescape(m[0]) if m[0].startswith("\\") else m[0].encode("utf-8", "surrogateescape"))
    merged: list[bytes | Formatter] = []
    for p in parts:  # adjacent literals as one
        if isinstance(p, bytes) and merged and isinstance(merged[-1], bytes):
            merged[-1] += p
        else:
            merged.append(p)
    if all(isinstance(p, bytes) for p in merged):
        constant = b"".join(merged)  # type: ignore[arg-type]
        return lambda m: constant
    fixed = tuple(merged)
    return lambda m: b"".join(p if isinstance(p, bytes) else p(m) for p in fixed)
