"""Bar charts as SVG geometry: Python computes every rectangle and label, the
`charts.html` macros write them out (escaped), CSS colours them. No script, nothing
fetched."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta

__all__ = ["Chart", "Series", "column_chart", "day_range", "money", "row_chart", "tokens"]


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    values: Sequence[float]


@dataclass(slots=True)
class Rect:
    x: float
    y: float
    w: float
    h: float
    series: int
    title: str


@dataclass(slots=True)
class Label:
    x: float
    y: float
    text: str
    anchor: str = "middle"
    title: str = ""


@dataclass(slots=True)
class Chart:
    title: str
    width: int
    height: int
    rects: list[Rect] = field(default_factory=list)
    labels: list[Label] = field(default_factory=list)
    grid: list[tuple[float, float, float, float]] = field(default_factory=list)
    legend: list[str] = field(default_factory=list)
    empty: bool = False


def money(value: float) -> str:
    if value == 0:
        return "$0"
    return f"${value:,.2f}" if abs(value) >= 0.01 else f"${value:.4f}"


def tokens(value: float) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.1f}{unit}"
    return f"{int(value)}"


def _nice(top: float) -> tuple[float, int]:
    """A round maximum for an axis and its number of steps."""
    if top <= 0:
        return 1.0, 1
    exponent = math.floor(math.log10(top))
    for step in (1, 2, 2.5, 5, 10):
        unit = step * 10**exponent / 4
        if unit * 4 >= top:
            return unit * 4, 4
    return 10 ** (exponent + 1), 4  # pragma: no cover


def day_range(days: Sequence[str], first: str | None = None, last: str | None = None) -> list[str]:
    """Every day of a range (YYYY-MM-DD): from `first` (else the first of `days`) to
    `last` (else the last of `days`), each once, whether it has replies or not; days
    that are not dates are left out."""
    parsed = []
    for day in (*days, *(d for d in (first, last) if d is not None)):
        try:
            parsed.append(date.fromisoformat(day))
        except ValueError:
            continue
    if not parsed:
        return []
    start = date.fromisoformat(first) if first is not None else min(parsed)
    end = date.fromisoformat(last) if last is not None else max(parsed)
    return [(start + timedelta(days=n)).isoformat() for n in range((end - start).days + 1)]


def column_chart(
    title: str,
    keys: Sequence[str],
    series: Sequence[Series],
    fmt: Callable[[float], str],
    *,
    width: int = 760,
    height: int = 220,
) -> Chart:
    """Stacked columns, one per key (left to right), with a value axis."""
    chart = Chart(title, width, height, legend=[s.name for s in series] if len(series) > 1 else [])
    totals = [sum(s.values[i] for s in series) for i in range(len(keys))]
    if not keys or max(totals, default=0) <= 0:
        chart.empty = True
        return chart
    left, right, top, bottom = 64, 8, 10, 34
    plot_w, plot_h = width - left - right, height - top - bottom
    peak, steps = _nice(max(totals))
    for n in range(steps + 1):
        y = top + plot_h - plot_h * n / steps
        chart.grid.append((left, y, width - right, y))
        chart.labels.append(Label(left - 6, y + 4, fmt(peak * n / steps), "end"))
    slot = plot_w / len(keys)
    bar = min(48.0, max(1.0, slot * 0.8))
    every = max(1, math.ceil(len(keys) / 8))
    for i, key in enumerate(keys):
        x = left + slot * i + (slot - bar) / 2
        base = float(top + plot_h)
        for k, s in enumerate(series):
            value = s.values[i]
            if value <= 0:
                continue
            h = plot_h * value / peak
            base -= h
            chart.rects.append(Rect(x, base, bar, h, k, f"{key} · {s.name}: {fmt(value)}"))
        if i % every == 0:
            chart.labels.append(Label(x + bar / 2, height - bottom + 16, key))
    return chart


def row_chart(
    title: str,
    keys: Sequence[str],
    series: Sequence[Series],
    fmt: Callable[[float], str],
    *,
    width: int = 760,
    row: int = 22,
    shorten: Callable[[str], str] | None = None,
) -> Chart:
    """Stacked horizontal bars, one row per key (top to bottom), values at their end."""
    totals = [sum(s.values[i] for s in series) for i in range(len(keys))]
    height = max(40, row * len(keys) + 12)
    chart = Chart(title, width, height, legend=[s.name for s in series] if len(series) > 1 else [])
    if not keys or max(totals, default=0) <= 0:
        chart.empty = True
        return chart
    left, right = 230, 90
    plot_w = width - left - right
    peak = max(totals)
    for i, key in enumerate(keys):
        y = 6 + row * i
        x = float(left)
        for k, s in enumerate(series):
            value = s.values[i]
            if value <= 0:
                continue
            w = plot_w * value / peak
            chart.rects.append(Rect(x, y, w, row - 6, k, f"{key} · {s.name}: {fmt(value)}"))
            x += w
        name = shorten(key) if shorten is not None else key
        chart.labels.append(Label(left - 8, y + row / 2 + 1, name, "end", key))
        chart.labels.append(Label(x + 6, y + row / 2 + 1, fmt(totals[i]), "start"))
    return chart
