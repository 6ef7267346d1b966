"""A pod worker's life: phases only move forward, and why it stops decides what it owes the API.

Unit tests of localkube/kubelet/lifecycle.py; the sequences they guard run end to end in
test_localkube_kubelet_pods.py (graceful delete, force delete, kubelet crash and restart) and
test_localkube_node_stop.py (kubelet shutdown).
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from localkube.kubelet.lifecycle import (
    RunResult,
    StopReason,
    WorkerLife,
    WorkerPhase,
    choose_stop_reason,
)


def test_a_worker_starts_running_and_only_moves_forward():
    life = WorkerLife()
    assert life.phase is WorkerPhase.RUNNING and not life.is_stopping()
    assert life.advance(WorkerPhase.RELEASED) is True  # it was running
    assert life.advance(WorkerPhase.STOPPING) is False
    assert life.phase is WorkerPhase.RELEASED and life.is_stopping()
    assert life.stopping.is_set()


def test_the_first_reason_stays_unless_a_detaching_one_comes():
    assert choose_stop_reason(None, StopReason.DELETED) is StopReason.DELETED
    assert choose_stop_reason(StopReason.DEADLINE_EXCEEDED, StopReason.DELETED) is (
        StopReason.DEADLINE_EXCEEDED
    )
    assert choose_stop_reason(StopReason.DEADLINE_EXCEEDED, StopReason.POD_GONE) is (
        StopReason.POD_GONE
    )
    assert choose_stop_reason(StopReason.NODE_SHUTDOWN, StopReason.POD_GONE) is (
        StopReason.NODE_SHUTDOWN
    )


@pytest.mark.parametrize("reason", list(StopReason))
def test_only_a_gone_pod_or_a_node_shutdown_detach_the_worker(reason):
    life = WorkerLife()
    life.advance(WorkerPhase.STOPPING, reason)
    assert life.detached is (reason in (StopReason.POD_GONE, StopReason.NODE_SHUTDOWN))


def test_detaching_notes_the_reason_but_leaves_the_phase_to_the_worker():
    life = WorkerLife()
    life.advance(WorkerPhase.RUNNING, StopReason.COMPLETED)
    life.detach(StopReason.POD_GONE)
    assert life.detached and life.phase is WorkerPhase.RUNNING and not life.stopping.is_set()


def test_a_wait_wakes_when_the_worker_stops():
    async def scenario() -> tuple[bool, bool]:
        life = WorkerLife()
        quiet = await life.wait_stopping(0.01)
        waiting = asyncio.create_task(life.wait_stopping(60))
        await asyncio.sleep(0)
        life.advance(WorkerPhase.STOPPING, StopReason.DELETED)
        return quiet, await asyncio.wait_for(waiting, 5)

    assert asyncio.run(scenario()) == (False, True)


def test_a_run_result_is_frozen_and_retries_only_when_told():
    result = RunResult(exit_code=1)
    assert result.retry is False
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.exit_code = 0  # type: ignore[misc]
