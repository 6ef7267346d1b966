"""Whether a failed attempt of a run may be restarted, and the record of each attempt.

A run's unit of restart is the gang: TensorFlow's ClusterSpec names replicas by
IP, so one replaced pod cannot rejoin, and the whole gang starts again. This
module holds the pure part of that: the request's policy (`max_restarts`,
`restart_on`), what kind of failure a failed replica's pod reports, the verdict
RESTART or FAIL with a sentence a person can read, the typed record of an
attempt for run.json, and the final message naming every attempt's cause. No
Airflow, no client, no I/O: the train step (operators/train.py, through
operators/restart.py) feeds it the failed replica that
`operators/replicas.judge_training` names.

The rules (docs/pipeline.md, "Restart policy"):

- Infrastructure losses (the pod deleted by someone else, evicted or
  preempted, its node lost or shut down) are restartable under every
  `restart_on`: no program decided them.
- `retryable` follows Kubeflow TFJob's `ExitCode` policy: exit codes 128-255
  (128 + n: killed by signal n, e.g. 130 SIGINT, 137 SIGKILL, 143 SIGTERM)
  and OOMKilled are retryable; 1-127 are the program's own, permanent,
  verdict; a failure with neither an exit code nor a reason we know is
  permanent.
- `any_failure` restarts every failure.
- A list of exit codes restarts exactly those exit codes (and the
  infrastructure losses above); OOMKilled counts as its exit code, 137.
- A replica stopped by the run's own deadline (`DeadlineExceeded`) is never
  restarted: a new gang would only run past the same limit.
- At most `max_restarts` restarts: attempt n may be followed by attempt n+1
  only while n <= max_restarts; `max_restarts: 0` (the default) never restarts.
"""

from __future__ import annotations

import signal
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from tfjob.records.replicas import PodPhase, ReplicaStatus

DEFAULT_MAX_RESTARTS = 0
MAX_RESTARTS = 10
# Exit codes a failed program can report; 0 is success, never a failure to restart.
MIN_EXIT_CODE = 1
MAX_EXIT_CODE = 255
# 128 + n: killed by signal n (the shell's and Kubernetes' convention).
SIGNAL_EXIT_BASE = 128


class RestartOn(StrEnum):
    """Which failures a restart policy restarts, besides an explicit list of exit codes."""

    RETRYABLE = "retryable"
    ANY_FAILURE = "any_failure"


class FailureKind(StrEnum):
    """What ended a failed replica, as its pod tells."""

    DELETED = "deleted"  # the pod was deleted by someone else (a drain, a person)
    EVICTED = "evicted"  # evicted by the kubelet or the Eviction API, or preempted
    NODE_LOST = "node_lost"  # its node stopped answering or shut down
    DEADLINE_EXCEEDED = "deadline_exceeded"  # the run's active_deadline passed
    OOM_KILLED = "oom_killed"  # over its memory limit
    SIGNALED = "signaled"  # exit code 128-255: killed by signal (code - 128), by convention
    EXITED = "exited"  # exit code 1-127: the program's own failure
    UNKNOWN = "unknown"  # no exit code and no reason we know


# Losses no program decided: restartable under every restart_on.
INFRASTRUCTURE_KINDS = frozenset({FailureKind.DELETED, FailureKind.EVICTED, FailureKind.NODE_LOST})

# Pod reasons (status.reason, or a DisruptionTarget condition's reason) by kind.
NODE_LOST_REASONS = frozenset(
    {"NodeLost", "DeletionByTaintManager", "NodeShutdown", "Terminated"}
)  # kubelet's graceful node shutdown says Terminated
EVICTION_REASONS = frozenset(
    {"Evicted", "EvictionByEvictionAPI", "PreemptionByScheduler", "TerminationByKubelet"}
)
# "PodGone" is operators/replicas.py's reason for a pod that no longer exists.
DELETION_REASONS = frozenset({"Deleted", "DeletionByPodGC", "PodGone"})
DEADLINE_REASONS = frozenset({"DeadlineExceeded"})
OOM_REASONS = frozenset({"OOMKilled"})
OOM_EXIT_CODE = 137


