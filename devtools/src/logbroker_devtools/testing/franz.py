"""franz-go's share consumer and share-group admin calls (`franzshare/main.go`, built once per source with the
Go toolchain, like the load generator): a Go user's view of share groups, for tests."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from logbroker_devtools.bench.native import ToolMissing, go_binary

__all__ = ["ToolMissing", "franz_share"]

SRC = Path(__file__).with_name("franzshare")


def franz_share(command: str, bootstrap: str, group: str, topic: str, *args: str, timeout: float = 60.0) -> Any:
    """Run `lbfranzshare COMMAND` (consume or admin, see main.go): its JSON report. Raises AssertionError with
    franz-go's own error when it fails."""
    binary = go_binary(SRC, "lbfranzshare", "the franz-go share-group client")
    proc = subprocess.run(
        [str(binary), command, "-brokers", bootstrap, "-group", group, "-topic", topic, "-timeout",
         f"{int(timeout)}s", *args],
        capture_output=True, text=True, timeout=timeout + 60, check=False,
    )  # fmt: skip
    lines = proc.stdout.strip().splitlines()
    report: Any = json.loads(lines[-1]) if lines else {"error": proc.stderr[-2000:]}
    if proc.returncode != 0 or report.get("error"):
        raise AssertionError(f"franz-go {command}: {report.get('error') or proc.stderr[-2000:]}")
    return report
