"""Containers run again and again under the pod's restart policy.

Init containers one after another, each until it exits 0; main containers each in
its own loop, a run adopted from a previous kubelet followed first; the crash
back-off between runs, reported as CrashLoopBackOff. The loops know the pod worker
only as `RunHost` (what they read of it and the two calls that run a container), so
podworker.py holds the pod's sequencing and this module the containers' repetition;
the policy itself (whether, and after how long) is restarts.py's.
"""

from __future__ import annotations

from typing import Protocol

from localkube.kubelet.lifecycle import RunResult, WorkerLife
from localkube.kubelet.restarts import describe_back_off, restart_delay, should_restart
from localkube.kubelet.runtime import ContainerRun
from localkube.kubelet.status import ContainerRecord, ContainerState, RestartPolicy


class RunHost(Protocol):
    """What the loops use of a PodWorker."""

    pod: dict
    policy: RestartPolicy
    init_specs: list[dict]
    main_specs: list[dict]
    records: dict[str, ContainerRecord]
    runs: dict[str, ContainerRun]
    life: WorkerLife

    async def run_container_once(self, spec: dict) -> RunResult: ...

    async def follow_run(self, name: str, run: ContainerRun) -> RunResult: ...

    def mark_dirty(self) -> None: ...

    def record_event(
        self, kind: str, reason: str, message: str, container: str | None = None
    ) -> None: ...


async def run_init_containers(host: RunHost) -> bool:
    """Each init container in order until it exits 0; False when the pod will not go on."""
    for spec in host.init_specs:
        record = host.records[spec["name"]]
        while True:
            result = await host.run_container_once(spec)
            if host.life.is_stopping():
                return False
            if result.retry:
                continue
            if result.exit_code == 0:
                break
            if host.policy is RestartPolicy.NEVER:
                host.mark_dirty()
                return False
            await back_off(host, record)
            if host.life.is_stopping():
                return False
    for spec in host.main_specs:
        host.records[spec["name"]].waiting_reason = "ContainerCreating"
    return True


async def run_container_loop(host: RunHost, spec: dict) -> None:
    """One main container, run again as the restart policy says (an adopted run first)."""
    record = host.records[spec["name"]]
    adopted = host.runs.get(spec["name"])
    if adopted is not None:
        result = await host.follow_run(spec["name"], adopted)
        if host.life.is_stopping() or not should_restart(host.policy, result.exit_code):
            return
        await back_off(host, record)
    elif record.state is ContainerState.TERMINATED:
        if not should_restart(host.policy, record.exit_code or 0):
            return
        await back_off(host, record)
    while not host.life.is_stopping():
        result = await host.run_container_once(spec)
        if result.retry:
            continue
        if host.life.is_stopping() or not should_restart(host.policy, result.exit_code):
            return
        await back_off(host, record)


async def back_off(host: RunHost, record: ContainerRecord) -> None:
    """The crash back-off before a run again, reported as CrashLoopBackOff while it lasts."""
    delay = restart_delay(record.restart_count)
    record.last_terminated = record.terminated_view()
    if delay:
        record.state = ContainerState.WAITING
        record.waiting_reason = "CrashLoopBackOff"
        record.waiting_message = describe_back_off(delay, record.name, host.pod)
        host.record_event(
            "Warning",
            "BackOff",
            "Back-off restarting failed container " + record.name,
            record.name,
        )
        host.mark_dirty()
        await host.life.wait_stopping(delay)
    if not host.life.is_stopping():
        record.restart_count += 1
