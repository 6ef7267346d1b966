"""The invariants a chaos soak must keep, one named check each, on what the soak observed.

Why this exists: "the product survives faults" is only a claim until each promise is a check
that can fail and names the run that broke it. The observations (`RunSeen`, `SoakSeen`) are
gathered from the world by bench/chaos_observe.py; the checks here are pure, so each is tested
on synthetic inputs (tests/bench/test_chaos.py).

A check returns its violations (goal: none); `check_soak` runs them all.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from bench.chaos_plan import FaultKind

# Words a failure's reason must hold to name each fault (a failed task's error, run.json's
# replicas and attempts): the run failed of that fault, not of something unexplained.
FAULT_WORDS = {
    FaultKind.REPLICA_DELETED: ("deleted", "restart", "Gone"),
    FaultKind.REPLICA_DELETED_GRACE_0: ("deleted", "restart", "Gone"),
    FaultKind.NODE_STOPPED: ("node", "NodeLost", "Gone"),
    FaultKind.API_OUTAGE: ("503", "Service Unavailable", "API server"),
    FaultKind.S3_KILLED: ("S3", "Connection refused", "EndpointConnectionError"),
    FaultKind.SCHEDULER_KILLED: ("zombie", "heartbeat", "scheduler"),
    FaultKind.TRIGGERER_KILLED: ("trigger",),
    FaultKind.API_SERVER_KILLED: ("API server", "Connection refused", "execution API"),
    FaultKind.TASK_PROCESS_KILLED: ("SIGKILL", "-9", "killed", "zombie", "heartbeat"),
    FaultKind.POSTGRES_RESTARTED: ("database", "PostgreSQL", "psycopg2", "OperationalError"),
    FaultKind.ALL_SERVICES_RESTARTED: ("Connection refused", "zombie", "heartbeat", "killed"),
}


class Check(enum.Enum):
    ENDED_IN_TIME = "every run ended within its deadline"
    FAILURE_NAMES_FAULT = "every failure's reason names a fault that hit the run"
    RESTARTS_WITHIN_LIMIT = "gang restarts <= the request's max_restarts"
    MODEL_MATCHES_CHIEF = "every success's model in S3 is what its chief wrote (sha256)"
    LATEST_IS_NEWEST_SUCCESS = "each output's latest names its newest successful run"
    LOGS_ARCHIVED = "every run that reached archive has every replica's log, or run.json's reason"
    NOTHING_LEFT = "no pod, Secret, ConfigMap, NetworkPolicy, process, netns, cgroup, mount left"
    NO_CREDENTIAL_IN_LOGS = "no credential in any log"


@dataclass(frozen=True)
class Violation:
    check: Check
    run: str  # the run's name, or "" for the world
    detail: str

    def to_payload(self) -> dict[str, str]:
        return {"check": self.check.name, "run": self.run, "detail": self.detail}


@dataclass(frozen=True)
class RunSeen:
    """One run as the soak saw it once everything ended."""

    name: str
    output: str
    run_id: str | None  # None: never triggered (its trigger failed)
    state: str | None  # Airflow's final state, None if it never ended
    submitted_at: float
    ended_at: float | None
    deadline_s: float
    run_after: str | None = None
    faults: tuple[FaultKind, ...] = ()  # the faults injected while it ran
    failure_reason: str = ""
    max_restarts: int = 0
    restarts: int = 0
    chief: str = "worker-0"  # the replica that writes the model
    model_sha256: str | None = None  # of model/model.json in S3, None when absent
    expected_model_sha256: str | None = None
    reached_archive: bool = False
    replicas: tuple[str, ...] = ()  # role-index of every replica the run had
    archived_logs: tuple[str, ...] = ()  # role-index of each log under logs/
    # role-index of each replica run.json's `logs_missing` gives a reason for (its pod deleted)
    logs_explained: tuple[str, ...] = ()


@dataclass(frozen=True)
class SoakSeen:
    runs: tuple[RunSeen, ...]
    latest: Mapping[str, str | None] = field(default_factory=dict)  # output -> run_id it names
    objects_left: tuple[str, ...] = ()  # kind/namespace/name of run objects after the soak
    leftovers: tuple[str, ...] = ()  # scripts/check_clean.py's after `down`
    credential_hits: tuple[str, ...] = ()  # "<where>: <which secret>"


def standin_model_sha256(replica: str, total: int = 6) -> str:
    """sha256 of the model.json the stand-in program writes (harness/standin.py) as `replica`,
    its bundle's numbers summing to `total`: what the chief wrote, computed without it."""
    return hashlib.sha256(json.dumps({"trained_by": replica, "total": total}).encode()).hexdigest()


