"""The streams cache's event positions against the plain model they replace: a sorted list of token tuples."""

from __future__ import annotations

import bisect

from hypothesis import given, settings
from hypothesis import strategies as st

from logbroker.streams.cache import StreamBuffer
from logbroker.streams.model import SequenceToken

P = 3
messages = st.lists(st.integers(1, 20), min_size=0, max_size=60)  # events per message, offsets ascending
probes = st.lists(st.tuples(st.integers(2, 4), st.integers(-1, 200), st.integers(-1, 21)), max_size=20)


@settings(max_examples=200, deadline=None)
@given(messages, probes, st.lists(st.integers(0, 200), max_size=3), st.data())
def test_positions_match_sorted_tokens(counts: list[int], probe: list[tuple[int, int, int]], drops: list[int],
                                       data: st.DataObject) -> None:  # fmt: skip
    buf, tokens, events = StreamBuffer(P), [], []
    offset = 0
    for n in counts:
        offset += data.draw(st.integers(1, 3))
        decoded = data.draw(st.booleans())
        evs = [f"{offset}/{i}" for i in range(n)]
        buf.add(offset, n, evs if decoded else None, None if decoded else f"raw{offset}".encode())
        tokens += [SequenceToken(P, offset, i) for i in range(n)]
        events += evs
    head = 0
    for drop in drops:  # evictions, compacting the lists once more than 256 events went
        head = max(head, bisect.bisect_right([t.offset for t in tokens], drop))
        buf.drop_upto(drop)
    live = tokens[head:]
    assert buf.base + buf.head == head
    assert len(buf) == len(live)
    assert [buf.token(i) for i in range(buf.head, buf.end)] == live
    for i in range(buf.head, buf.end):  # parallel lists stay aligned with the tokens
        tok = buf.token(i)
        assert buf.events[i] in (None, f"{tok.offset}/{tok.index}")
        assert buf.raws[i] in (None, f"raw{tok.offset}".encode())
        assert (buf.events[i] is None) != (buf.raws[i] is None)
    for p, o, x in probe:
        after = SequenceToken(p, o, x)
        want = bisect.bisect_right(live, after)
        got = buf.locate(after, None) - buf.head
        assert got == want, (after, live)
        hint = data.draw(st.integers(buf.base, buf.base + buf.end + 1))
        assert buf.locate(after, hint) - buf.head == want  # a wrong hint falls back to the search
    assert buf.locate(None, None) == buf.head
    for j in range(buf.head, buf.end):  # a cursor that just delivered event j, with its hint
        assert buf.locate(buf.token(j), buf.base + j + 1) == j + 1
