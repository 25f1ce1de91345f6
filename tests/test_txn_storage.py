"""Transactions in a partition log on real files: markers, the last stable offset, the aborted index,
read_committed reads, and all of it after a clean restart and after a crash (the active segment recovered,
the newest index entries lost)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from logbroker.protocol.errors import ErrorCode
from logbroker.protocol.records import (
    TRANSACTIONAL_FLAG,
    NewRecord,
    build_batch,
    decode_records,
    iter_headers,
    validate_produce,
)
from logbroker.storage import LogConfig, PartitionLog
from logbroker.storage.producers import SequenceError
from logbroker.storage.txnindex import AbortedTxn

_seq: dict[int, int] = {}


def produce(plog: PartitionLog, pid: int, values: list[bytes], txn: bool = True, epoch: int = 0) -> tuple[int, int]:
    seq = _seq.get(pid, 0)
    buf = bytearray(
        build_batch(
            [NewRecord(None, v) for v in values],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            flags=TRANSACTIONAL_FLAG if txn else 0,
        )
    )
    headers = validate_produce(buf, 1 << 20)
    plog.check_duplicates(headers)
    _seq[pid] = seq + len(values)
    return plog.append(buf, headers)


def values(data: bytes) -> list[bytes]:
    return [r.value for r in decode_records(data)]


def control_offsets(data: bytes) -> list[int]:
    return [h.base_offset for h in iter_headers(data) if h.is_control]


@pytest.fixture(autouse=True)
def _fresh_sequences() -> None:
    _seq.clear()


def test_lso_stops_at_the_oldest_open_transaction_and_moves_with_markers(tmp_path: Path) -> None:
    plog = PartitionLog(tmp_path / "p", LogConfig(), True)
    produce(plog, 1, [b"plain"], txn=False)
    assert plog.last_stable_offset == 1
    produce(plog, 2, [b"a1", b"a2"])  # 1-2, open
    produce(plog, 3, [b"b1"])  # 3, open
    assert plog.last_stable_offset == 1 and plog.next_offset == 4
    offset, done = plog.append_marker(3, 0, commit=True)
    assert offset == 4 and done is not None and not done.aborted and done.first_offset == 3
    assert plog.last_stable_offset == 1  # producer 2's transaction still holds it
    offset, done = plog.append_marker(2, 0, commit=False)
    assert offset == 5 and done is not None and done.aborted
    assert plog.last_stable_offset == 6
    assert plog.aborted_transactions(0, 6) == [AbortedTxn(2, 1, 5, 6)]


def test_read_committed_reads_stop_before_the_lso(tmp_path: Path) -> None:
    plog = PartitionLog(tmp_path / "p", LogConfig(), True)
    produce(plog, 1, [b"c1"])
    plog.append_marker(1, 0, commit=True)
    produce(plog, 2, [b"open"])
    produce(plog, 1, [b"c2"])
    lso = plog.last_stable_offset
    assert lso == 2
    assert values(plog.read(0, 1 << 20, max_offset=lso)) == [b"c1"]
    assert control_offsets(plog.read(0, 1 << 20, max_offset=lso)) == [1]
    assert plog.read(2, 1 << 20, max_offset=lso) == b""
    assert values(plog.read(0, 1 << 20)) == [b"c1", b"open", b"c2"]  # read_uncommitted: everything


def test_aborted_transactions_overlapping_a_range_only(tmp_path: Path) -> None:
    plog = PartitionLog(tmp_path / "p", LogConfig(segment_bytes=300), True)
    expected = []
    for i in range(6):
        first, _ = produce(plog, 10 + i, [b"x" * 40])
        marker, _ = plog.append_marker(10 + i, 0, commit=i % 2 == 1)
        if i % 2 == 0:
            expected.append(AbortedTxn(10 + i, first, marker, marker + 1))
    assert len(plog.segments) > 2  # the entries are spread over several segments' indexes
    assert plog.aborted_transactions(0, plog.next_offset) == expected
    assert plog.aborted_transactions(expected[1].first_offset, expected[1].last_offset) == [expected[1]]
    assert plog.aborted_transactions(expected[0].last_offset + 1, expected[1].first_offset) == []


def test_a_plain_batch_from_a_producer_with_an_open_transaction_is_refused(tmp_path: Path) -> None:
    plog = PartitionLog(tmp_path / "p", LogConfig(), True)
    produce(plog, 7, [b"in txn"])
    with pytest.raises(SequenceError) as err:
        produce(plog, 7, [b"plain"], txn=False)
    assert err.value.error == ErrorCode.INVALID_TXN_STATE


def test_a_marker_from_an_older_epoch_is_refused_and_a_fencing_abort_bumps_the_epoch(tmp_path: Path) -> None:
    plog = PartitionLog(tmp_path / "p", LogConfig(), True)
    produce(plog, 7, [b"v"], epoch=3)
    with pytest.raises(SequenceError) as err:
        plog.append_marker(7, 2, commit=True)
    assert err.value.error == ErrorCode.INVALID_PRODUCER_EPOCH
    plog.append_marker(7, 4, commit=False)  # the coordinator's abort under a bumped epoch
    with pytest.raises(SequenceError) as err:
        produce(plog, 7, [b"zombie"], epoch=3)
    assert err.value.error == ErrorCode.INVALID_PRODUCER_EPOCH


def test_open_transactions_never_expire_with_their_producer(tmp_path: Path) -> None:
    plog = PartitionLog(tmp_path / "p", LogConfig(), True)
    produce(plog, 1, [b"open"])
    produce(plog, 2, [b"plain"], txn=False)
    assert plog.producers.remove_expired(now_ms=1 << 50, expiration_ms=1) == 1
    assert plog.last_stable_offset == 0 and 1 in plog.producers.producers


def _history(plog: PartitionLog) -> tuple[int, list[AbortedTxn]]:
    produce(plog, 1, [b"a"])
    plog.append_marker(1, 0, commit=False)
    produce(plog, 2, [b"b"])
    plog.append_marker(2, 0, commit=True)
    produce(plog, 3, [b"c"])  # left open
    produce(plog, 4, [b"d"])
    plog.append_marker(4, 0, commit=False)
    return plog.last_stable_offset, plog.aborted_transactions(0, plog.next_offset)


def test_lso_and_aborted_index_survive_a_clean_restart(tmp_path: Path) -> None:
    cfg = LogConfig()
    plog = PartitionLog(tmp_path / "p", cfg, True)
    lso, aborted = _history(plog)
    plog.close()
    again = PartitionLog(tmp_path / "p", cfg, True)
    assert again.last_stable_offset == lso == 4
    assert again.aborted_transactions(0, again.next_offset) == aborted
    again.append_marker(3, 0, commit=True)
    assert again.last_stable_offset == again.next_offset


@pytest.mark.parametrize("lose_index", [False, True])
def test_lso_and_aborted_index_are_rebuilt_after_a_crash(tmp_path: Path, lose_index: bool) -> None:
    """No clean close: the producer snapshot is from before the transactions (the last roll), so the replay
    of the active segment rebuilds the open transaction and the aborts, even with the index file gone."""
    cfg = LogConfig(segment_bytes=1 << 20)
    plog = PartitionLog(tmp_path / "p", cfg, True)
    produce(plog, 9, [b"before"], txn=False)
    plog.roll()  # writes a snapshot
    lso, aborted = _history(plog)
    plog.sync()
    crashed = tmp_path / "crashed"
    shutil.copytree(tmp_path / "p", crashed)  # the files as kill -9 leaves them (no close)
    if lose_index:
        for p in crashed.glob("*.txnindex"):
            p.unlink()
    again = PartitionLog(crashed, cfg, False)
    assert again.last_stable_offset == lso
    assert again.aborted_transactions(0, again.next_offset) == aborted
    assert len(aborted) == 2


def test_a_torn_or_disordered_aborted_index_is_cut_and_rebuilt(tmp_path: Path) -> None:
    """A crash mid-write leaves part of an entry; damage can leave entries out of order. The index keeps
    what is whole and ordered, and the replay after the snapshot restores the rest."""
    cfg = LogConfig()
    plog = PartitionLog(tmp_path / "p", cfg, True)
    produce(plog, 9, [b"before"], txn=False)
    plog.roll()
    _lso, aborted = _history(plog)
    plog.sync()
    for damage in (b"\x00\x01\x02", bytes(34)):  # a torn entry; an entry whose last offset goes back to 0
        crashed = tmp_path / f"crashed-{len(damage)}"
        shutil.copytree(tmp_path / "p", crashed)
        [index] = crashed.glob("*.txnindex")
        index.write_bytes(index.read_bytes() + damage)
        again = PartitionLog(crashed, cfg, False)
        assert again.aborted_transactions(0, again.next_offset) == aborted
        assert index.stat().st_size == 34 * len(aborted)  # the damage is gone from disk too