def check_ended_in_time(soak: SoakSeen) -> list[Violation]:
    found = []
    for run in soak.runs:
        if run.state not in ("success", "failed") or run.ended_at is None:
            found.append(Violation(Check.ENDED_IN_TIME, run.name, f"not ended: {run.state}"))
        elif run.ended_at - run.submitted_at > run.deadline_s:
            took = run.ended_at - run.submitted_at
            found.append(
                Violation(
                    Check.ENDED_IN_TIME,
                    run.name,
                    f"ended after {took:.0f} s, its deadline is {run.deadline_s:.0f} s",
                )
            )
    return found


def check_failures_name_faults(soak: SoakSeen) -> list[Violation]:
    found = []
    for run in soak.runs:
        if run.state != "failed":
            continue
        words = [word for kind in run.faults for word in FAULT_WORDS[kind]]
        if not any(word.lower() in run.failure_reason.lower() for word in words):
            hit = ", ".join(kind.value for kind in run.faults) or "no fault"
            found.append(
                Violation(
                    Check.FAILURE_NAMES_FAULT,
                    run.name,
                    f"failed ({run.failure_reason[:300]!r}) with {hit} injected",
                )
            )
    return found


def check_restarts(soak: SoakSeen) -> list[Violation]:
    return [
        Violation(
            Check.RESTARTS_WITHIN_LIMIT,
            run.name,
            f"{run.restarts} gang restarts, max_restarts {run.max_restarts}",
        )
        for run in soak.runs
        if run.restarts > run.max_restarts
    ]


def check_models(soak: SoakSeen) -> list[Violation]:
    found = []
    for run in soak.runs:
        if run.state != "success":
            continue
        if run.model_sha256 is None:
            found.append(Violation(Check.MODEL_MATCHES_CHIEF, run.name, "no model in S3"))
        elif run.model_sha256 != run.expected_model_sha256:
            found.append(
                Violation(
                    Check.MODEL_MATCHES_CHIEF,
                    run.name,
                    f"model sha256 {run.model_sha256}, {run.chief} wrote "
                    f"{run.expected_model_sha256}",
                )
            )
    return found


def check_latest(soak: SoakSeen) -> list[Violation]:
    newest: dict[str, RunSeen] = {}
    for run in soak.runs:
        if run.state == "success" and run.run_id is not None:
            best = newest.get(run.output)
            order = (run.run_after or "", run.run_id)
            if best is None or order > (best.run_after or "", best.run_id or ""):
                newest[run.output] = run
    found = []
    for output, run in sorted(newest.items()):
        named = soak.latest.get(output)
        if named != run.run_id:
            found.append(
                Violation(
                    Check.LATEST_IS_NEWEST_SUCCESS,
                    run.name,
                    f"{output}latest names {named}, the newest success is {run.run_id}",
                )
            )
    return found


def check_logs(soak: SoakSeen) -> list[Violation]:
    found = []
    for run in soak.runs:
        missing = sorted(set(run.replicas) - set(run.archived_logs) - set(run.logs_explained))
        if run.reached_archive and missing:
            found.append(
                Violation(Check.LOGS_ARCHIVED, run.name, f"no archived log of {', '.join(missing)}")
            )
    return found


def check_nothing_left(soak: SoakSeen) -> list[Violation]:
    return [
        Violation(Check.NOTHING_LEFT, "", left) for left in (*soak.objects_left, *soak.leftovers)
    ]


def check_no_credentials(soak: SoakSeen) -> list[Violation]:
    return [Violation(Check.NO_CREDENTIAL_IN_LOGS, "", hit) for hit in soak.credential_hits]


CHECKS: dict[Check, Callable[[SoakSeen], list[Violation]]] = {
    Check.ENDED_IN_TIME: check_ended_in_time,
    Check.FAILURE_NAMES_FAULT: check_failures_name_faults,
    Check.RESTARTS_WITHIN_LIMIT: check_restarts,
    Check.MODEL_MATCHES_CHIEF: check_models,
    Check.LATEST_IS_NEWEST_SUCCESS: check_latest,
    Check.LOGS_ARCHIVED: check_logs,
    Check.NOTHING_LEFT: check_nothing_left,
    Check.NO_CREDENTIAL_IN_LOGS: check_no_credentials,
}


def check_soak(soak: SoakSeen) -> dict[Check, list[Violation]]:
    """Every check's violations, in Check's order."""
    return {check: CHECKS[check](soak) for check in Check}


def find_secrets(texts: Iterable[tuple[str, bytes]], secrets: Mapping[str, str]) -> list[str]:
    """`<where>: <secret name>` for each secret value found in a text (a log's bytes)."""
    wanted = {name: value.encode() for name, value in secrets.items() if len(value) >= 8}
    return [
        f"{where}: {name}"
        for where, text in texts
        for name, value in sorted(wanted.items())
        if value in text
    ]
