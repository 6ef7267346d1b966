"""The `TFJOB_METRIC {json}` lines of a replica's log become curve points, within limits."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from runtime.metric_lines import (
    MAX_LINE_CHARS,
    MAX_NAMES,
    collect_metric_points,
    latest_metrics,
    parse_metric_line,
)


def test_a_metric_line_gives_its_numbers_wherever_the_marker_is():
    assert parse_metric_line('TFJOB_METRIC {"step": 120, "loss": 0.31}') == {
        "step": 120.0,
        "loss": 0.31,
    }
    line = '2026-12-04T03:00:00Z [chief-0] TFJOB_METRIC {"step": 5, "accuracy": 0.5}'
    assert parse_metric_line(line) == {"step": 5.0, "accuracy": 0.5}


def test_lines_that_are_not_points_give_none():
    for line in (
        "training step 5",
        'TFJOB_METRICS {"accuracy": 0.9}',  # the run's final ones
        "TFJOB_METRIC not json",
        "TFJOB_METRIC [1, 2]",
        'TFJOB_METRIC {"loss": "x"}',
        'TFJOB_METRIC {"ok": true}',
        "TFJOB_METRIC {}",
    ):
        assert parse_metric_line(line) is None, line


def test_odd_names_infinite_numbers_and_long_lines_are_left_out():
    point = parse_metric_line(
        'TFJOB_METRIC {"loss": 1, "bad name": 2, "x": Infinity, "nan": NaN, "' + "n" * 65 + '": 3}'
    )
    assert point == {"loss": 1.0}
    many = {f"m{i}": i for i in range(MAX_NAMES + 10)}
    assert len(parse_metric_line("TFJOB_METRIC " + json.dumps(many))) == MAX_NAMES
    padded = 'TFJOB_METRIC {"loss": 1}' + " " * MAX_LINE_CHARS
    assert parse_metric_line(padded) is None


def test_a_long_training_keeps_its_whole_curve_in_at_most_max_points():
    lines = [f'TFJOB_METRIC {{"step": {n}, "loss": {1 / (n + 1)}}}' for n in range(10_000)]
    points = collect_metric_points(lines, max_points=100)
    assert 50 <= len(points) <= 100
    steps = [p["step"] for p in points]
    assert steps[0] == 0 and steps == sorted(steps) and steps[-1] > 9000
    assert latest_metrics(["noise", *lines[:3], "more noise"]) == {"step": 2.0, "loss": 1 / 3}


@given(st.lists(st.text(max_size=80), max_size=50))
def test_any_log_gives_only_points_of_finite_numbers(lines):
    for point in collect_metric_points(lines):
        assert point and all(isinstance(v, float) and v == v for v in point.values())
