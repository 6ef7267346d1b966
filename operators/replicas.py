"""What the pods of a run say about the run: gang start and end of training.

Both the launch task (sync client, a watch) and the training trigger (async
client, a watch) see the same pod objects and must reach the same verdicts, so
the verdicts are computed here, from plain pod dicts (the camelCase form the
API server sends, `ApiClient.sanitize_for_serialization` of a `V1Pod`), with no
client and no I/O. Everything here is data in, data out.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from runtime.protocol import INIT_CONTAINER, KEEPER_CONTAINER, MAIN_CONTAINER
from tfjob.naming import LABEL_INDEX, LABEL_ROLE, parse_pod_name
from tfjob.records.replicas import PodPhase, ReplicaStatus, TrainingState, read_role
from tfjob.request.model import Role, SuccessPolicy
from tfjob.restart_policy import INFRASTRUCTURE_KINDS, ReplicaFailure, describe_failure

# Roles whose failure fails a run; ps and evaluator never decide a run.
DECIDING_ROLES = (Role.CHIEF, Role.WORKER)

# Waiting reasons after which a pod cannot start by itself.
HOPELESS_WAITING_REASONS = frozenset(
    {"InvalidImageName", "CreateContainerConfigError", "CreateContainerError", "CrashLoopBackOff"}
)


class GangState(enum.StrEnum):
    """Where the start of a run's pods stands."""

    STARTING = "starting"
    READY = "ready"
    FAILED = "failed"


@dataclass(frozen=True)
class GangVerdict:
    state: GangState
    ready: tuple[ReplicaStatus, ...] = ()
    waiting: tuple[ReplicaStatus, ...] = ()
    failed: tuple[ReplicaStatus, ...] = ()


@dataclass(frozen=True)
class TrainingVerdict:
    state: TrainingState
    deciding: tuple[str, ...] = ()
    failed_replica: ReplicaStatus | None = None
    replicas: tuple[ReplicaStatus, ...] = field(default_factory=tuple)


def _container_status(
    statuses: Iterable[Mapping[str, object]] | None, name: str
) -> Mapping[str, object]:
    for status in statuses or ():
        if status.get("name") == name:
            return status
    return {}


def container_state(pod: Mapping[str, object], name: str) -> Mapping[str, object]:
    """The `state` of the pod's container `name` ({"running": ...}, ...), {} when unknown."""
    statuses = (pod.get("status") or {}).get("containerStatuses")
    return _container_status(statuses, name).get("state") or {}


def read_replica_status(pod: Mapping[str, object]) -> ReplicaStatus:
    """Summarise one pod dict as the replica it runs: its `tensorflow` container.

    A pod whose main container ended while another container (the model
    owner's keeper) still runs is Running for Kubernetes; the replica's phase
    is then what its main container's exit makes it: Succeeded for 0, else
    Failed, as it would be for a pod with the main container alone.
    """
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    status = pod.get("status") or {}
    spec = pod.get("spec") or {}
    main = _container_status(status.get("containerStatuses"), MAIN_CONTAINER)
    init = _container_status(status.get("initContainerStatuses"), INIT_CONTAINER)
    state = main.get("state") or {}
    terminated = state.get("terminated") or {}
    waiting = state.get("waiting") or {}
    running = state.get("running") or {}
    init_terminated = (init.get("state") or {}).get("terminated") or {}
    init_waiting = (init.get("state") or {}).get("waiting") or {}
    reason = terminated.get("reason") or waiting.get("reason") or init_waiting.get("reason")
    message = terminated.get("message") or waiting.get("message") or init_waiting.get("message")
    if not reason and status.get("reason"):
        reason, message = status.get("reason"), status.get("message")
    if init_terminated and init_terminated.get("exitCode") not in (None, 0):
        reason = reason or init_terminated.get("reason") or "Error"
    phase_text = status.get("phase") or PodPhase.PENDING.value
    try:
        phase = PodPhase(phase_text)
    except ValueError:
        phase = PodPhase.UNKNOWN
    if phase is PodPhase.RUNNING and terminated.get("exitCode") is not None:
        phase = PodPhase.SUCCEEDED if terminated["exitCode"] == 0 else PodPhase.FAILED
    return ReplicaStatus(
        role=read_role(labels.get(LABEL_ROLE)),
        index=int(labels.get(LABEL_INDEX, 0)),
        pod=str(meta.get("name", "")),
        phase=phase,
        ip=status.get("podIP") or None,
        node=spec.get("nodeName"),
        exit_code=terminated.get("exitCode"),
        reason=reason,
        message=message,
        init_exit_code=init_terminated.get("exitCode"),
        started_at=running.get("startedAt") or terminated.get("startedAt"),
        finished_at=terminated.get("finishedAt"),
        owns_model=any(c.get("name") == KEEPER_CONTAINER for c in spec.get("containers") or ()),
        pod_reason=status.get("reason") or None,
        deleted=meta.get("deletionTimestamp") is not None,
    )


def _has_failed_to_start(replica: ReplicaStatus) -> bool:
    if replica.phase in (PodPhase.FAILED, PodPhase.GONE) or replica.deleted:
        return True  # a pod being deleted, or gone, never joins the gang
    if replica.init_exit_code not in (None, 0):
        return True
    return replica.reason in HOPELESS_WAITING_REASONS


def judge_replica_start(replica: ReplicaStatus) -> GangState:
    """One pod's share of the gang start: READY (runs with an IP, or already
    succeeded), FAILED (cannot start), or STARTING."""
    if _has_failed_to_start(replica):
        return GangState.FAILED
    if replica.phase is PodPhase.SUCCEEDED or (replica.phase is PodPhase.RUNNING and replica.ip):
        return GangState.READY
    return GangState.STARTING


