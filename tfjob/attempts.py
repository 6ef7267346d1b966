"""The record of each attempt of a run, as run.json lists it, and the run's final message.

An attempt is one gang, from its launch to its end; restart_policy.py judges whether a
failed one is followed by another, and this module keeps what each attempt was and how
it ended, round-trips it through XCom and run.json (`to_payload`/`from_payload`, as the
records of tfjob/records/ do) and words the final failure naming every attempt's cause
(`describe_run_failure`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from tfjob.jsontypes import JsonObject
from tfjob.restart_policy import Decision, FailureKind, ReplicaFailure, RestartVerdict


class AttemptOutcome(StrEnum):
    """How an attempt ended; RUNNING while it has not."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    RESTARTED = "restarted"  # failed, and the next attempt was started
    FAILED = "failed"  # failed, and the run failed with it


@dataclass(frozen=True)
class Attempt:
    """One gang of a run, from its launch to its end, as run.json lists it."""

    number: int  # 1 for the first gang
    started: datetime | None = None
    ended: datetime | None = None
    outcome: AttemptOutcome = AttemptOutcome.RUNNING
    failed_replica: str | None = None  # "worker-1"
    kind: FailureKind | None = None
    reason: str | None = None  # the cause, as describe_failure words it
    exit_code: int | None = None
    restored_checkpoint_step: int | None = None  # None: started from scratch

    def __post_init__(self) -> None:
        if isinstance(self.number, bool) or not isinstance(self.number, int) or self.number < 1:
            raise ValueError(f"attempt number: {self.number!r} given; allowed: 1 or more")
        object.__setattr__(self, "outcome", AttemptOutcome(self.outcome))
        if self.kind is not None:
            object.__setattr__(self, "kind", FailureKind(self.kind))

    @classmethod
    def ended_by(
        cls,
        number: int,
        verdict: RestartVerdict,
        failure: ReplicaFailure,
        *,
        started: datetime | None = None,
        ended: datetime | None = None,
        restored_checkpoint_step: int | None = None,
    ) -> Attempt:
        """The record of an attempt that `verdict` judged."""
        outcome = (
            AttemptOutcome.RESTARTED
            if verdict.decision is Decision.RESTART
            else AttemptOutcome.FAILED
        )
        return cls(
            number,
            started,
            ended,
            outcome,
            failure.replica,
            verdict.kind,
            verdict.cause,
            failure.exit_code,
            restored_checkpoint_step,
        )

    def to_payload(self) -> JsonObject:
        """JSON-ready: times as ISO 8601 text, enums as their values."""
        return {
            "number": self.number,
            "started": self.started.isoformat() if self.started else None,
            "ended": self.ended.isoformat() if self.ended else None,
            "outcome": self.outcome.value,
            "failed_replica": self.failed_replica,
            "kind": self.kind.value if self.kind else None,
            "reason": self.reason,
            "exit_code": self.exit_code,
            "restored_checkpoint_step": self.restored_checkpoint_step,
        }

    @classmethod
    def from_payload(cls, data: Mapping[str, object]) -> Attempt:
        """The inverse of `to_payload`; keys it does not know are ignored (newer writers)."""
        if not isinstance(data, Mapping) or "number" not in data:
            raise ValueError(f"attempt: {data!r} given; a mapping with at least a number")

        def when(key: str) -> datetime | None:
            value = data.get(key)
            try:
                return None if value is None else datetime.fromisoformat(value)
            except (TypeError, ValueError):
                raise ValueError(
                    f"attempt.{key}: {value!r} given; an ISO 8601 time or null"
                ) from None

        try:
            return cls(
                number=data["number"],
                started=when("started"),
                ended=when("ended"),
                outcome=AttemptOutcome(data.get("outcome", AttemptOutcome.RUNNING.value)),
                failed_replica=data.get("failed_replica"),
                kind=None if data.get("kind") is None else FailureKind(data["kind"]),
                reason=data.get("reason"),
                exit_code=data.get("exit_code"),
                restored_checkpoint_step=data.get("restored_checkpoint_step"),
            )
        except ValueError as exc:
            raise ValueError(f"attempt {data.get('number')!r}: {exc}") from None


def read_attempt_outcome(data: object) -> AttemptOutcome | None:
    """How a listed attempt ended, read leniently: None when it names no outcome we know.

    For readers that only count outcomes (the TFJob tab's restarts) and serve whatever a
    record holds, partial or not an attempt at all, where `Attempt.from_payload` refuses
    it; an attempt without an outcome is RUNNING, as there.
    """
    if not isinstance(data, Mapping):
        return None
    try:
        return AttemptOutcome(data.get("outcome", AttemptOutcome.RUNNING.value))
    except ValueError:
        return None


def describe_run_failure(attempts: Sequence[Attempt], verdict: RestartVerdict | None = None) -> str:
    """The final failure message: every attempt's cause, then why the last one ended the run.

    e.g. `training failed after 2 attempts: attempt 1: worker-1 was deleted
    (exit code 143); attempt 2: worker-1 exited 1 (not restarted: a permanent
    failure under restart_on=retryable)`.
    """
    if not attempts:
        raise ValueError("describe_run_failure: no attempts given; at least one")
    causes = "; ".join(
        f"attempt {attempt.number}: {attempt.reason or 'failed'}" for attempt in attempts
    )
    head = (
        "training failed"
        if len(attempts) == 1
        else f"training failed after {len(attempts)} attempts"
    )
    text = f"{head}: {causes}"
    if verdict is not None and verdict.decision is Decision.FAIL:
        why = (
            verdict.why
            if verdict.why.startswith("not restarted")
            else f"not restarted: {verdict.why}"
        )
        text += f" ({why})"
    return text
