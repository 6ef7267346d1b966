"""The S3 gate bench (RESULTS.md section 9): it measures both sides, and its section says
what was measured and whether the target was met.

The small run here checks the measurement still works, not its figures.
"""

from __future__ import annotations

from bench import (
    bench_s3_gate,  # noqa: E402
    report,  # noqa: E402
)
from bench.report_s3_gate import section_s3_gate  # noqa: E402


def figures(median: float) -> dict:
    return {"median": median, "min": median, "max": median, "n": 1}


def case(name: str, gate: float, bare: float) -> dict:
    return {
        "case": name,
        "gate_ms": figures(gate),
        "no_gate_ms": figures(bare),
        "ratio": gate / bare,
        "extra_ms": gate - bare,
    }


def test_the_section_compares_the_gate_with_no_gate_and_judges_the_worst_ratio():
    result = {
        "requests": 60,
        "target_ratio": 1.2,
        "cases": [case("GET of 1 MiB", 11.0, 10.0), case("POST of 1 MiB", 50.0, 40.0)],
    }
    text = "\n".join(section_s3_gate(result))
    assert "## 9. The local S3 gate's cost per request (issue 26)" in text
    assert "| GET of 1 MiB | 11.0 ms (n=1) | 10.0 ms (n=1) | 1.10 | +1.0 ms |" in text
    assert "Worst median ratio 1.25 (target ≤ 1.2): NOT met." in text


def test_the_report_says_when_the_s3_gate_bench_did_not_run():
    text = report.build_report({"s3_gate": {"error": "failed (exit 1)"}}, {}, {})
    assert "## 9. The local S3 gate's cost per request (issue 26)" in text
    assert "Not measured in this run: failed (exit 1)" in text


def test_a_small_run_measures_both_sides_of_both_requests():
    result = bench_s3_gate.measure(size_mib=1, requests=2)
    assert [c["case"] for c in result["cases"]] == [
        "GET (presigned URL) of 1 MiB",
        "POST-policy upload of 1 MiB",
    ]
    for each in result["cases"]:
        assert each["gate_ms"]["n"] == each["no_gate_ms"]["n"] == 2
        assert each["ratio"] > 0