class Decision(StrEnum):
    RESTART = "restart"
    FAIL = "fail"


def find_exit_code_problem(codes: Sequence[object]) -> tuple[int | None, str] | None:
    """(index, what is allowed) of the first bad item of a `restart_on` list; None when fine.

    The index is None when the list itself is wrong (empty). The one rule for
    both the request model (which names `restart_on[index]`) and `RestartPolicy`.
    """
    if not codes:
        return None, "a non-empty list of exit codes is allowed, e.g. [137, 143]"
    seen: dict[int, int] = {}
    for index, code in enumerate(codes):
        if isinstance(code, bool) or not isinstance(code, int):
            return index, (
                f"exit codes are whole numbers from {MIN_EXIT_CODE} to "
                f"{MAX_EXIT_CODE} (unquoted in YAML)"
            )
        if not MIN_EXIT_CODE <= code <= MAX_EXIT_CODE:
            return index, (
                f"exit codes from {MIN_EXIT_CODE} to {MAX_EXIT_CODE} are allowed (0 is success)"
            )
        if code in seen:
            return index, f"each exit code once; {code} is already at [{seen[code]}]"
        seen[code] = index
    return None


def check_exit_codes(codes: Iterable[int]) -> tuple[int, ...]:
    """`codes` as a tuple; ValueError naming the first bad item (find_exit_code_problem)."""
    result = tuple(codes)
    problem = find_exit_code_problem(result)
    if problem is not None:
        index, allowed = problem
        where, given = (
            ("restart_on", list(result))
            if index is None
            else (f"restart_on[{index}]", result[index])
        )
        raise ValueError(f"{where}: {given!r} given; {allowed}")
    return result


class DeclaresRestarts(Protocol):
    """What `RestartPolicy.of` reads: a request (tfjob/request/model.py imports this module)."""

    @property
    def max_restarts(self) -> int: ...

    @property
    def restart_on(self) -> RestartOn | str | Sequence[int]: ...


@dataclass(frozen=True)
class RestartPolicy:
    """`max_restarts` and `restart_on` of a request (`RestartPolicy.of(request)`)."""

    max_restarts: int = DEFAULT_MAX_RESTARTS
    restart_on: RestartOn | tuple[int, ...] = RestartOn.RETRYABLE

    def __post_init__(self) -> None:
        # The request model checks these for users; this guards other callers.
        if (
            isinstance(self.max_restarts, bool)
            or not isinstance(self.max_restarts, int)
            or not 0 <= self.max_restarts <= MAX_RESTARTS
        ):
            raise ValueError(
                f"max_restarts: {self.max_restarts!r} given; allowed: 0 to {MAX_RESTARTS}"
            )
        if isinstance(self.restart_on, str):
            object.__setattr__(self, "restart_on", RestartOn(self.restart_on))
        else:
            object.__setattr__(self, "restart_on", check_exit_codes(self.restart_on))

    @classmethod
    def of(cls, request: DeclaresRestarts) -> RestartPolicy:
        """The policy of a request (anything with `max_restarts` and `restart_on`)."""
        return cls(request.max_restarts, request.restart_on)

    @property
    def max_attempts(self) -> int:
        return self.max_restarts + 1

    def describe_restart_on(self) -> str:
        """`retryable`, `any_failure` or `[137, 143]`, as the request writes it."""
        if isinstance(self.restart_on, RestartOn):
            return self.restart_on.value
        return "[" + ", ".join(str(code) for code in self.restart_on) + "]"


