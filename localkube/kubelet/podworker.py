"""One pod's life on the node: prepare, init containers, containers, stop, clean up.

A PodWorker owns everything the pod has on this node: its sandbox (network
namespace and IP, port forwards, volumes), cgroups and the shim of each run.
Stopping is cooperative: the worker leaves WorkerPhase.RUNNING (with a
StopReason), container loops stop restarting, processes get preStop + SIGTERM,
then SIGKILL after the grace period, and resources are released only when every
process is gone (the shim of a run exits only after the container's whole pid
namespace has died). Whoever else stops a worker (the kubelet's watch and
shutdown, recovery.py) does it through its methods, never by writing its state.

This module holds the sequencing; what it consults lives beside it: the pod's
network namespace, port forwards and volumes (sandbox.py), its phase,
stop reason and run results (lifecycle.py), the restart policy and back-off
(restarts.py), how a run is written into its record (runrecords.py), grace period
and deadline (termination.py), state.json (podstate.py), the status PATCH loop
(statusreporter.py) and what it uses of the kubelet (podhost.py, not agent.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from localkube.kubelet import cgroups
from localkube.kubelet.containerloops import run_container_loop, run_init_containers
from localkube.kubelet.hooks import describe_hook_failure, find_hook, run_hook
from localkube.kubelet.images import ResolvedImage, describe_pull_failure, resolve_pod_images
from localkube.kubelet.launch import (
    CONFIG_ERRORS,
    build_run_spec,
    describe_exec_context,
    resolve_container_config,
)
from localkube.kubelet.lifecycle import RunResult, StopReason, WorkerLife, WorkerPhase
from localkube.kubelet.logwriter import remove_earlier_runs, remove_log_files
from localkube.kubelet.network import NetworkError
from localkube.kubelet.podstate import build_pod_state, write_pod_state
from localkube.kubelet.runrecords import (
    record_create_error,
    record_run_exit,
    record_run_started,
    record_start_error,
)
from localkube.kubelet.runtime import (
    ContainerRun,
    await_container_exit,
    make_pod_dirs,
    pod_dir,
    signal_process,
    start_container_run,
)
from localkube.kubelet.sandbox import PodSandbox
from localkube.kubelet.status import (
    PodRuntimeFacts,
    RestartPolicy,
    build_container_records,
    build_pod_status,
    now_rfc3339,
)
from localkube.kubelet.statusreporter import PodStatusReporter
from localkube.kubelet.termination import (
    DEADLINE_EXCEEDED_MESSAGE,
    read_grace_period,
    sleep_until_deadline,
)
from localkube.kubelet.volumes import VolumeError

if TYPE_CHECKING:
    from localkube.kubelet.podhost import PodHost

log = logging.getLogger(__name__)

IMAGE_BACKOFF_S = 1.0
VOLUME_RETRY_S = 2.0
HOOK_TIMEOUT_S = 30
KILL_WAIT_S = 10


class PodWorker:
    def __init__(self, kubelet: PodHost, pod: dict) -> None:
        self.kubelet = kubelet
        self.pod = pod
        meta = pod["metadata"]
        self.uid: str = meta["uid"]
        self.namespace: str = meta["namespace"]
        self.name: str = meta["name"]
        self.dir = pod_dir(kubelet.state_dir, self.uid)
        spec = pod.get("spec") or {}
        self.policy = RestartPolicy(spec.get("restartPolicy") or "Always")
        self.init_specs: list[dict] = spec.get("initContainers") or []
        self.main_specs: list[dict] = spec.get("containers") or []
        self.records = build_container_records(self.init_specs, self.main_specs)
        self.facts = PodRuntimeFacts(
            host_ip=kubelet.host_ip, start_time=(pod.get("status") or {}).get("startTime")
        )
        # what prepare() (or recovery's adoption, adopt()) sets up; empty until then
        self.images: dict[str, ResolvedImage] = {}
        self.sandbox = PodSandbox(kubelet, self.uid, self.dir, self.facts)
        self.runs: dict[str, ContainerRun] = {}
        self.container_env: dict[str, dict] = {}
        self.adopted = False  # its containers were started by a previous kubelet (recovery.py)
        self.life = WorkerLife()
        self.deletion_requested = asyncio.Event()  # deletionTimestamp seen, or the pod vanished
        if meta.get("deletionTimestamp"):
            self.deletion_requested.set()
        self.reporter = PodStatusReporter(
            kubelet.api, self.namespace, self.name, self.current_status, self.vanish
        )
        self.task: asyncio.Task | None = None
        self.lifecycle_task: asyncio.Task | None = None

    # ---- inputs from the watch, the kubelet and recovery ---------------------------
    def start(self) -> None:
        self.task = asyncio.create_task(self.run(), name=f"pod-{self.namespace}/{self.name}")

    def settle(self, settling: Coroutine[Any, Any, None]) -> None:
        """Run recovery's `settling` of a pod from a previous kubelet as this worker's task."""
        self.task = asyncio.create_task(settling, name=f"settle-{self.namespace}/{self.name}")

    def update(self, pod: dict) -> None:
        self.pod = pod
        if pod["metadata"].get("deletionTimestamp"):
            self.deletion_requested.set()

    def vanish(self) -> None:
        """The pod left the API (force delete, or removed before the kubelet got to it)."""
        self.life.detach(StopReason.POD_GONE)
        self.reporter.disable()
        self.deletion_requested.set()

    def stop_for_shutdown(self) -> None:
        """No container starts any more; the pod stays in the API for the next kubelet."""
        self.life.advance(WorkerPhase.STOPPING, StopReason.NODE_SHUTDOWN)
        self.reporter.disable()

    def fail_for_node_restart(self, message: str) -> None:
        """A pod recovery could not re-adopt: Failed, reason NodeRestart, at its last IP."""
        self.facts.pod_ip = (self.pod.get("status") or {}).get("podIP")
        self.facts.failure_reason = "NodeRestart"
        self.facts.failure_message = message
        self.life.advance(WorkerPhase.STOPPING, StopReason.NODE_RESTART)

    async def await_lifecycle(self, timeout: float) -> None:
        """Wait up to `timeout` for the container loops to end."""
        if self.lifecycle_task is not None and not self.lifecycle_task.done():
            await asyncio.wait({self.lifecycle_task}, timeout=timeout)

    async def abandon(self) -> None:
        """End the worker's task, then kill what is left and release the pod's resources."""
        if self.task:
            self.task.cancel()
            with contextlib.suppress(BaseException):
                await self.task
        await self.kill_everything()
        await self.release_resources()

    # ---- the pod's life ------------------------------------------------------
    async def run(self) -> None:
        status_task = asyncio.create_task(self.reporter.run())
        try:
            self.lifecycle_task = asyncio.create_task(self.lifecycle())
            deadline_task = asyncio.create_task(self.enforce_deadline())
            deletion_wait = asyncio.create_task(self.deletion_requested.wait())
            await asyncio.wait(
                {self.lifecycle_task, deletion_wait}, return_when=asyncio.FIRST_COMPLETED
            )
            if self.deletion_requested.is_set():
                grace = 0 if self.life.detached else read_grace_period(self.pod)
                await self.stop_containers(StopReason.DELETED, grace)
            else:
                try:
                    await self.lifecycle_task
                except Exception:
                    log.exception("pod %s/%s: failed to run", self.namespace, self.name)
            deadline_task.cancel()
            await self.release_resources()
            await self.reporter.flush()
            await deletion_wait
            await self.reporter.flush()
            self.reporter.disable()
            await self.remove_pod_dir()
            if not self.life.detached:
                await self.kubelet.api.delete_pod_now(self.namespace, self.name, self.uid)
        except Exception:
            log.exception("pod %s/%s: worker failed", self.namespace, self.name)
            self.life.advance(WorkerPhase.STOPPING, StopReason.FAILED)
            self.reporter.disable()
            await self.kill_everything()
            await self.release_resources()
        finally:
            status_task.cancel()
            self.kubelet.forget(self.uid)

    async def lifecycle(self) -> None:
        if self.adopted:
            loops = [asyncio.create_task(run_container_loop(self, c)) for c in self.main_specs]
            await asyncio.gather(*loops)
            return
        async with self.kubelet.start_slots:
            prepared = not self.life.is_stopping() and await self.prepare()
        if not prepared:
            await self.life.stopping.wait()
            return
        if not await run_init_containers(self):
            return
        loops = [asyncio.create_task(run_container_loop(self, c)) for c in self.main_specs]
        await asyncio.gather(*loops)

    async def enforce_deadline(self) -> None:
        reached = await sleep_until_deadline(self.pod, self.facts, self.kubelet.age_of)
        if not reached or self.life.is_stopping():
            return
        self.facts.failure_reason = "DeadlineExceeded"
        self.facts.failure_message = DEADLINE_EXCEEDED_MESSAGE
        self.record_event("Normal", "DeadlineExceeded", self.facts.failure_message)
        await self.stop_containers(StopReason.DEADLINE_EXCEEDED, read_grace_period(self.pod))

    # ---- preparation -----------------------------------------------------------
    async def prepare(self) -> bool:
        if not self.facts.start_time:
            self.facts.start_time = now_rfc3339()  # when the kubelet accepted the pod
        images = await self.check_images()
        if images is None:
            return False
        self.images = images
        make_pod_dirs(self.dir)
        await self.sandbox.open(bool((self.pod.get("spec") or {}).get("hostNetwork")))
        self.write_state()
        if not await self.secure_network():
            return False
        await self.sandbox.forward_ports()
        self.mark_dirty()
        while True:
            try:
                await self.sandbox.mount(self.pod)
                return True
            except VolumeError as exc:
                self.record_event("Warning", "FailedMount", f"MountVolume.SetUp failed: {exc}")
                if await self.life.wait_stopping(VOLUME_RETRY_S):
                    return False

    async def secure_network(self) -> bool:
        """The pod's NetworkPolicy rules in place before anything of it runs (tried again
        while `nft` fails; False when the pod is stopped meanwhile)."""
        while self.sandbox.netns:
            try:
                await self.kubelet.policies.secure(self.pod, self.sandbox.netns)
                return True
            except NetworkError as exc:
                message = f"NetworkPolicy rules could not be set up: {exc}"
                self.record_event("Warning", "FailedCreatePodSandBox", message)
                if await self.life.wait_stopping(VOLUME_RETRY_S):
                    return False
        return True

    async def check_images(self) -> dict[str, ResolvedImage] | None:
        containers = self.init_specs + self.main_specs
        resolved, missing = resolve_pod_images(containers, self.kubelet.image_rules)
        if not missing:
            return resolved
        reason, first = "ErrImagePull", True
        while True:
            for c in missing:
                record = self.records[c["name"]]
                record.waiting_reason = reason
                message, events = describe_pull_failure(c.get("image"), reason, first)
                record.waiting_message = message
                for kind, why, message in events:
                    self.record_event(kind, why, message, c["name"])
            self.mark_dirty()
            first = False
            if await self.life.wait_stopping(IMAGE_BACKOFF_S if reason == "ErrImagePull" else 30):
                return None
            reason = "ImagePullBackOff"

    async def adopt(
        self,
        images: dict[str, ResolvedImage],
        runs: dict[str, ContainerRun],
        container_env: dict[str, dict],
        netns: str,
        pod_ip: str | None,
    ) -> None:
        """Follow the runs a previous kubelet started (recovery.py found them alive)."""
        self.images, self.runs, self.adopted = images, runs, True
        self.container_env.update(container_env)
        await self.sandbox.adopt(self.pod, netns, pod_ip)
        try:
            if netns:  # None: the host's network
                await self.kubelet.policies.secure(self.pod, netns, adopted=True)
        except NetworkError as exc:
            log.warning(
                "pod %s/%s: NetworkPolicy rules not rewritten: %s", self.namespace, self.name, exc
            )
        self.write_state()
        self.mark_dirty()

    def ips(self) -> tuple[str | None, str]:
        return self.sandbox.ips()

    # ---- containers ------------------------------------------------------------
    async def run_container_once(self, spec: dict) -> RunResult:
        """Start one run of the container and wait for it; returns how it ended."""
        name = spec["name"]
        record = self.records[name]
        image = self.images[name]
        if self.life.is_stopping():
            return RunResult(exit_code=137)
        try:
            config = await resolve_container_config(
                self.kubelet, self.pod, spec, image, self.sandbox
            )
        except CONFIG_ERRORS as exc:
            result = record_create_error(record, exc)
            self.record_event("Warning", "Failed", f"Error: {exc}", name)
            self.mark_dirty()
            await self.life.wait_stopping(VOLUME_RETRY_S)
            return result
        shim_spec = build_run_spec(
            self.pod, spec, record.restart_count, image, self.sandbox, config
        )
        shim_spec.update(self.kubelet.log_rotation.shim_fields())
        base = os.path.dirname(shim_spec["exit_path"])
        self.container_env[name] = describe_exec_context(config, shim_spec)
        remove_log_files(shim_spec["log_path"])
        remove_earlier_runs(shim_spec["log_path"], record.restart_count)
        if record.restart_count == 0:
            pulled = f'Container image "{spec.get("image")}" already present on machine'
            self.record_event("Normal", "Pulled", pulled, name)
        run = await start_container_run(shim_spec, os.path.join(base, "spec.bin"))
        if run.start_error:
            await await_container_exit(run)
            record_start_error(record, run.start_error)
            self.record_event("Warning", "Failed", f"Error: {run.start_error}", name)
            self.mark_dirty()
            return RunResult(exit_code=128)
        self.runs[name] = run
        record_run_started(record, run, self.uid)
        self.write_state()
        if record.restart_count == 0:
            self.record_event("Normal", "Created", f"Created container {name}", name)
        self.record_event("Normal", "Started", f"Started container {name}", name)
        if self.life.is_stopping():
            signal_process(run.pid, signal.SIGKILL)
        post_start = find_hook(spec, "postStart") if not record.is_init else None
        if post_start and not self.life.is_stopping():
            if not await self.run_lifecycle_hook(name, "postStart", post_start, HOOK_TIMEOUT_S):
                signal_process(run.pid, signal.SIGKILL)
        record.ready = not record.is_init and not self.life.is_stopping()
        self.mark_dirty()
        return await self.follow_run(name, run)

    async def follow_run(self, name: str, run: ContainerRun) -> RunResult:
        """Wait for a started run to end and record how it ended."""
        record = self.records[name]
        exit_record = await await_container_exit(run)
        self.runs.pop(name, None)
        spec = next((c for c in self.init_specs + self.main_specs if c["name"] == name), {})
        record_run_exit(record, exit_record, self.dir, spec)
        self.write_state()
        self.mark_dirty()
        return RunResult(exit_code=exit_record.get("exitCode", 137))

    async def run_lifecycle_hook(
        self, name: str, kind: str, handler: dict, timeout_s: float
    ) -> bool:
        """Run a postStart or preStop handler; False, with a Failed...Hook event, if it failed."""
        error = await run_hook(
            self.kubelet.state_dir, self.uid, name, handler, self.facts.pod_ip, timeout_s
        )
        if error:
            reason, message = describe_hook_failure(kind, error)
            self.record_event("Warning", reason, message, name)
        return not error

    # ---- stopping --------------------------------------------------------------
    async def stop_containers(self, reason: StopReason, grace: float) -> None:
        """preStop, SIGTERM, wait up to `grace`, SIGKILL; returns when every process is gone."""
        first = self.life.advance(WorkerPhase.STOPPING, reason)
        deadline = time.monotonic() + grace
        if first and grace > 0:
            hooks = []
            for name in list(self.runs):
                spec = next((c for c in self.main_specs if c["name"] == name), None)
                pre_stop = find_hook(spec, "preStop")
                self.record_event("Normal", "Killing", f"Stopping container {name}", name)
                if pre_stop:
                    hooks.append(self.run_lifecycle_hook(name, "preStop", pre_stop, grace))
            if hooks:
                await asyncio.gather(*hooks)
        for run in list(self.runs.values()):
            signal_process(run.pid, signal.SIGTERM if grace > 0 else signal.SIGKILL)
        if self.lifecycle_task is not None:
            remaining = max(0.0, deadline - time.monotonic())
            done, _ = await asyncio.wait({self.lifecycle_task}, timeout=remaining)
            if not done:
                await self.kill_everything()
                done, _ = await asyncio.wait({self.lifecycle_task}, timeout=KILL_WAIT_S)
                if not done:
                    self.lifecycle_task.cancel()
                    with contextlib.suppress(BaseException):
                        await self.lifecycle_task
        await self.kill_everything()

    async def kill_everything(self) -> None:
        for run in list(self.runs.values()):
            signal_process(run.pid, signal.SIGKILL)
        await asyncio.to_thread(cgroups.destroy_pod_cgroups, self.kubelet.state_hash, self.uid)

    async def release_resources(self) -> None:
        """Port forwards, network namespace, cgroups: once every process is gone."""
        if self.life.phase >= WorkerPhase.RELEASED:
            return
        self.life.advance(WorkerPhase.RELEASED, StopReason.COMPLETED)
        self.kubelet.policies.forget(self.uid)
        await self.kill_everything()
        await self.sandbox.release()
        self.write_state()

    async def remove_pod_dir(self) -> None:
        self.life.advance(WorkerPhase.REMOVED)
        await asyncio.to_thread(shutil.rmtree, self.dir, True)

    # ---- reporting -------------------------------------------------------------
    def write_state(self) -> None:
        if self.life.phase is WorkerPhase.REMOVED:
            return
        netns = self.sandbox.netns if self.life.phase < WorkerPhase.RELEASED else None
        state = build_pod_state(
            self.pod,
            self.kubelet.node,
            netns,
            self.facts.pod_ip,
            self.records,
            self.runs,
            self.container_env,
        )
        write_pod_state(self.dir, state)

    def mark_dirty(self) -> None:
        self.reporter.mark_dirty()

    def record_event(
        self, kind: str, reason: str, message: str, container: str | None = None
    ) -> None:
        self.kubelet.record_event(self.pod, kind, reason, message, container)

    def current_status(self) -> dict:
        init = [self.records[c["name"]] for c in self.init_specs]
        main = [self.records[c["name"]] for c in self.main_specs]
        return build_pod_status(self.pod, init, main, self.facts)
