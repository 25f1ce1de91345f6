"""The compiled record walk (protocol/_walk.c) and the Python one must agree on every input: the compiled
one accepts exactly what the Python one accepts, with the same timestamp-delta range (on any defect it
defers to the Python walk, which names Kafka's error)."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logbroker.protocol import validate
from logbroker.protocol.records import HEADER_SIZE, InvalidBatch, NewRecord, build_batch

compiled = validate.compiled_walk_plain


def test_the_compiled_walk_is_built() -> None:
    """`pip install -e .` builds it wherever a C compiler is (CI's machines have one); elsewhere the broker
    runs the Python walk and this is skipped."""
    if compiled is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("protocol/_walk.c was not built by pip install (CI has gcc and the Python headers)")
        pytest.skip("the compiled record walk is not built here")


def python(batch: bytes, count: int) -> tuple[int, int] | None:
    try:
        return validate._walk_plain_py(memoryview(batch), HEADER_SIZE, count)
    except InvalidBatch:
        return None


RECORDS = st.lists(
    st.builds(
        NewRecord,
        key=st.none() | st.binary(max_size=300),
        value=st.none() | st.binary(max_size=300),
        headers=st.lists(st.tuples(st.text(max_size=20), st.none() | st.binary(max_size=40)), max_size=3),
        timestamp=st.integers(0, 1 << 50),
    ),
    min_size=1,
    max_size=20,
)
MUTATION = st.tuples(st.sampled_from(["flip", "cut", "insert", "set"]), st.integers(0, 1 << 16), st.integers(0, 255))


def mutate(raw: bytearray, how: str, at: int, byte: int) -> bytearray:
    if len(raw) <= HEADER_SIZE:
        return raw
    i = HEADER_SIZE + at % (len(raw) - HEADER_SIZE)
    if how == "flip":
        raw[i] ^= 1 << (byte % 8)
    elif how == "cut":
        del raw[i:]
    elif how == "insert":
        raw[i:i] = bytes([byte])
    else:
        raw[i] = byte
    return raw


@settings(max_examples=400, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=RECORDS, mutations=st.lists(MUTATION, max_size=3), count_shift=st.sampled_from([0, 0, 0, -1, 1]))
def test_compiled_and_python_walks_agree(records: list[NewRecord], mutations: list, count_shift: int) -> None:
    if compiled is None:
        pytest.skip("the compiled record walk is not built here")
    raw = bytearray(build_batch(records))
    for how, at, byte in mutations:
        raw = mutate(raw, how, at, byte)
    count = len(records) + count_shift
    want = python(bytes(raw), count)
    got = compiled(memoryview(raw), HEADER_SIZE, count)
    # None from the compiled walk defers to the Python one (`validate._walk_plain`), which then names the
    # error or, for what it alone accepts (a count of 0, refused before any walk on the produce path),
    # the range; anything the compiled walk does answer must be the Python walk's answer.
    if got is not None or want is None:
        assert got == want
    if not mutations and count_shift == 0:
        assert got is not None  # a batch we built is always accepted


def test_varint_edges_agree() -> None:
    """Overlong and wrapping varints in every field, where the two walks are easiest to get apart."""
    if compiled is None:
        pytest.skip("the compiled record walk is not built here")
    base = bytearray(build_batch([NewRecord(b"k", b"v", headers=[("h", b"x")], timestamp=1)]))
    body = bytes(base[HEADER_SIZE:])
    cases = [body]
    for i in range(len(body)):
        for patch in (b"\x80", b"\xff", b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", b"\x00"):
            cases.append(body[:i] + patch + body[i + 1 :])
    for case in cases:
        raw = bytes(base[:HEADER_SIZE]) + case
        assert compiled(memoryview(raw), HEADER_SIZE, 1) == python(raw, 1), case.hex()
