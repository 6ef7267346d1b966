"""Training curves from a replica's log: the `TFJOB_METRIC {json}` lines a program prints.

Why this exists: a person watching a training wants to see the loss going
down while it runs, and the pod's log is the one channel every program
already has (no file to write, no grant, nothing to install). The contract
(docs/pod-protocol.md, "Metrics while training"): a line holding
`TFJOB_METRIC ` followed by a JSON object of numbers, e.g.
`TFJOB_METRIC {"step": 120, "loss": 0.31, "accuracy": 0.9}`, on stdout or
stderr, anywhere in the line (so `[chief-0] `, timestamps and other prefixes
do not matter). The bootstrap's own final `TFJOB_METRICS {…}` line (with an
S) is the run's metrics, not a point of a curve.

Everything here is pure and bounded, because logs are untrusted input: a line
over MAX_LINE_CHARS is not parsed, a point keeps at most MAX_NAMES names of
at most MAX_NAME_CHARS characters with finite numbers only (booleans are not
numbers), and a series keeps at most MAX_POINTS points (every other point is
dropped when it fills, so a long training still shows its whole curve).
Its readers are on Airflow's and the user's side (`tshell status --watch`);
it lives with the rest of the pod protocol in runtime/, standard library only.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable

from runtime.protocol import METRIC_MARKER

MAX_LINE_CHARS = 4096
MAX_NAMES = 32
MAX_NAME_CHARS = 64
MAX_POINTS = 1000
_NAME = re.compile(r"^[A-Za-z0-9_./-]+$")

MetricPoint = dict[str, float]


def parse_metric_line(line: str) -> MetricPoint | None:
    """The point a log line reports, or None when it reports none (or breaks the contract)."""
    if len(line) > MAX_LINE_CHARS:
        return None
    at = line.find(METRIC_MARKER)
    if at < 0:
        return None
    try:
        value = json.loads(line[at + len(METRIC_MARKER) :])
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    point: MetricPoint = {}
    for name, number in value.items():
        if len(point) == MAX_NAMES:
            break
        if not (isinstance(name, str) and len(name) <= MAX_NAME_CHARS and _NAME.match(name)):
            continue
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            continue
        if math.isfinite(number):
            point[name] = float(number)
    return point or None


def collect_metric_points(lines: Iterable[str], max_points: int = MAX_POINTS) -> list[MetricPoint]:
    """Every point the lines report, in order, thinned to at most `max_points`."""
    points: list[MetricPoint] = []
    keep_every = 1
    seen = 0
    for line in lines:
        point = parse_metric_line(line)
        if point is None:
            continue
        if seen % keep_every == 0:
            points.append(point)
            if len(points) > max_points:
                points = points[::2]
                keep_every *= 2
        seen += 1
    return points


def latest_metrics(lines: Iterable[str]) -> MetricPoint | None:
    """The last point the lines report, or None."""
    latest = None
    for line in lines:
        point = parse_metric_line(line)
        if point is not None:
            latest = point
    return latest


__all__ = [
    "MAX_LINE_CHARS",
    "MAX_NAMES",
    "MAX_POINTS",
    "MetricPoint",
    "collect_metric_points",
    "latest_metrics",
    "parse_metric_line",
]
