"""Request decoders generated from the message schemas, reading exactly as Kafka's generated readers do.

kafka-python's compiled decoders are written for trusted input (a broker's answers), and on a hostile request
they go wrong in ways a server cannot accept:
- an unsigned varint has no length limit, and each further byte shifts a growing int: a run of 0xff bytes
  costs quadratic time (400 KB of them held the event loop for 6 s);
- each non-empty tagged-field section copies the rest of the frame (`bytes(data[pos:])`), so an array of
  elements with tags costs quadratic time too (seconds per MB, hours per 100 MB);
- a string that is not UTF-8 raises (Kafka decodes it with replacement characters and answers), a negative
  array length other than -1 is an empty array (Kafka: null, or an error where null is not allowed), a
  compact string over 32767 bytes is accepted (Kafka refuses it), and a null element of a string array
  passes unnoticed.

So request bodies are decoded by functions generated here, once per (API, version), from the same schemas and
into the same message objects; every read is bounded by the frame, and the rules are those of Kafka's
MessageDataGenerator (`read(Readable, short)`): varints of at most 5 bytes wrapping to int32, a length below
0 is null (an error where the field is not nullable), strings at most 0x7fff bytes, an array may not claim
more elements than bytes remain, an unknown tag's bytes are kept, a tag known only in other versions is an
error. Responses are still decoded by the codec: they come from brokers we chose to talk to.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

from .errors import ProtocolError
from .primitives import MAX_STRING_BYTES

__all__ = ["MalformedRequest", "NullField", "Overrun", "compile_request_decoder", "read_uvarint32"]


class MalformedRequest(ProtocolError):
    """The request breaks one of Kafka's reader rules (Kafka closes the connection for these too)."""


class Overrun(MalformedRequest):
    """A length or count runs past the end of the request."""


class NullField(MalformedRequest):
    """A null where the schema allows none; `path` names the field (`topics[0].name`)."""

    def __init__(self, path: str) -> None:
        super().__init__(f"non-nullable field {path} is null")
        self.path = path

    def within(self, outer: str, index: int | None = None) -> NullField:
        return NullField(f"{outer}{'' if index is None else f'[{index}]'}.{self.path}")


def read_uvarint32(data: Any, pos: int) -> tuple[int, int]:
    """Kafka's `readUnsignedVarint`: at most 5 bytes, the value wrapped to a signed int32."""
    value = 0
    for shift in (0, 7, 14, 21, 28):
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            value &= 0xFFFFFFFF
            return (value - (1 << 32) if value >= 1 << 31 else value), pos
    raise MalformedRequest("varint is longer than 5 bytes")


def _compact_length(data: Any, pos: int) -> tuple[int, int]:
    """A compact length: the varint minus one, in int32 arithmetic (so 0 is null, -1)."""
    b = data[pos]
    if b < 0x80:
        return b - 1, pos + 1
    value, pos = read_uvarint32(data, pos)
    value -= 1
    return (value + (1 << 32) if value < -(1 << 31) else value), pos


def _text(data: Any, pos: int, n: int, end: int, name: str) -> str:
    if n > MAX_STRING_BYTES:
        raise MalformedRequest(f"string field {name} had invalid length {n}")
    if pos + n > end:
        raise Overrun(f"string field {name} of {n} bytes")
    return str(data[pos : pos + n], "utf-8", "replace")  # Kafka: new String(bytes, UTF_8)


def _blob(data: Any, pos: int, n: int, end: int, name: str) -> bytes:
    if pos + n > end:
        raise Overrun(f"bytes field {name} of {n} bytes")
    return bytes(data[pos : pos + n])


def _null(name: str, index: int | None = None) -> NullField:
    return NullField(name if index is None else f"{name}[{index}]")


def _too_many(name: str, n: int, left: int) -> Overrun:
    return Overrun(f"{name}: a collection of {n} elements, but only {left} bytes remain")


def _uuid(raw: bytes) -> uuid.UUID | None:
    value = uuid.UUID(bytes=raw)
    return None if value.int == 0 else value  # the codec's convention: the zero UUID reads as None


_FIXED = {"int8": "b", "int16": "h", "uint16": "H", "int32": "i", "int64": "q", "float64": "d", "bool": "b"}
_SIZES = {"b": 1, "h": 2, "H": 2, "i": 4, "q": 8, "d": 8}