def describe_vanished_pod(name: str, message: str) -> ReplicaStatus:
    """A replica whose pod is gone: its name says which replica it was."""
    parsed = parse_pod_name(name)
    return ReplicaStatus(
        role=parsed[0] if parsed else None,
        index=parsed[1] if parsed else 0,
        pod=name,
        phase=PodPhase.GONE,
        reason="PodGone",
        message=message,
        deleted=True,
    )


def judge_gang_start(
    pods: Iterable[Mapping[str, object]],
    expected: Iterable[str],
    vanished: Iterable[str] = (),
) -> GangVerdict:
    """Decide whether every expected pod (by name) runs with an IP, still starts, or failed.

    A pod that already finished successfully counts as started (a single
    replica may finish before we look); a pod that is missing counts as waiting,
    unless it is in `vanished` (created, then deleted during the start): failed.
    A pod being deleted (deletionTimestamp set) has failed too.
    """
    by_name = {replica.pod: replica for replica in map(read_replica_status, pods)}
    gone = frozenset(vanished)
    ready, waiting, failed = [], [], []
    verdicts = {GangState.READY: ready, GangState.STARTING: waiting, GangState.FAILED: failed}
    for name in expected:
        replica = by_name.get(name)
        if replica is not None:
            verdicts[judge_replica_start(replica)].append(replica)
        elif name in gone:
            failed.append(describe_vanished_pod(name, "the pod was deleted during the gang start"))
        else:
            waiting.append(ReplicaStatus(role=None, index=0, pod=name, phase=PodPhase.GONE))
    if failed:
        state = GangState.FAILED
    elif waiting:
        state = GangState.STARTING
    else:
        state = GangState.READY
    return GangVerdict(state, tuple(ready), tuple(waiting), tuple(failed))


def deciding_replicas(
    policy: SuccessPolicy | str, replicas: Iterable[tuple[str, int]], single: bool = False
) -> tuple[str, ...]:
    """The replica ids (`role-index`) whose success makes the run a success.

    ps and evaluator never count. In single mode the one replica decides.
    """
    present = sorted(set(replicas))
    if single:
        return tuple(f"{r}-{i}" for r, i in present if r not in ("ps", "evaluator"))
    policy = SuccessPolicy(policy)
    if policy is SuccessPolicy.CHIEF:
        chosen = [(r, i) for r, i in present if r == "chief"]
    elif policy is SuccessPolicy.WORKER0:
        chosen = [(r, i) for r, i in present if r == "worker" and i == 0]
    else:
        chosen = [(r, i) for r, i in present if r in DECIDING_ROLES]
    if not chosen:
        raise ValueError(
            f"success_policy: {policy.value!r} given, but the run has no such replica "
            f"(replicas: {', '.join(f'{r}-{i}' for r, i in present) or 'none'})"
        )
    return tuple(f"{r}-{i}" for r, i in chosen)


def judge_training(
    pods: Iterable[Mapping[str, object]], deciding: Iterable[str], expected: Iterable[str]
) -> TrainingVerdict:
    """Decide whether training succeeded, failed, or still runs.

    `deciding` are replica ids that must all exit 0; `expected` the pod names of
    the run. A chief or worker that exits non-zero, or whose pod failed or
    vanished, fails the run at once with that replica.
    """
    deciding = tuple(deciding)
    replicas = {}
    for pod in pods:
        replica = read_replica_status(pod)
        replicas[replica.pod] = replica
    ordered = []
    for name in expected:
        replica = replicas.get(name)
        if replica is None:
            replica = describe_vanished_pod(name, "the pod no longer exists")
        ordered.append(replica)
    for replica in ordered:
        if replica.role not in DECIDING_ROLES:
            continue
        ended = replica.exit_code is not None
        broke = (replica.phase is PodPhase.GONE or replica.phase is PodPhase.FAILED) and not (
            ended and replica.has_trained
        )
        if broke or (ended and not replica.has_trained):
            return TrainingVerdict(TrainingState.FAILED, deciding, replica, tuple(ordered))
    finished = {r.replica_id for r in ordered if r.has_trained}
    if all(rid in finished for rid in deciding):
        return TrainingVerdict(TrainingState.SUCCEEDED, deciding, None, tuple(ordered))
    return TrainingVerdict(TrainingState.RUNNING, deciding, None, tuple(ordered))


def describe_startup_failure(
    replica: ReplicaStatus, events: Iterable[Mapping[str, object]], init_log_tail: str | None = None
) -> str:
    """One line per cause: why this pod did not start (scheduler, kubelet, init container)."""
    lines = [f"pod {replica.pod} ({replica.replica_id}): phase {replica.phase.value}"]
    if replica.reason:
        detail = f": {replica.message}" if replica.message else ""
        lines.append(f"  {replica.reason}{detail}")
    failure = ReplicaFailure.from_replica(replica)
    if failure.kind in INFRASTRUCTURE_KINDS:  # no program's doing: say what took it
        lines.append(f"  {describe_failure(failure)}")
    if replica.init_exit_code not in (None, 0):
        lines.append(f"  init container {INIT_CONTAINER} exited with code {replica.init_exit_code}")
        if init_log_tail:
            lines.extend(f"    | {line}" for line in init_log_tail.rstrip().splitlines())
    seen = set()
    for event in events:
        if event.get("type") != "Warning":
            continue
        text = f"{event.get('reason')}: {event.get('message')}"
        if text not in seen:
            seen.add(text)
            lines.append(f"  event {text}")
    return "\n".join(lines)
