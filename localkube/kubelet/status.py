"""Pod status as Kubernetes computes it: pure functions, no I/O.

The kubelet keeps one ContainerRecord per container; `build_pod_status` turns
the pod object plus those records into the `status` the kubelet PATCHes
(phase by the rules of the real kubelet's getPhase, the four standard
conditions with stable lastTransitionTime, container statuses, IPs).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from enum import StrEnum


class ContainerState(StrEnum):
    WAITING = "waiting"
    RUNNING = "running"
    TERMINATED = "terminated"


class PodPhase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class RestartPolicy(StrEnum):
    ALWAYS = "Always"
    ON_FAILURE = "OnFailure"
    NEVER = "Never"


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class ContainerRecord:
    """What the kubelet knows about one container (init or regular)."""

    name: str
    image: str
    is_init: bool = False
    state: ContainerState = ContainerState.WAITING
    waiting_reason: str = "ContainerCreating"
    waiting_message: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    reason: str | None = None
    message: str | None = None
    restart_count: int = 0
    ready: bool = False
    container_id: str | None = None
    last_terminated: dict | None = None
    extra: dict = field(default_factory=dict)

    def terminated_view(self) -> dict:
        view = {
            "exitCode": self.exit_code,
            "reason": self.reason,
            "startedAt": self.started_at,
            "finishedAt": self.finished_at,
            "containerID": self.container_id,
        }
        if self.signal:
            view["signal"] = self.signal
        if self.message:
            view["message"] = self.message
        return {k: v for k, v in view.items() if v is not None}

    def succeeded(self) -> bool:
        return self.state is ContainerState.TERMINATED and self.exit_code == 0


def build_container_records(
    init_specs: list[dict], main_specs: list[dict]
) -> dict[str, ContainerRecord]:
    """A fresh record per container, by name: all waiting, regular ones behind the init ones."""
    main_wait = "PodInitializing" if init_specs else "ContainerCreating"
    records: dict[str, ContainerRecord] = {}
    for c in init_specs:
        records[c["name"]] = ContainerRecord(
            c["name"], c.get("image", ""), is_init=True, waiting_reason="PodInitializing"
        )
    for c in main_specs:
        records[c["name"]] = ContainerRecord(
            c["name"], c.get("image", ""), waiting_reason=main_wait
        )
    return records


def build_container_status(record: ContainerRecord) -> dict:
    if record.state is ContainerState.RUNNING:
        state = {"running": {"startedAt": record.started_at}}
    elif record.state is ContainerState.TERMINATED:
        state = {"terminated": record.terminated_view()}
    else:
        waiting = {"reason": record.waiting_reason}
        if record.waiting_message:
            waiting["message"] = record.waiting_message
        state = {"waiting": waiting}
    status = {
        "name": record.name,
        "state": state,
        "lastState": {"terminated": record.last_terminated} if record.last_terminated else {},
        "ready": record.ready,
        "restartCount": record.restart_count,
        "image": record.image,
        "imageID": f"localkube://{record.image}",
        "started": record.state is ContainerState.RUNNING,
    }
    if record.container_id:
        status["containerID"] = record.container_id
    return status


def compute_phase(pod: dict, init: list[ContainerRecord], main: list[ContainerRecord]) -> PodPhase:
    """The phase by the rules of the kubelet's getPhase."""
    policy = RestartPolicy((pod.get("spec") or {}).get("restartPolicy") or "Always")
    for record in init:
        if record.succeeded():
            continue
        failed = record.state is ContainerState.TERMINATED or record.last_terminated is not None
        if failed and policy is RestartPolicy.NEVER and record.state is ContainerState.TERMINATED:
            return PodPhase.FAILED
        return PodPhase.PENDING
    running = waiting = stopped = succeeded = 0
    for record in main:
        if record.state is ContainerState.RUNNING:
            running += 1
        elif record.state is ContainerState.TERMINATED:
            stopped += 1
            succeeded += record.exit_code == 0
        elif record.last_terminated is not None:
            stopped += 1
            succeeded += record.last_terminated.get("exitCode") == 0
        else:
            waiting += 1
    if waiting:
        return PodPhase.PENDING
    if running:
        return PodPhase.RUNNING
    if stopped:
        if policy is RestartPolicy.ALWAYS:
            return PodPhase.RUNNING
        if stopped == succeeded:
            return PodPhase.SUCCEEDED
        if policy is RestartPolicy.NEVER:
            return PodPhase.FAILED
        return PodPhase.RUNNING
    return PodPhase.PENDING


