"""RESULTS.md section 10 (bench/report_event_curves.py) from a measurement's JSON: the figures,
both targets judged, and its place in the report."""

from __future__ import annotations

from bench.report import SECTION_HEADINGS, build_report
from bench.report_event_curves import HEADING, section_event_curves

RESULT = {
    "mib": 50.2,
    "files": 4,
    "first_read_ms": 7300.0,
    "cached_ms": {"median": 12.5, "min": 9.0, "max": 30.0, "n": 20},
    "listing_ms": {"median": 10.0, "min": 8.0, "max": 20.0, "n": 20},
    "grown_read_ms": 180.0,
    "grown_bytes_read": 1048576,
    "curves": {"chief-0/train": 500, "worker-0": 500},
    "rss_growth_mib": 9.5,
    "rss_growth_first_read_mib": 9.0,
    "peak_growth_mib": 20.0,
    "repeat": 20,
    "load": 3.2,
}


def test_the_section_shows_each_read_and_judges_both_targets():
    text = "\n".join(section_event_curves(RESULT))
    assert text.startswith(HEADING)
    assert "| first (every byte read and decoded) | 7300 ms |" in text
    assert "12.5 ms (9.0–30.0, n=20)" in text and "10.0 ms (8.0–20.0, n=20)" in text
    assert "median 12.5 ms, met" in text
    assert "RSS +9.5 MiB" in text and "peak +20.0 MiB, met" in text


def test_a_slow_cached_read_or_a_large_growth_is_not_met():
    slow = dict(RESULT, cached_ms={"median": 250.0, "min": 240.0, "max": 300.0, "n": 20})
    assert "median 250.0 ms, NOT met" in "\n".join(section_event_curves(slow))
    big = dict(RESULT, peak_growth_mib=80.0)
    assert "peak +80.0 MiB, NOT met" in "\n".join(section_event_curves(big))


def test_the_report_places_the_section_or_says_it_was_not_measured():
    assert SECTION_HEADINGS["event_curves"] == "## 10."
    report = build_report({"event_curves": RESULT}, {}, {})
    assert HEADING in report
    assert "Not measured in this run: not run" in build_report({}, {}, {})
