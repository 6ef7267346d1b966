"""RESULTS.md section 1: start-up overhead vs replica count (bench_startup.py's figures).

The table and targets per replica count, the API-request fit, and where a
ClusterSpec delivery's time goes (the exec profile). Its own module so each
section of bench/report.py can be read alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench.stats import format_summary, markdown_table, ratio, verdict

# Requests a replica costs at the least: create, exec (ClusterSpec), log stream, delete.
REQUESTS_PER_REPLICA_FLOOR = 4


def describe_exec_share(profile: Mapping[str, Any]) -> str:
    """Whether an exec's fixed cost (a WebSocket, processes spawned in the pod) dominates."""
    nothing = profile["exec_true_s"]["median"] * 1000
    whole = profile["deliver_one_s"]["median"] * 1000
    if nothing >= 0.7 * whole:
        return (
            f"an exec that does nothing (`true`, {nothing:.0f} ms) costs about as much as a whole "
            f"delivery ({whole:.0f} ms): the time is the exec itself (a new WebSocket connection, "
            "then localkube spawning sh → nsenter → the command in the pod's namespaces), not "
            "the write."
        )
    return (
        f"an exec that does nothing takes {nothing:.0f} ms of a whole delivery's {whole:.0f} ms; "
        "the rest is the write itself."
    )


def describe_parallel_delivery(profile: Mapping[str, Any]) -> list[str]:
    """The old way (one exec after another) against the pool, in the same run and pod."""
    serial, parallel = profile.get("deliver_serial_s"), profile.get("deliver_parallel_s")
    if not serial or not parallel:
        return []
    execs = profile.get("parallel_execs", 16)
    speedup = ratio(serial["median"], parallel["median"]) or 0.0
    return [
        f"Baseline in the same run: {execs} delivery-shaped execs (the same sh, printf and mv, "
        "each its own file) into one running pod one after another "
        f"(as `deliver_cluster_spec` did before) {format_summary(serial)}; 8 at a time (the pool) "
        f"{format_summary(parallel)}: {speedup:.1f}× faster; at that rate 32 replicas would "
        "get theirs in "
        f"~{parallel['median'] * 32 / execs:.2f} s (target 0.52 s). Inside a 32-replica job it "
        "takes longer because each replica that has its file starts its Python programs "
        "(bootstrap, then the stand-in) on the same 2 cores while the remaining execs run. "
        "An exec's cost is mostly CPU (the client's "
        "WebSocket handshake, localkube's handler, then sh → nsenter → sh → printf/mv as new "
        "processes), so on 2 cores parallel execs gain only what the waiting left idle; a "
        "machine with more cores, or a real kubelet, gains more.",
        "",
    ]


def section_startup(data: Mapping[str, Any]) -> list[str]:
    grace = data.get("teardown_grace_s", 10)
    rows, ok_delivery, ok_teardown = [], True, True
    for count, row in data["summary"]["by_replicas"].items():
        n = int(count)
        delivery_target = 0.2 + 0.01 * n
        delivered = row["running_to_delivered_s"]["median"]
        teardown = row.get("chief_exit_to_gone_s") or row["exit_to_gone_s"]
        ok_delivery &= delivered <= delivery_target
        ok_teardown &= teardown["max"] <= grace + 1
        rows.append(
            [
                n,
                format_summary(row["launch_to_running_s"]),
                format_summary(row["running_to_delivered_s"]),
                f"{delivery_target:.2f} s: {verdict(delivered <= delivery_target)}",
                f"{delivered / n * 1000:.0f} ms",
                format_summary(row.get("exit_to_seen_s")),
                format_summary(teardown),
                f"{grace + 1} s: {verdict(teardown['max'] <= grace + 1)} (max)",
                format_summary(row["requests_total"], "", 0),
            ]
        )
    out = [
        "## 1. Start-up overhead vs replica count (localkube, stand-in program)",
        "",
        "Driven through the product's own task code in one process (bench/driver.py): "
        "`TrainingLaunchOperator.execute`, `steps.deliver_cluster_spec`, the triggerer's "
        "`TrainingTrigger.run`, `steps.teardown`, under Airflow's `set_current_context`; only "
        "XCom is a dict. API requests are counted on the client side (bench/apicount.py: the sync "
        "and async REST clients and the exec WebSocket; a watch counts once).",
        "",
        markdown_table(
            [
                "replicas",
                "launch → all Running with IP",
                "→ ClusterSpec in every pod",
                "delivery target (0.2 s + 10 ms/replica)",
                "delivery per replica",
                "chief exit → trigger fires",
                "chief exit → every object gone",
                f"teardown target (grace {grace} s + 1 s)",
                "API requests per job",
            ],
            rows,
        ),
        "",
    ]
    fit = data["summary"].get("requests_fit")
    largest = max(data["summary"]["by_replicas"], key=int)
    kinds = data["summary"]["by_replicas"][largest]["request_kinds"]
    phases = data["summary"]["by_replicas"][largest]["requests_by_phase"]
    if fit:
        out.append(
            f"API requests per job ≈ {fit['per_replica']:.2f} × replicas + {fit['constant']:.1f} "
            "(least squares over every job): linear, with a constant part that does not grow with "
            "time (watches, not polling loops)."
        )
    out += [
        "",
        f"Requests of one {largest}-replica job by phase: "
        + ", ".join(f"{k} {v}" for k, v in phases.items())
        + "; by kind: "
        + ", ".join(f"{k} {v}" for k, v in kinds.items())
        + ".",
        "",
    ]
    profile = data["summary"].get("exec_profile")
    if profile:
        out += [
            "Where a delivery's time goes (10 calls each, one running pod, right after a job's "
            "delivery): API round trip (GET pod) "
            f"{format_summary(profile['get_pod_s'])}; exec of `true` "
            f"{format_summary(profile['exec_true_s'])}; one whole cluster.json delivery "
            f"{format_summary(profile['deliver_one_s'])}. `steps.deliver_cluster_spec` delivers "
            "to up to "
            "8 replicas at once (operators/delivery.py: a thread pool, one API client per "
            "thread); "
            + describe_exec_share(profile)
            + " Inside a job a delivery costs more than alone (the per-replica column above): the "
            "replicas that already have their cluster.json start their programs on the same two "
            "cores while the next execs run.",
            "",
            *describe_parallel_delivery(profile),
        ]
    out.append(
        f"Targets: ClusterSpec delivery {verdict(ok_delivery)}; teardown {verdict(ok_teardown)}; "
        # 4 per replica is the floor: create, exec (ClusterSpec), log stream, delete.
        f"requests linear in replicas "
        f"{verdict(bool(fit) and round(fit['per_replica'], 2) <= REQUESTS_PER_REPLICA_FLOOR)}."
    )
    return [*out, ""]
