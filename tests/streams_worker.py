"""A provider process for the streams tests: implicit handler on namespace "w" appends each event to a file.

Usage: python streams_worker.py BOOTSTRAP TOPIC GROUP OUT_FILE SESSION_TIMEOUT_MS. Lines are ``key seq token``; the
file ``OUT_FILE.owned`` holds the partitions this process owns, rewritten as they change.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from logbroker.streams import SequenceToken, StreamProvider


async def main(bootstrap: str, topic: str, group: str, out: Path, session_ms: int) -> None:
    cfg = {"bootstrap": bootstrap, "topic": topic, "consumer_group": group, "num_queues": 4,
           "init_with_last_offset": False, "cache_timespan": 0.2, "session_timeout_ms": session_ms,
           "metrics_port": 0}  # fmt: skip
    with out.open("a", buffering=1) as f:

        def factory(key: str) -> Any:
            async def handle(event: Any, token: SequenceToken) -> None:
                f.write(f"{key} {event['seq']} {token}\n")

            return handle

        async with StreamProvider(cfg) as provider:
            provider.implicit("w", factory)
            owned: set[int] | None = None
            while True:
                if provider.owned != owned:
                    owned = provider.owned
                    tmp = out.with_suffix(".tmp")
                    tmp.write_text(" ".join(str(p) for p in sorted(owned)))
                    os.replace(tmp, out.with_suffix(".owned"))
                await asyncio.sleep(0.05)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4]), int(sys.argv[5])))