@dataclass(frozen=True)
class ReplicaFailure:
    """The facts of the failed replica that a verdict needs.

    `reason` is what `operators/replicas.py` reports (the container's
    terminated reason, else the pod's); `pod_reason` is the pod's own
    `status.reason` (Evicted, NodeLost, DeadlineExceeded) when the container
    gave a reason of its own; `deleted` says the pod was deleted
    (`metadata.deletionTimestamp` set, or gone).
    """

    replica: str  # "worker-1"
    pod: str = ""
    exit_code: int | None = None
    reason: str | None = None
    message: str | None = None
    pod_reason: str | None = None
    node: str | None = None
    deleted: bool = False

    @classmethod
    def from_replica(
        cls, replica: ReplicaStatus, *, deleted: bool = False, pod_reason: str | None = None
    ) -> ReplicaFailure:
        """From a replica's status (its pod's, or the trigger's event's).

        `pod_reason` and `deleted` are the replica's own unless the arguments say
        more. A replica whose phase is Gone (its pod vanished) counts as deleted.
        """
        return cls(
            replica=replica.replica_id,
            pod=replica.pod,
            exit_code=replica.exit_code,
            reason=replica.reason,
            message=replica.message,
            pod_reason=pod_reason or replica.pod_reason,
            node=replica.node,
            deleted=deleted or replica.deleted or replica.phase is PodPhase.GONE,
        )

    @property
    def kind(self) -> FailureKind:
        return classify_failure(self)


def classify_failure(failure: ReplicaFailure) -> FailureKind:
    """The kind of failure, most specific first: a lost node explains a deletion."""
    reasons = {failure.reason, failure.pod_reason} - {None}
    if reasons & NODE_LOST_REASONS:
        return FailureKind.NODE_LOST
    if reasons & EVICTION_REASONS:
        return FailureKind.EVICTED
    if reasons & DEADLINE_REASONS:
        return FailureKind.DEADLINE_EXCEEDED
    if failure.deleted or reasons & DELETION_REASONS:
        return FailureKind.DELETED
    if reasons & OOM_REASONS:
        return FailureKind.OOM_KILLED
    code = failure.exit_code
    if code is not None and SIGNAL_EXIT_BASE <= code <= MAX_EXIT_CODE:
        return FailureKind.SIGNALED
    if code is not None and MIN_EXIT_CODE <= code < SIGNAL_EXIT_BASE:
        return FailureKind.EXITED
    return FailureKind.UNKNOWN


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _reason_among(failure: ReplicaFailure, reasons: frozenset[str]) -> str | None:
    """The pod's or the container's reason that is one of `reasons`, the pod's first."""
    return next((r for r in (failure.pod_reason, failure.reason) if r in reasons), None)


def describe_failure(failure: ReplicaFailure) -> str:
    """One clause: what happened to the replica, e.g. `worker-1 was deleted (exit code 143)`."""
    kind = failure.kind
    who = failure.replica
    code = failure.exit_code
    exit_note = f"exit code {code}" if code is not None else ""
    if kind is FailureKind.DELETED:
        text, notes = f"{who} was deleted", [exit_note]
    elif kind is FailureKind.EVICTED:
        reason = _reason_among(failure, EVICTION_REASONS)
        text, notes = f"{who} was evicted", [reason if reason != "Evicted" else "", exit_note]
    elif kind is FailureKind.NODE_LOST:
        text = f"{who} lost its node {failure.node}" if failure.node else f"{who} lost its node"
        notes = [_reason_among(failure, NODE_LOST_REASONS) or "", exit_note]
    elif kind is FailureKind.DEADLINE_EXCEEDED:
        text, notes = f"{who} ran past the run's active_deadline", ["DeadlineExceeded", exit_note]
    elif kind is FailureKind.OOM_KILLED:
        text, notes = f"{who} ran out of memory", ["OOMKilled", exit_note]
    elif kind is FailureKind.SIGNALED and code is not None and code != SIGNAL_EXIT_BASE:
        text, notes = f"{who} was killed by {_signal_name(code - SIGNAL_EXIT_BASE)}", [exit_note]
    elif kind in (FailureKind.SIGNALED, FailureKind.EXITED):
        text, notes = f"{who} exited {code}", []
    else:
        shown = next((r for r in (failure.pod_reason, failure.reason) if r and r != "Error"), "")
        text, notes = f"{who} failed", [shown, exit_note or "no exit code"]
    shown_notes = [note for note in notes if note]
    return f"{text} ({', '.join(shown_notes)})" if shown_notes else text


