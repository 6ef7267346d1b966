"""RESULTS.md section 7: one gang of 128 to 1,024 replicas on simulated nodes (bench_scale.py).

One row per gang size (latencies, requests per replica, the API server's memory), the
requests of the largest gang by verb and resource, the targets of issue 18, and sentences
computed from the figures: which figure grows faster than the gang (its growth exponent
between the smallest and the largest size) and why, as far as the request counts tell.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from bench.stats import format_summary, markdown_table, verdict

# Issue 18's targets at 1,024 replicas.
TARGETS = {
    "launch_to_running_s": (30.0, "all Running ≤ 30 s after launch starts"),
    "running_to_delivered_s": (5.0, "ClusterSpec in every pod ≤ 5 s after that"),
    "decision_to_gone_s": (15.0, "every pod gone ≤ 15 s after the decision"),
    "client_requests_per_replica": (5.0, "the product's API requests ≤ 5 per replica"),
}
# A figure whose growth exponent against the replica count is above this grows faster than
# linearly (1.0 is linear; the margin absorbs the noise of a shared machine).
SUPERLINEAR_EXPONENT = 1.15
GROWING = {
    "launch_to_running_s": "launch → all Running",
    "launch_create_pods_s": "creating the pods (inside launch)",
    "running_to_delivered_s": "Running → ClusterSpec delivered",
    "decision_to_gone_s": "teardown → all gone",
}


def growth_exponent(small: tuple[int, float], large: tuple[int, float]) -> float | None:
    """k in value ∝ replicas^k between two sizes; None when a value is not positive."""
    (n1, v1), (n2, v2) = small, large
    if v1 <= 0 or v2 <= 0 or n1 == n2:
        return None
    return math.log(v2 / v1) / math.log(n2 / n1)


def describe_growth(summary: Mapping[str, Mapping[str, Any]]) -> list[str]:
    sizes = sorted(int(n) for n in summary)
    if len(sizes) < 2:
        return ["One gang size only: no growth to compare."]
    small, large = sizes[0], sizes[-1]
    lines = []
    for key, words in GROWING.items():
        v1 = summary[str(small)][key]["median"]
        v2 = summary[str(large)][key]["median"]
        k = growth_exponent((small, v1), (large, v2))
        if k is None:
            continue
        shape = "faster than linearly" if k > SUPERLINEAR_EXPONENT else "about linearly or less"
        lines.append(
            f"- {words}: {v1:.2f} s at {small} → {v2:.2f} s at {large} replicas, "
            f"∝ n^{k:.2f}: grows {shape}."
        )
    return lines


def kinds_table(job: Mapping[str, Any]) -> str:
    rows = []
    for phase, counts in job["phases"].items():
        for kind in sorted(set(counts["server"]) | set(counts["client"])):
            server, client = counts["server"].get(kind, 0), counts["client"].get(kind, 0)
            n = job["replicas"]
            rows.append(
                [
                    phase,
                    kind,
                    server or "–",
                    f"{server / n:.2f}",
                    client or "–",
                    f"{client / n:.2f}",
                ]
            )
    return markdown_table(
        [
            "phase",
            "verb resource",
            "API server counted (all)",
            "per replica",
            "product sent",
            "per replica",
        ],
        rows,
    )


def delivery_cost_lines(summary: Mapping[str, Mapping[str, Any]], sizes: list[int]) -> list[str]:
    """What one ClusterSpec exec costs by gang size: the file it carries and the CPU time of
    the product's process and of the API server per exec (empty for results without them)."""
    keys = (
        "cluster_file_bytes",
        "delivery_product_cpu_ms_per_exec",
        "delivery_apiserver_cpu_ms_per_exec",
    )
    if not all(key in summary[str(n)] for n in sizes for key in keys):
        return []
    rows = [
        [
            n,
            f"{summary[str(n)]['cluster_file_bytes']['median'] / 1024:.1f} KiB",
            format_summary(summary[str(n)]["delivery_product_cpu_ms_per_exec"], "ms", 2),
            format_summary(summary[str(n)]["delivery_apiserver_cpu_ms_per_exec"], "ms", 2),
        ]
        for n in sizes
    ]
    return [
        "What one ClusterSpec exec costs (CPU time during the delivery phase divided by the "
        "replicas: the product's whole process, and the API server, which also runs the "
        "simulated pods' shell):",
        "",
        markdown_table(
            ["replicas", "largest cluster.json", "product CPU / exec", "API server CPU / exec"],
            rows,
        ),
    ]