def make_condition(
    kind: str,
    ok: bool,
    previous: dict[str, dict],
    reason: str | None = None,
    message: str | None = None,
) -> dict:
    status = "True" if ok else "False"
    before = previous.get(kind)
    since = (
        before["lastTransitionTime"]
        if before and before.get("status") == status and before.get("lastTransitionTime")
        else now_rfc3339()
    )
    cond = {"type": kind, "status": status, "lastProbeTime": None, "lastTransitionTime": since}
    if not ok and reason:
        cond["reason"] = reason
        if message:
            cond["message"] = message
    return cond


def build_conditions(
    pod: dict, phase: PodPhase, init: list[ContainerRecord], main: list[ContainerRecord]
) -> list[dict]:
    previous = {c.get("type"): c for c in ((pod.get("status") or {}).get("conditions") or [])}
    unfinished_init = [r.name for r in init if not r.succeeded()]
    unready = [r.name for r in main if not r.ready]
    terminal = phase in (PodPhase.SUCCEEDED, PodPhase.FAILED)
    ready_reason = "PodCompleted" if terminal else "ContainersNotReady"
    ready_message = None if terminal else f"containers with unready status: [{' '.join(unready)}]"
    init_reason = "PodCompleted" if terminal and not unfinished_init else "ContainersNotInitialized"
    conditions = [
        make_condition(
            "Initialized",
            not unfinished_init,
            previous,
            init_reason,
            f"containers with incomplete status: [{' '.join(unfinished_init)}]",
        ),
        make_condition(
            "Ready", not unready and not terminal, previous, ready_reason, ready_message
        ),
        make_condition(
            "ContainersReady", not unready and not terminal, previous, ready_reason, ready_message
        ),
    ]
    scheduled = previous.get("PodScheduled") or {
        "type": "PodScheduled",
        "status": "True",
        "lastProbeTime": None,
        "lastTransitionTime": now_rfc3339(),
    }
    return [conditions[0], conditions[1], conditions[2], scheduled]


@dataclass
class PodRuntimeFacts:
    """Pod-level facts that are not per container."""

    host_ip: str
    pod_ip: str | None = None
    start_time: str | None = None
    failure_reason: str | None = None
    failure_message: str | None = None


def build_pod_status(
    pod: dict, init: list[ContainerRecord], main: list[ContainerRecord], facts: PodRuntimeFacts
) -> dict:
    """The whole `status` of the pod (sent as a merge patch, so lists are complete)."""
    phase = PodPhase.FAILED if facts.failure_reason else compute_phase(pod, init, main)
    status: dict = {
        "phase": phase.value,
        "conditions": build_conditions(pod, phase, init, main),
        "hostIP": facts.host_ip,
        "hostIPs": [{"ip": facts.host_ip}],
        "containerStatuses": [build_container_status(r) for r in main],
        "qosClass": compute_qos_class(pod),
    }
    if init:
        status["initContainerStatuses"] = [build_container_status(r) for r in init]
    if facts.pod_ip:
        status["podIP"] = facts.pod_ip
        status["podIPs"] = [{"ip": facts.pod_ip}]
    if facts.start_time:
        status["startTime"] = facts.start_time
    if facts.failure_reason:
        status["reason"] = facts.failure_reason
        status["message"] = facts.failure_message or facts.failure_reason
    return status


def compute_qos_class(pod: dict) -> str:
    containers = (pod.get("spec") or {}).get("containers") or []
    any_set = False
    guaranteed = bool(containers)
    for c in containers:
        res = c.get("resources") or {}
        limits, requests = res.get("limits") or {}, res.get("requests") or {}
        any_set = any_set or bool(limits) or bool(requests)
        for key in ("cpu", "memory"):
            if key not in limits or requests.get(key, limits[key]) != limits[key]:
                guaranteed = False
    if guaranteed:
        return "Guaranteed"
    return "Burstable" if any_set else "BestEffort"
