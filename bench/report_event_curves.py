"""RESULTS.md section 10: the TFJob tab's curves from a run's event files (bench_event_curves.py).

Its own module so each section of bench/report.py can be read alone; pure,
tested in tests/bench/test_bench_event_curves.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench.stats import format_summary, verdict

HEADING = "## 10. The TFJob tab's curves from 50 MiB of event files (issue 31)"


def section_event_curves(result: Mapping[str, Any]) -> list[str]:
    cached = result["cached_ms"]
    target_ms = float(result.get("target_cached_ms", 200.0))
    target_mib = float(result.get("target_rss_mib", 64.0))
    growth = float(result["rss_growth_mib"])
    peak = float(result["peak_growth_mib"])
    curves = ", ".join(f"{name} {count}" for name, count in result.get("curves", {}).items())
    return [
        HEADING,
        "",
        f"{result['mib']:.1f} MiB of event files in {result['files']} files under one run's "
        "`tensorboard/<replica>/` folders of the local S3 server (`chief-0/train/` written by "
        "`tf.summary` as Keras' callback writes it: v2 scalar tensors, a histogram every 100 "
        "steps; three workers' tf1-style `simple_value` events), read as the `/curves` route "
        "reads them once its 2 s sharing has passed (`EventCurves.read_run` with the answer's "
        "JSON encoding) in a process that has loaded the plugin's modules and no TensorFlow "
        f"(bench/bench_event_curves.py). Load average {result.get('load', 0):.1f} at the end.",
        "",
        "| read | time |",
        "|---|---|",
        f"| first (every byte read and decoded) | {result['first_read_ms']:.0f} ms |",
        f"| cached, unchanged ({result['repeat']} requests: one listing, nothing read) | "
        f"{format_summary(cached, 'ms', 1)} |",
        f"| for comparison: the bare S3 listing of the folder alone | "
        f"{format_summary(result.get('listing_ms'), 'ms', 1)} |",
        f"| one file grown by 1 MiB (only its {result['grown_bytes_read'] / 2**20:.1f} MiB "
        f"new bytes read) | {result['grown_read_ms']:.0f} ms |",
        "",
        f"- target: a cached answer under {target_ms:.0f} ms: median {cached['median']:.1f} ms, "
        f"{verdict(cached['median'] < target_ms)}.",
        f"- target: the process grows by under {target_mib:.0f} MiB: RSS +{growth:.1f} MiB after "
        f"every read (+{result['rss_growth_first_read_mib']:.1f} after the first), peak "
        f"+{peak:.1f} MiB, {verdict(max(growth, peak) < target_mib)}.",
        f"- what is kept: points per curve {curves} (each tag thinned to 500 points, the newest "
        "kept), not the bytes: files are read in 1 MiB chunks and only complete records "
        "decoded.",
        "- where the first read's time goes: decoding each record's `Event` proto and walking "
        "its values in Python (about 0.14 s of CPU per MiB of small scalar events on a quiet "
        "core); it is paid once per byte, the next reads list the folder and compare keys, "
        "ETags and sizes.",
        "",
    ]
