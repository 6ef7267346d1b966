"""A replica as its pod reports it, and the trigger's event that carries them all.

`train` pushes the replicas (its `replicas` XCom), the trigger fires the event, the
restart verdict and the TFJob tab read them. Only the request's fields are imported, so
the restart verdict (which the request's model imports) can use these records.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from runtime.protocol import EXIT_UPLOAD_FAILED
from tfjob.jsontypes import JsonObject
from tfjob.request.fields import Role

# A JSON object as Airflow stores it.
Payload = JsonObject


class PodPhase(enum.StrEnum):
    """The pod phases of Kubernetes, plus GONE for a pod that no longer exists."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"
    GONE = "Gone"


class TrainingState(enum.StrEnum):
    """Where the training of a run stands.

    `judge_training` answers RUNNING, SUCCEEDED or FAILED; DEADLINE is the
    trigger's: the run's deadline came while it was still RUNNING (or while the
    Kubernetes API failed).
    """

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DEADLINE = "deadline"


def read_role(text: object) -> Role | None:
    """The role a pod's label (or a payload) names; None for none or one `Role` lacks."""
    try:
        return Role(text)
    except ValueError:
        return None


@dataclass(frozen=True)
class ReplicaStatus:
    """One replica as its pod reports it."""

    role: Role | None  # None: a pod without a role label (a name we expected, never seen)
    index: int
    pod: str
    phase: PodPhase
    ip: str | None = None
    node: str | None = None
    exit_code: int | None = None
    reason: str | None = None
    message: str | None = None
    init_exit_code: int | None = None
    started_at: str | None = None
    finished_at: str | None = None
    owns_model: bool = False  # the pod has the keeper: the model owner
    # The pod's own status.reason (Evicted, NodeLost, DeadlineExceeded), kept even when
    # the container's reason (Error, OOMKilled) is `reason`: the restart verdict needs both.
    pod_reason: str | None = None
    deleted: bool = False  # metadata.deletionTimestamp is set: someone deleted the pod

    @property
    def replica_id(self) -> str:
        """`role-index`, e.g. `worker-1`."""
        return f"{self.role.value if self.role else ''}-{self.index}"

    @property
    def has_trained(self) -> bool:
        """Its program exited 0; for the model owner, also when only the upload failed.

        The bootstrap exits 74 when the program succeeded but the model could
        not be uploaded; the keeper holds the model and `archive` copies it out.
        """
        return self.exit_code == 0 or (self.owns_model and self.exit_code == EXIT_UPLOAD_FAILED)

    @property
    def has_failed(self) -> bool:
        """Its pod failed (or its phase is unknown), or its program exited non-zero."""
        failed_phase = self.phase in (PodPhase.FAILED, PodPhase.UNKNOWN)
        return failed_phase or self.exit_code not in (None, 0)

    def to_payload(self) -> Payload:
        return {
            "role": self.role.value if self.role else "",
            "index": self.index,
            "pod": self.pod,
            "phase": self.phase.value,
            "ip": self.ip,
            "node": self.node,
            "exit_code": self.exit_code,
            "reason": self.reason,
            "message": self.message,
            "init_exit_code": self.init_exit_code,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "owns_model": self.owns_model,
            "pod_reason": self.pod_reason,
            "deleted": self.deleted,
        }

    @classmethod
    def from_payload(cls, payload: Mapping[str, object]) -> ReplicaStatus:
        """The inverse of `to_payload`; a field an earlier writer left out takes its default."""
        try:
            phase = PodPhase(payload.get("phase", PodPhase.UNKNOWN.value))
        except ValueError:
            phase = PodPhase.UNKNOWN
        return cls(
            role=read_role(payload.get("role")),
            index=int(payload.get("index") or 0),
            pod=str(payload.get("pod") or ""),
            phase=phase,
            ip=payload.get("ip"),
            node=payload.get("node"),
            exit_code=payload.get("exit_code"),
            reason=payload.get("reason"),
            message=payload.get("message"),
            init_exit_code=payload.get("init_exit_code"),
            started_at=payload.get("started_at"),
            finished_at=payload.get("finished_at"),
            owns_model=bool(payload.get("owns_model", False)),
            pod_reason=payload.get("pod_reason"),
            deleted=bool(payload.get("deleted", False)),
        )


def replicas_to_payload(replicas: Iterable[ReplicaStatus]) -> list[Payload]:
    """`train`'s `replicas` XCom: every replica as last seen."""
    return [replica.to_payload() for replica in replicas]


def replicas_from_payload(payload: Iterable[Mapping[str, object]] | None) -> list[ReplicaStatus]:
    return [ReplicaStatus.from_payload(item) for item in payload or ()]


@dataclass(frozen=True)
class TrainingEvent:
    """What the trigger fires once training is decided, and what `train` finishes on.

    It crosses the triggerer's database as a JSON payload; it carries no log text.
    """

    state: TrainingState  # SUCCEEDED, FAILED or DEADLINE: never RUNNING
    replicas: tuple[ReplicaStatus, ...] = ()  # every expected replica, as last seen
    failed: ReplicaStatus | None = None  # the replica that failed the run
    deciding: tuple[str, ...] = ()  # the replica ids whose exit 0 makes success
    streamed: dict[str, int] = field(default_factory=dict)  # lines logged live, per replica id
    api_error: str | None = None  # the Kubernetes API's failure when the deadline came

    def to_payload(self) -> Payload:
        payload: Payload = {
            "state": self.state.value,
            "replicas": replicas_to_payload(self.replicas),
            "failed": self.failed.to_payload() if self.failed is not None else None,
            "deciding": list(self.deciding),
            "streamed": dict(self.streamed),
        }
        if self.api_error is not None:
            payload["api_error"] = self.api_error
        return payload

    @classmethod
    def from_payload(cls, payload: Mapping[str, object]) -> TrainingEvent:
        state = TrainingState(payload["state"])
        if state is TrainingState.RUNNING:
            raise ValueError(
                "training event: state 'running' given; an event is fired only "
                "once training is decided (succeeded, failed or deadline)"
            )
        failed = payload.get("failed")
        return cls(
            state=state,
            replicas=tuple(replicas_from_payload(payload.get("replicas"))),
            failed=ReplicaStatus.from_payload(failed) if failed is not None else None,
            deciding=tuple(payload.get("deciding") or ()),
            streamed=dict(payload.get("streamed") or {}),
            api_error=payload.get("api_error"),
        )
