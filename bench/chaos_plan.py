"""What a chaos soak will do, drawn from its seed: the runs it submits and the faults it injects.

Why this exists: a soak must be reproducible (`--seed`): the same seed gives the same runs
(tenant, shape, training time, wave, the scheduled one) and the same faults (kind, the phase
of a run it waits for, the delay after that phase is seen, which run). Only the moment each
fault lands depends on the machine. Pure data, no I/O: bench/chaos.py carries the plan out,
bench/chaos_faults.py injects each fault.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass

from tfjob.pipeline_ids import (
    ARCHIVE_TASK,
    CLUSTERSPEC_TASK,
    FETCH_BUNDLE_TASK,
    LAUNCH_TASK,
    PUBLISH_TASK,
    TEARDOWN_TASK,
    TRAIN_TASK,
    VALIDATE_TASK,
)

TENANTS = ("test", "research")  # deploy/tenants.yaml's tenants that may use bucket tfjob-test
WAVE_SIZE = 3  # runs submitted together (concurrent), the next wave once these ended
MAX_DELAY_S = 8.0  # a fault lands this long at most after its phase was seen


class FaultKind(enum.Enum):
    REPLICA_DELETED = "replica deleted (grace)"
    REPLICA_DELETED_GRACE_0 = "replica deleted (grace 0)"
    NODE_STOPPED = "node stopped"
    API_OUTAGE = "localkube API outage"
    S3_KILLED = "S3 server killed"
    SCHEDULER_KILLED = "Airflow scheduler killed"
    TRIGGERER_KILLED = "Airflow triggerer killed"
    API_SERVER_KILLED = "Airflow API server killed"
    TASK_PROCESS_KILLED = "a task's process killed"
    POSTGRES_RESTARTED = "PostgreSQL restarted"
    ALL_SERVICES_RESTARTED = "all services killed and started again"


class Phase(enum.Enum):
    """Where a run is, from its task instances' states (Airflow's REST API)."""

    PREPARE = "prepare"  # validate, fetch_bundle
    LAUNCH = "launch"  # launch, clusterspec
    TRAIN = "train"
    ARCHIVE = "archive"  # archive, teardown, publish


PHASE_TASKS = {
    Phase.PREPARE: (VALIDATE_TASK, FETCH_BUNDLE_TASK),
    Phase.LAUNCH: (LAUNCH_TASK, CLUSTERSPEC_TASK),
    Phase.TRAIN: (TRAIN_TASK,),
    Phase.ARCHIVE: (ARCHIVE_TASK, TEARDOWN_TASK, PUBLISH_TASK),
}
# A fault on a run's pods needs pods: it waits for a phase that has them.
POD_FAULTS = (FaultKind.REPLICA_DELETED, FaultKind.REPLICA_DELETED_GRACE_0, FaultKind.NODE_STOPPED)
POD_PHASES = (Phase.LAUNCH, Phase.TRAIN)


class RunShape(enum.Enum):
    SINGLE = "stand-in, single"
    PARAMETER_SERVER = "stand-in, chief + ps + 2 workers"


@dataclass(frozen=True)
class PlannedRun:
    name: str
    tenant: str
    shape: RunShape
    train_s: int
    wave: int
    scheduled: bool  # a request file with `schedule: "@once"`, not a REST trigger
    max_restarts: int


@dataclass(frozen=True)
class PlannedFault:
    index: int
    kind: FaultKind
    phase: Phase
    delay_s: float  # after a run was first seen in `phase`
    wave: int  # the wave whose runs it hits


def build_run_plan(seed: int, runs: int, wave_size: int = WAVE_SIZE) -> tuple[PlannedRun, ...]:
    """`runs` stand-in runs over TENANTS in waves of `wave_size`; the first is the scheduled one."""
    if runs < 1:
        raise ValueError(f"--runs: {runs} given; allowed: 1 or more")
    draw = random.Random(f"runs:{seed}")
    plan = []
    for i in range(runs):
        plan.append(
            PlannedRun(
                name=f"chaos-{seed}-{i:02d}",
                tenant=TENANTS[i % len(TENANTS)] if i else TENANTS[0],
                shape=draw.choice(tuple(RunShape)),
                train_s=draw.randint(20, 40),
                wave=i // wave_size,
                scheduled=i == 0,
                max_restarts=2,
            )
        )
    return tuple(plan)


def build_fault_plan(seed: int, faults: int, waves: int) -> tuple[PlannedFault, ...]:
    """`faults` faults, kinds drawn in rounds (each round is every kind once, shuffled: every
    kind comes before any repeats), each in a random phase its kind can hit, spread over the
    `waves` (in order)."""
    if faults < 0:
        raise ValueError(f"--faults: {faults} given; allowed: 0 or more")
    if waves < 1:
        raise ValueError(f"waves: {waves} given; allowed: 1 or more")
    draw = random.Random(f"faults:{seed}")
    kinds: list[FaultKind] = []
    while len(kinds) < faults:
        round_ = list(FaultKind)
        draw.shuffle(round_)
        kinds += round_
    plan = []
    for index, kind in enumerate(kinds[:faults]):
        phases = POD_PHASES if kind in POD_FAULTS else tuple(Phase)
        plan.append(
            PlannedFault(
                index=index,
                kind=kind,
                phase=draw.choice(phases),
                delay_s=round(draw.uniform(0.0, MAX_DELAY_S), 1),
                wave=index * waves // faults if faults else 0,
            )
        )
    return tuple(plan)


def read_phase(task_states: dict[str, str | None]) -> Phase | None:
    """The phase of a run from {task_id: state}: the latest phase with a task started
    (running, deferred, up for retry or done); None before any."""
    started = ("running", "deferred", "up_for_retry", "up_for_reschedule", "success", "failed")
    current = None
    for phase, tasks in PHASE_TASKS.items():
        if any(task_states.get(task) in started for task in tasks):
            current = phase
    return current
