"""Per-partition append turns: arrival order per partition, no waiting across partitions, and a request
cancelled while waiting gives its turns back."""

from __future__ import annotations

import asyncio

from logbroker.broker.append_turns import AppendTurns


def test_each_partition_appends_in_arrival_order_and_others_do_not_wait() -> None:
    async def main() -> list[tuple[str, str]]:
        turns = AppendTurns()
        order: list[tuple[str, str]] = []
        gate = asyncio.Event()

        async def request(name: str, keys: list[str], hold: bool = False) -> None:
            mine = turns.reserve(keys)
            try:
                for turn in mine:
                    await turn.wait()
                    order.append((name, turn.key))
                    if hold:
                        await gate.wait()  # a large batch yielding while it holds its partition
                    turn.release()
            finally:
                for turn in mine:
                    turn.release()

        a = asyncio.create_task(request("a", ["p1", "p2"], hold=True))
        await asyncio.sleep(0)
        b = asyncio.create_task(request("b", ["p2", "p1"]))  # wants p1 too, after a
        c = asyncio.create_task(request("c", ["p3"]))  # another partition: never waits for a
        await asyncio.wait_for(c, 1)
        assert order == [("a", "p1"), ("c", "p3")]
        gate.set()
        await asyncio.wait_for(asyncio.gather(a, b), 1)
        assert turns.waiting() == 0
        return order

    order = asyncio.run(main())
    assert [o for o in order if o[1] == "p1"] == [("a", "p1"), ("b", "p1")]
    assert [o for o in order if o[1] == "p2"] == [("a", "p2"), ("b", "p2")]


def test_a_cancelled_waiter_gives_its_turns_back() -> None:
    async def main() -> None:
        turns = AppendTurns()
        first = turns.reserve(["p", "p"])  # the same partition twice: two consecutive turns
        waiting = turns.reserve(["p", "q"])
        after = turns.reserve(["p"])
        task = asyncio.create_task(waiting[0].wait())
        await asyncio.sleep(0)
        task.cancel()
        for t in waiting:
            t.release()  # what the handler's finally does
        await first[0].wait()
        first[0].release()
        await asyncio.wait_for(first[1].wait(), 1)
        first[1].release()
        first[1].release()  # twice is harmless
        await asyncio.wait_for(after[0].wait(), 1)
        after[0].release()
        assert turns.waiting() == 0

    asyncio.run(main())