class _Gen:
    """Emits one module of decoder functions: one per struct type reached from the request."""

    def __init__(self, version: int, flexible: bool) -> None:
        self.version = version
        self.flex = flexible
        self.lines: list[str] = []
        self.globs: dict[str, Any] = {
            "unpack_from": struct.unpack_from,
            "_uvarint": read_uvarint32,
            "_clen": _compact_length,
            "_text": _text,
            "_blob": _blob,
            "_null": _null,
            "_too_many": _too_many,
            "_uuid": _uuid,
            "_Malformed": MalformedRequest,
            "_Overrun": Overrun,
            "_NullField": NullField,
            "_new": object.__new__,
        }
        self._names: dict[int, str] = {}
        self._n = 0

    def var(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}{self._n}"

    def struct_fn(self, st: Any, data_class: Any) -> str:
        """The name of the function decoding struct `st` (generated on first use)."""
        key = id(st)
        if key in self._names:
            return self._names[key]
        name = self.var("_d")
        self._names[key] = name
        cls = self.var("_cls")
        self.globs[cls] = data_class
        body: list[str] = []
        emit = body.append
        emit(f"def {name}(data, pos, end):")
        emit(f"    obj = _new({cls})")
        emit(f"    obj._version = {self.version}")
        emit("    obj.tags = None")
        emit("    obj.unknown_tags = None")
        v = self.version
        fields = [f for f in st._fields if f.for_version_q(v) and not f.tagged_field_q(v)]
        i = 0
        while i < len(fields):
            f = fields[i]
            if f.type_str in _FIXED and not f.is_array():
                run = []
                while i < len(fields) and fields[i].type_str in _FIXED and not fields[i].is_array():
                    run.append(fields[i])
                    i += 1
                fmt = "".join(_FIXED[x.type_str] for x in run)
                names = ", ".join(f"obj.{x.name}" for x in run)
                emit(f"    {names}{',' if len(run) == 1 else ''} = unpack_from('>{fmt}', data, pos)")
                emit(f"    pos += {sum(_SIZES[c] for c in fmt)}")
                for x in run:
                    if x.type_str == "bool":
                        emit(f"    obj.{x.name} = obj.{x.name} != 0")
                continue
            self.field(emit, f, f"obj.{f.name}", "    ", f.nullable_for_version_q(v), self.flex)
            i += 1
        if self.flex:
            self.tagged(emit, st)
        emit("    return obj, pos")
        self.lines.extend(body)
        return name

    def field(self, emit: Any, f: Any, target: str, ind: str, nullable: bool, compact: bool) -> None:
        t = f.type_str
        label = f.name
        if f.is_struct_array() or f.is_array():
            n = self.var("n")
            self.length(emit, n, ind, compact, "i")
            emit(f"{ind}if {n} < 0:")
            emit(f"{ind}    {target} = None" if nullable else f"{ind}    raise _null({label!r})")
            emit(f"{ind}else:")
            emit(f"{ind}    if {n} > end - pos:")
            emit(f"{ind}        raise _too_many({label!r}, {n}, end - pos)")
            items = self.var("items")
            emit(f"{ind}    {items} = []")
            if f.is_struct_array():
                fn = self.struct_fn(f.array_of, f.array_of.data_class)
                item = self.var("item")
                emit(f"{ind}    for i in range({n}):")
                emit(f"{ind}        try:")
                emit(f"{ind}            {item}, pos = {fn}(data, pos, end)")
                emit(f"{ind}        except _NullField as exc:")
                emit(f"{ind}            raise exc.within({label!r}, i) from None")
                emit(f"{ind}        {items}.append({item})")
            else:
                inner = f.array_of
                if inner.type_str in _FIXED:
                    c = _FIXED[inner.type_str]
                    emit(f"{ind}    {items} = list(unpack_from('>%d{c}' % {n}, data, pos))")
                    emit(f"{ind}    pos += {_SIZES[c]} * {n}")
                    if inner.type_str == "bool":
                        emit(f"{ind}    {items} = [x != 0 for x in {items}]")
                else:
                    item = self.var("item")
                    emit(f"{ind}    for i in range({n}):")
                    # Elements of string/bytes arrays are never nullable in Kafka's readers.
                    self.scalar(emit, inner, item, ind + "        ", False, compact, label, element=True)
                    emit(f"{ind}        {items}.append({item})")
            emit(f"{ind}    {target} = {items}")
        elif f.is_struct():
            fn = self.struct_fn(f, f.data_class)
            emit(f"{ind}try:")
            if nullable:
                emit(f"{ind}    if unpack_from('>b', data, pos)[0] < 0:")
                emit(f"{ind}        pos += 1")
                emit(f"{ind}        {target} = None")
                emit(f"{ind}    else:")
                emit(f"{ind}        {target}, pos = {fn}(data, pos + 1, end)")
            else:
                emit(f"{ind}    {target}, pos = {fn}(data, pos, end)")
            emit(f"{ind}except _NullField as exc:")
            emit(f"{ind}    raise exc.within({label!r}) from None")
        elif t in _FIXED:
            c = _FIXED[t]
            emit(f"{ind}{target} = unpack_from('>{c}', data, pos)[0]{' != 0' if t == 'bool' else ''}")
            emit(f"{ind}pos += {_SIZES[c]}")
        else:
            self.scalar(emit, f, target, ind, nullable, compact, label)

    def scalar(
        self, emit: Any, f: Any, target: str, ind: str, nullable: bool, compact: bool, label: str, element: bool = False
    ) -> None:
        t = f.type_str
        if t == "uuid":
            emit(f"{ind}if pos + 16 > end:")
            emit(f"{ind}    raise _Overrun('uuid field {label}')")
            emit(f"{ind}{target} = _uuid(bytes(data[pos:pos + 16]))")
            emit(f"{ind}pos += 16")
            return
        if t not in ("string", "bytes", "records"):
            raise TypeError(f"no reader for field type {t!r} ({label})")
        n = self.var("n")
        self.length(emit, n, ind, compact, "h" if t == "string" else "i")
        emit(f"{ind}if {n} < 0:")
        if nullable:
            emit(f"{ind}    {target} = None")
        else:
            emit(f"{ind}    raise _null({label!r}{', i' if element else ''})")
        emit(f"{ind}else:")
        fn = "_text" if t == "string" else "_blob"
        emit(f"{ind}    {target} = {fn}(data, pos, {n}, end, {label!r})")
        emit(f"{ind}    pos += {n}")

    def length(self, emit: Any, var: str, ind: str, compact: bool, classic: str) -> None:
        if compact:
            emit(f"{ind}{var}, pos = _clen(data, pos)")
        else:
            emit(f"{ind}{var} = unpack_from('>{classic}', data, pos)[0]")
            emit(f"{ind}pos += {_SIZES[classic]}")

    def tagged(self, emit: Any, st: Any) -> None:
        v = self.version
        known = {f._tag: f for f in st._fields if f._tag is not None and f.for_version_q(v) and f.tagged_field_q(v)}
        elsewhere = {f._tag for f in st._fields if f._tag is not None} - set(known)
        emit("    if data[pos] == 0:")
        emit("        pos += 1")
        emit("    else:")
        emit("        count, pos = _uvarint(data, pos)")
        emit("        if count > end - pos:")
        emit("            raise _Overrun(f'{count} tagged fields, but only {end - pos} bytes remain')")
        emit("        for _ in range(count):")
        emit("            tag, pos = _uvarint(data, pos)")
        emit("            size, pos = _uvarint(data, pos)")
        branch = "if"
        for tag, f in sorted(known.items()):
            emit(f"            {branch} tag == {tag}:")
            branch = "elif"
            # Tagged fields are always in the flexible (compact) encoding.
            self.field(emit, f, f"obj.{f.name}", "                ", f.nullable_for_version_q(v), True)
            emit("                if obj.tags is None:")
            emit("                    obj.tags = set()")
            emit(f"                obj.tags.add({f.name!r})")
        for tag in sorted(elsewhere):
            emit(f"            {branch} tag == {tag}:")
            branch = "elif"
            emit(f"                raise _Malformed('tag {tag} is not valid for version {v}')")
        ind = "            "
        if branch == "elif":
            emit("            else:")
            ind += "    "
        emit(f"{ind}if size < 0 or size > end - pos:")
        emit(f"{ind}    raise _Overrun(f'tagged field {{tag}} of {{size}} bytes')")
        emit(f"{ind}if obj.unknown_tags is None:")
        emit(f"{ind}    obj.unknown_tags = {{}}")
        emit(f"{ind}obj.unknown_tags['_%d' % tag] = bytes(data[pos:pos + size])")
        emit(f"{ind}pos += size")


def compile_request_decoder(request_cls: Any, version: int, flexible: bool) -> Any:
    """`decode(data, pos) -> (message, end position)` for `request_cls` (a codec message class) in `version`."""
    gen = _Gen(version, flexible)
    top = gen.struct_fn(request_cls._struct, request_cls)
    gen.lines.append("def decode(data, pos):")
    gen.lines.append(f"    return {top}(data, pos, len(data))")
    source = "\n".join(gen.lines) + "\n"
    exec(compile(source, f"<request decoder {request_cls.name} v{version}>", "exec"), gen.globs)
    return gen.globs["decode"]