@dataclass(frozen=True)
class RestartVerdict:
    """RESTART or FAIL, the failure's kind, and the sentence saying why."""

    decision: Decision
    kind: FailureKind
    cause: str  # what happened: "worker-1 was deleted (exit code 143)"
    why: str  # why this decision: "restarting as attempt 2 of 3"
    next_attempt: int | None = None  # the attempt to start when RESTART

    @property
    def reason(self) -> str:
        """e.g. `worker-1 exited 1: a permanent failure under restart_on=retryable`."""
        joiner = "; " if self.decision is Decision.RESTART else ": "
        return f"{self.cause}{joiner}{self.why}"


def _why_not_restartable(
    policy: RestartPolicy, failure: ReplicaFailure, kind: FailureKind
) -> str | None:
    """Why `restart_on` refuses this failure; None when it allows a restart."""
    if kind is FailureKind.DEADLINE_EXCEEDED:
        return "a run past its active_deadline is never restarted"
    if kind in INFRASTRUCTURE_KINDS or policy.restart_on is RestartOn.ANY_FAILURE:
        return None
    if policy.restart_on is RestartOn.RETRYABLE:
        if kind in (FailureKind.SIGNALED, FailureKind.OOM_KILLED):
            return None
        return "a permanent failure under restart_on=retryable"
    code = (
        OOM_EXIT_CODE
        if kind is FailureKind.OOM_KILLED and failure.exit_code is None
        else failure.exit_code
    )
    listed = policy.describe_restart_on()
    if code is None:
        return f"no exit code, and restart_on={listed} names exit codes only"
    if code in policy.restart_on:
        return None
    return f"exit code {code} is not in restart_on={listed}"


def judge_restart(
    policy: RestartPolicy, failed_attempt: int, failure: ReplicaFailure
) -> RestartVerdict:
    """RESTART or FAIL after attempt number `failed_attempt` (1 for the first) failed.

    RESTART only when `restart_on` allows this failure and a restart is left:
    `failed_attempt <= max_restarts`.
    """
    if (
        isinstance(failed_attempt, bool)
        or not isinstance(failed_attempt, int)
        or failed_attempt < 1
    ):
        raise ValueError(f"failed_attempt: {failed_attempt!r} given; allowed: 1 or more")
    kind = failure.kind
    cause = describe_failure(failure)

    def fail(why: str) -> RestartVerdict:
        return RestartVerdict(Decision.FAIL, kind, cause, why)

    if policy.max_restarts == 0:
        return fail("not restarted: max_restarts is 0")
    refused = _why_not_restartable(policy, failure, kind)
    if refused:
        return fail(refused)
    if failed_attempt > policy.max_restarts:
        return fail(
            f"no restarts left: max_restarts={policy.max_restarts}, and this was "
            f"attempt {failed_attempt} of {policy.max_attempts}"
        )
    next_attempt = failed_attempt + 1
    return RestartVerdict(
        Decision.RESTART,
        kind,
        cause,
        f"restarting as attempt {next_attempt} of {policy.max_attempts}",
        next_attempt,
    )


__all__ = [
    "DeclaresRestarts",
    "Decision",
    "FailureKind",
    "ReplicaFailure",
    "RestartOn",
    "RestartPolicy",
    "RestartVerdict",
    "classify_failure",
    "describe_failure",
    "judge_restart",
]
