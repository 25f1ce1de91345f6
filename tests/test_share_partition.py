"""The share-partition state machine (broker/share/partition.py) on its own: acquisition windows, locks,
delivery counts and what is stored. The wire behaviour is tests/test_share_groups.py's, on both brokers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logbroker.broker.share.partition import (
    ACCEPT,
    ACKNOWLEDGED,
    ACQUIRED,
    ARCHIVED,
    AVAILABLE,
    GAP,
    REJECT,
    RELEASE,
    AckRefused,
    SharePartition,
)
from logbroker.protocol import ErrorCode as E

LOCK = 30.0


def batches(*spans: tuple[int, int]) -> list[tuple[int, int, bool]]:
    return [(a, b, False) for a, b in spans]


def test_acquire_takes_whole_batches_up_to_max_records_and_the_window() -> None:
    sp = SharePartition(10)
    got = sp.acquire("m", batches((10, 14), (15, 19)), 20, max_records=3, max_locks=100, lock_s=LOCK, now=0)
    assert got == [(10, 14, 1)]  # a whole batch, more than max_records
    got = sp.acquire("n", batches((15, 19)), 20, max_records=2, max_locks=100, lock_s=LOCK, now=0, strict=True)
    assert got == [(15, 16, 1)]  # record_limit: exactly max_records
    small = SharePartition(0)
    assert small.acquire("m", batches((0, 9)), 10, 100, max_locks=4, lock_s=LOCK, now=0) == [(0, 3, 1)]
    assert small.acquirable(4) is None  # the window is full


def test_control_batches_and_compacted_gaps_are_never_delivered() -> None:
    sp = SharePartition(0)
    got = sp.acquire("m", [(0, 1, False), (2, 2, True), (5, 6, False)], 7, 100, 100, LOCK, 0)
    assert got == [(0, 1, 1), (5, 6, 1)]
    assert sp.slots[2].state == ARCHIVED and sp.slots[3].state == ARCHIVED and sp.slots[4].state == ARCHIVED
    sp.acknowledge("m", [(0, 1, [ACCEPT])], 5, 0, LOCK)
    assert sp.start == 5  # 0-4 finished: the start offset moves past them


def test_acknowledgements_release_reject_and_the_delivery_limit() -> None:
    sp = SharePartition(0)
    assert sp.acquire("m", batches((0, 1)), 2, 100, 100, LOCK, 0) == [(0, 1, 1)]
    sp.acknowledge("m", [(0, 0, [RELEASE]), (1, 1, [ACCEPT])], 3, 0, LOCK)
    for delivery in (2, 3):
        assert sp.acquire("m", batches((0, 1)), 2, 100, 100, LOCK, 0) == [(0, 0, delivery)]
        sp.acknowledge("m", [(0, 0, [RELEASE])], 3, 0, LOCK)
    # Released at the limit (3): archived, never delivered again; 0-1 are finished.
    assert sp.start == 2 and not sp.slots
    sp2 = SharePartition(0)
    sp2.acquire("m", batches((0, 2)), 3, 100, 100, LOCK, 0)
    sp2.acknowledge("m", [(0, 2, [REJECT, GAP, ACCEPT])], 5, 0, LOCK)
    assert sp2.start == 3


def test_only_the_holder_may_acknowledge_and_all_or_nothing() -> None:
    sp = SharePartition(0)
    sp.acquire("m", batches((0, 3)), 4, 100, 100, LOCK, 0)
    with pytest.raises(AckRefused) as exc:
        sp.acknowledge("other", [(0, 0, [ACCEPT])], 5, 0, LOCK)
    assert exc.value.error == E.INVALID_RECORD_STATE
    with pytest.raises(AckRefused) as exc:
        sp.acknowledge("m", [(0, 0, [ACCEPT]), (3, 9, [ACCEPT])], 5, 0, LOCK)
    assert exc.value.error == E.INVALID_REQUEST
    assert sp.slots[0].state == ACQUIRED  # nothing of the refused request was applied


def test_locks_expire_and_a_departed_members_deliveries_do_not_count() -> None:
    sp = SharePartition(0)
    sp.acquire("m", batches((0, 1)), 2, 100, 100, lock_s=5, now=0)
    assert not sp.expire(4.9, 5)
    assert sp.expire(5.0, 5) and sp.slots[0].state == AVAILABLE and sp.slots[0].count == 1
    sp.acquire("n", batches((0, 1)), 2, 100, 100, lock_s=5, now=6)
    assert sp.slots[0].count == 2
    assert sp.release_member("n", 5) and sp.slots[0].count == 1 and sp.slots[0].state == AVAILABLE


def test_the_log_start_moving_past_the_window_finishes_what_is_gone() -> None:
    sp = SharePartition(0)
    sp.acquire("m", batches((0, 4)), 5, 100, 100, LOCK, 0)
    assert sp.move_start(3) and sp.start == 3 and sorted(sp.slots) == [3, 4]
    assert not sp.move_start(2)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("ae"), st.integers(0, 9), st.sampled_from([ACCEPT, RELEASE, REJECT])),
                max_size=40))  # fmt: skip
def test_a_snapshot_restores_everything_but_the_locks(steps: list[tuple[str, int, int]]) -> None:
    """What is stored brings back every offset's state and count, acquired records as available with the
    count they had before that delivery; the start offset never moves backwards."""
    sp = SharePartition(0)
    now = 0.0
    for kind, n, ack in steps:
        now += 1
        if kind == "a":
            sp.acquire("m", batches((0, 9)), 10, n + 1, 100, LOCK, now)
        else:
            held = sorted(sp.held_by("m"))[: n + 1]
            if held:
                sp.acknowledge("m", [(o, o, [ack]) for o in held], 5, now, LOCK)
    back = SharePartition.restore(sp.snapshot())
    assert (back.start, back.end) == (sp.start, sp.end)
    for off, s in sp.slots.items():
        want = (AVAILABLE, s.count - 1) if s.state == ACQUIRED else (s.state, s.count)
        assert (back.slots[off].state, back.slots[off].count) == want
    assert all(s.state != ACKNOWLEDGED or off >= back.start for off, s in back.slots.items())
