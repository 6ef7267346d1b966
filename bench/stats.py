"""Summaries of repeated measurements: median, min and max, ratios, and their Markdown.

Pure functions only (no clock, no I/O), so the report's arithmetic is tested
without running a benchmark (tests/bench/test_bench_stats.py).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Summary:
    """Median, min and max of n measurements."""

    median: float
    low: float
    high: float
    count: int

    def as_dict(self) -> dict[str, float | int]:
        return {"median": self.median, "min": self.low, "max": self.high, "n": self.count}

    def format(self, unit: str = "s", digits: int = 2) -> str:
        """`1.23 s (1.10–1.40, n=5)`; one measurement shows no range; no unit, no space."""
        suffix = f" {unit}" if unit else ""
        if self.count == 1:
            return f"{self.median:.{digits}f}{suffix} (n=1)"
        low, high = f"{self.low:.{digits}f}", f"{self.high:.{digits}f}"
        return f"{self.median:.{digits}f}{suffix} ({low}–{high}, n={self.count})"


def summarise(values: Iterable[float]) -> Summary:
    """Summary of the values; at least one is needed."""
    data = [float(v) for v in values]
    if not data:
        raise ValueError("summarise: no values given; at least 1 measurement is needed")
    return Summary(statistics.median(data), min(data), max(data), len(data))


def summary_from_dict(data: Mapping[str, float | int]) -> Summary:
    return Summary(float(data["median"]), float(data["min"]), float(data["max"]), int(data["n"]))


def format_summary(
    summary: Mapping[str, float | int] | None, unit: str = "s", digits: int = 2
) -> str:
    """A summary as saved in JSON (`Summary.as_dict`), formatted; "–" when there is none."""
    return "–" if not summary else summary_from_dict(summary).format(unit, digits)


def ratio(numerator: float, denominator: float) -> float | None:
    """numerator / denominator, or None when the denominator is 0."""
    return None if denominator == 0 else numerator / denominator


def format_ratio(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}×"


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares (slope, intercept) of ys against xs; needs two distinct xs."""
    if len(xs) != len(ys) or len(set(xs)) < 2:
        raise ValueError(
            f"fit_line: {len(xs)} x and {len(ys)} y values given; "
            "equal counts and at least 2 distinct x values are needed"
        )
    mean_x = sum(xs) / len(xs)
    mean_y = sum(ys) / len(ys)
    sxx = sum((x - mean_x) ** 2 for x in xs)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
    slope = sxy / sxx
    return slope, mean_y - slope * mean_x


def verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A GitHub Markdown table; cells are str()-ed and `|` escaped."""

    def cell(value: object) -> str:
        return str(value).replace("|", "\\|")

    lines = [
        "| " + " | ".join(cell(h) for h in header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
    ]
    for row in rows:
        if len(row) != len(header):
            raise ValueError(
                f"markdown_table: row {list(row)!r} has {len(row)} cells; the header has "
                f"{len(header)}"
            )
        lines.append("| " + " | ".join(cell(c) for c in row) + " |")
    return "\n".join(lines)