def section_scale(data: Mapping[str, Any]) -> list[str]:
    summary = data["summary"]
    sizes = sorted(int(n) for n in summary)
    rows = []
    for n in sizes:
        s = summary[str(n)]
        rows.append(
            [
                n,
                format_summary(s["launch_to_running_s"]),
                format_summary(s["launch_create_pods_s"]),
                format_summary(s["running_to_delivered_s"]),
                format_summary(s["decision_to_gone_s"]),
                format_summary(s["client_requests_per_replica"], "", 1),
                format_summary(s["server_requests_per_replica"], "", 1),
                f"{s['apiserver_peak_kib']['median'] / 1024:.0f} MiB",
                format_summary(s["load_average_1m"], "", 1) if "load_average_1m" in s else "–",
            ]
        )
    largest = max(sizes)
    job = next(j for j in data["jobs"] if j["replicas"] == largest)
    out = [
        "## 7. Scale (issue 18)",
        "",
        "### 7a. One gang of hundreds of replicas on simulated nodes",
        "",
        f"`bench/bench_scale.py`: one parameter-server gang per size on {data['nodes']} "
        'simulated localkube nodes (localkube/README.md, "Simulated nodes": the API server, '
        "scheduler and the product's clients are real, the pods only pretend to run, and the "
        "ClusterSpec delivery execs write real files into each pod's simulated filesystem, read "
        "back and checked for every pod). A fresh localkube per job; the product's own gang "
        "code (`gang.create_replica_pods`, `gang.await_gang_start`, "
        "`delivery.deliver_run_cluster_spec`, `gang.stop_gang`) in one process. Not driven: "
        "S3, Airflow, the triggerer, the run's ConfigMap/Secrets/NetworkPolicy (a few "
        'requests per run). Requests: "product" counted by its clients (bench/apicount.py), '
        '"all" by the API server (`GET /localkube/v1/requests`: the simulated kubelets\' '
        f"status PATCHes, events and final DELETEs included). Medians of {data['repeat']} "
        "jobs per size. The machine is shared (2 cores): every latency here is mostly CPU "
        "time of one API server process, so the 1-minute load average at each job's start "
        "is shown with them.",
        "",
        markdown_table(
            [
                "replicas",
                "launch → all Running",
                "of which creating pods",
                "Running → delivered",
                "teardown → all gone",
                "product requests / replica",
                "all requests / replica",
                "API server peak RSS",
                "load average",
            ],
            rows,
        ),
        "",
        f"Targets at {largest} replicas (issue 18):",
        "",
    ]
    for key, (limit, words) in TARGETS.items():
        value = summary[str(largest)][key]["median"]
        out.append(f"- {words}: {value:.2f} — {verdict(value <= limit)}")
    out += ["", *delivery_cost_lines(summary, sizes)]
    out += [
        "",
        "Growth between the smallest and the largest gang:",
        "",
        *describe_growth(summary),
        "",
        f"Requests of one {largest}-replica job by phase, verb and resource:",
        "",
        kinds_table(job),
        "",
    ]
    notes = data.get("notes") or []
    if notes:
        out += [
            "What grows faster than linearly, or serialises the gang, and why:",
            "",
            *(f"- {note}" for note in notes),
            "",
        ]
    return out
