"""Where a PodWorker is in its life, why it stops, and how one container run ended.

A worker's life runs one way: RUNNING (containers start and restart) →
STOPPING (no container starts any more; processes get preStop, SIGTERM, then
SIGKILL) → RELEASED (every process is gone; network, port forwards and cgroups
are released) → REMOVED (the pod's directory is gone; nothing more is written
on the node). A pod whose containers all end on their own goes from RUNNING
straight to RELEASED; one that recovery.py settles without running it goes to
REMOVED. The StopReason says why the worker left RUNNING; the two
detaching reasons also mean that the worker no longer answers for the pod
object: it sends no status, gives no grace period and does not DELETE the pod.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from enum import IntEnum, StrEnum


class WorkerPhase(IntEnum):
    """A PodWorker's phase; ordered, and a worker only ever moves forward."""

    RUNNING = 1
    STOPPING = 2
    RELEASED = 3
    REMOVED = 4


class StopReason(StrEnum):
    """Why a PodWorker stops its pod."""

    COMPLETED = "completed"  # every container ended and none restarts
    DELETED = "deleted"  # the pod's deletion was requested: a graceful stop
    DEADLINE_EXCEEDED = "deadline-exceeded"  # spec.activeDeadlineSeconds passed
    NODE_RESTART = "node-restart"  # a restarted kubelet could not re-adopt the pod
    FAILED = "failed"  # the worker itself failed
    POD_GONE = "pod-gone"  # the pod left the API (force delete, or gone before we started)
    NODE_SHUTDOWN = "node-shutdown"  # the kubelet stops; the next one reports the pod

    @property
    def detaches(self) -> bool:
        """Whether the worker stops answering for the pod object (no status, no DELETE)."""
        return self in (StopReason.POD_GONE, StopReason.NODE_SHUTDOWN)


def choose_stop_reason(current: StopReason | None, new: StopReason) -> StopReason:
    """The first reason stays, except that a detaching reason replaces one that does not
    (a pod force-deleted while its deadline stop runs is gone all the same)."""
    if current is None or (new.detaches and not current.detaches):
        return new
    return current


class WorkerLife:
    """One worker's phase and stop reason; `stopping` is what its waits wake on."""

    def __init__(self) -> None:
        self.phase = WorkerPhase.RUNNING
        self.stop_reason: StopReason | None = None
        self.stopping = asyncio.Event()  # set when the worker leaves RUNNING

    def advance(self, phase: WorkerPhase, reason: StopReason | None = None) -> bool:
        """Move to `phase` (never back) noting `reason`; True when the worker was RUNNING."""
        if reason is not None:
            self.stop_reason = choose_stop_reason(self.stop_reason, reason)
        was_running = self.phase is WorkerPhase.RUNNING
        self.phase = max(self.phase, phase)
        if self.phase is not WorkerPhase.RUNNING:
            self.stopping.set()
        return was_running

    def detach(self, reason: StopReason) -> None:
        """Note a detaching reason now; the phase moves when the worker stops its containers."""
        self.stop_reason = choose_stop_reason(self.stop_reason, reason)

    def is_stopping(self) -> bool:
        """No container starts any more."""
        return self.phase is not WorkerPhase.RUNNING

    @property
    def detached(self) -> bool:
        """The worker no longer answers for the pod object: no status, no grace, no DELETE."""
        return self.stop_reason is not None and self.stop_reason.detaches

    async def wait_stopping(self, seconds: float) -> bool:
        """Sleep, waking early when the worker stops; True when it is stopping."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)
        return self.is_stopping()


@dataclass(frozen=True)
class RunResult:
    """How one run of a container ended, as the container loops need it."""

    exit_code: int
    # The run was never created (a config error that may clear, such as a missing Secret):
    # try again without counting a restart or backing off.
    retry: bool = False
