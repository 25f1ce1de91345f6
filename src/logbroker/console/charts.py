"""Line charts drawn on the server as SVG: no chart library, no script; a page refreshes them by asking for
the fragment again. Presentation attributes only (no style attributes), so a strict CSP holds."""

from __future__ import annotations

import time
from html import escape

from markupsafe import Markup

COLOURS = ("#2563eb", "#dc2626", "#059669", "#d97706")


def human(value: float, unit: str = "") -> str:
    if unit == "B":
        for suffix in ("B", "KiB", "MiB", "GiB", "TiB"):
            if abs(value) < 1024 or suffix == "TiB":
                return f"{value:,.0f} {suffix}" if suffix == "B" else f"{value:,.1f} {suffix}"
            value /= 1024
    tail = f" {unit}" if unit else ""
    if abs(value) >= 100 or value == int(value):
        return f"{value:,.0f}{tail}"
    return f"{value:.3g}{tail}"


def line_chart(title: str, lines: dict[str, list[tuple[float, float]]], unit: str = "", width: int = 460,
               height: int = 150, chart_id: str = "") -> Markup:  # fmt: skip
    """One chart of one or more series ((unix time, value) points), latest values in the legend."""
    pad_l, pad_r, pad_t, pad_b = 8, 8, 24, 18
    w, h = width - pad_l - pad_r, height - pad_t - pad_b
    points = [p for pts in lines.values() for p in pts]
    now = time.time()
    t0 = min((t for t, _ in points), default=now - 60)
    t1 = max(now, max((t for t, _ in points), default=now))
    t0 = min(t0, t1 - 60)
    top = max((v for _, v in points), default=0.0)
    top = top * 1.1 if top > 0 else 1.0
    parts = [f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
             f'width="{width}" height="{height}" role="img" aria-label="{escape(title)}"'
             f'{f" id={chr(34)}{escape(chart_id)}{chr(34)}" if chart_id else ""}>',
             f'<rect x="{pad_l}" y="{pad_t}" width="{w}" height="{h}" fill="#f8fafc" stroke="#e2e8f0"/>']  # fmt: skip
    legend = []
    for i, (name, pts) in enumerate(lines.items()):
        colour = COLOURS[i % len(COLOURS)]
        if pts:
            xy = " ".join(f"{pad_l + (t - t0) / (t1 - t0) * w:.1f},{pad_t + h - v / top * h:.1f}" for t, v in pts)
            x, y = xy.rsplit(" ", 1)[-1].split(",")
            parts.append(f'<circle cx="{x}" cy="{y}" r="2.5" fill="{colour}"/>')
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.8" points="{xy}" '
                         f'data-series="{escape(name)}" data-points="{len(pts)}" '
                         f'data-last="{pts[-1][1]:.6g}"/>')  # fmt: skip
        last = human(pts[-1][1], unit) if pts else "no data yet"
        legend.append(f'<tspan fill="{colour}">{escape(name)}: {escape(last)}</tspan>')
    parts.append(f'<text x="{pad_l}" y="14" font-size="12" font-weight="600" fill="#0f172a">{escape(title)}</text>')
    parts.append(f'<text x="{width - pad_r}" y="14" font-size="11" text-anchor="end">{"  ".join(legend)}</text>')
    parts.append(
        f'<text x="{pad_l + 2}" y="{pad_t + 11}" font-size="10" fill="#64748b">{escape(human(top, unit))}</text>'
    )
    span = t1 - t0
    parts.append(f'<text x="{pad_l}" y="{height - 4}" font-size="10" fill="#64748b">-{span / 60:.0f} min</text>')
    parts.append(f'<text x="{width - pad_r}" y="{height - 4}" font-size="10" fill="#64748b" '
                 'text-anchor="end">now</text></svg>')  # fmt: skip
    return Markup("".join(parts))
