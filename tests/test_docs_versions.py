"""docs/design.md's table of advertised API versions says what the handlers declare: every served API once,
with its range, and nothing else (the table is kept by hand, so this keeps it honest)."""

from __future__ import annotations

import re
from pathlib import Path

from logbroker.broker.handlers import served_apis
from logbroker.protocol import ApiKey

DESIGN = Path(__file__).resolve().parents[1] / "docs" / "design.md"
_PAIR = re.compile(r"\b([A-Z][A-Za-z]+) (\d+)(?:-(\d+))?\b")
_RANGE = re.compile(r"^\s*(\d+)(?:-(\d+))?\b")


def documented_ranges() -> dict[str, list[tuple[int, int]]]:
    """API name -> the ranges the table gives it, from rows "| Name | a-b... |" and "| Name a-b, Name c |"."""
    text = DESIGN.read_text()
    section = text.split("## Advertised API versions and why", 1)[1].split("\n## ", 1)[0]
    found: dict[str, list[tuple[int, int]]] = {}
    for line in section.splitlines():
        if not line.startswith("| ") or line.startswith(("| API ", "|---")):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        pairs = [(n, int(lo), int(hi or lo)) for n, lo, hi in _PAIR.findall(cells[0])]
        if not pairs and (m := _RANGE.match(cells[1])):
            pairs = [(cells[0], int(m.group(1)), int(m.group(2) or m.group(1)))]
        for name, lo, hi in pairs:
            found.setdefault(name, []).append((lo, hi))
    return found


def test_the_design_table_lists_every_served_api_with_its_declared_range() -> None:
    served = {ApiKey(k).name: (s.min_version, s.max_version) for k, s in served_apis().items()}
    documented = documented_ranges()
    assert len(documented) > 10  # the parser found the table
    twice = {n: r for n, r in documented.items() if len(r) > 1}
    assert not twice, f"named more than once: {twice}"
    wrong = {n: (r[0], served.get(n)) for n, r in documented.items() if r[0] != served.get(n)}
    missing = sorted(set(served) - set(documented))
    assert not wrong and not missing, f"documented vs declared: {wrong}; not in the table: {missing}"
