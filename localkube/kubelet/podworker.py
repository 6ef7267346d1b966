"""One pod's life on the node: prepare, init containers, containers, stop, clean up.

A PodWorker owns everything the pod has on this node: its network namespace
and IP, port forwards, volumes, cgroups and the shim of each container run.
Stopping is cooperative: `stopping` is set, container loops stop restarting,
processes get preStop + SIGTERM, then SIGKILL after the grace period, and
resources are released only when every process is gone (the shim of a run
exits only after the container's whole pid namespace has died).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import time
from typing import TYPE_CHECKING

from localkube.kubelet import cgroups, network
from localkube.kubelet.environment import NoCommandError, build_argv, build_environment
from localkube.kubelet.hooks import run_hook
from localkube.kubelet.images import ResolvedImage, resolve_image
from localkube.kubelet.runtime import (
    ContainerRun,
    await_container_exit,
    build_shim_spec,
    make_pod_dirs,
    pod_dir,
    signal_process,
    start_container_run,
    write_json_atomically,
)
from localkube.kubelet.securitycontext import build_security_profile
from localkube.kubelet.status import (
    ContainerRecord,
    ContainerState,
    PodPhase,
    PodRuntimeFacts,
    RestartPolicy,
    build_pod_status,
    now_rfc3339,
)
from localkube.kubelet.volumes import (
    VolumeError,
    build_container_mounts,
    materialize_volumes,
    write_etc_files,
)

if TYPE_CHECKING:
    from localkube.kubelet.agent import Kubelet

log = logging.getLogger(__name__)

BACKOFF_INITIAL_S = 10
BACKOFF_MAX_S = 300
IMAGE_BACKOFF_S = 1.0
VOLUME_RETRY_S = 2.0
HOOK_TIMEOUT_S = 30
DEFAULT_GRACE_S = 30
KILL_WAIT_S = 10
STATUS_RETRY_S = 1.0
FALLBACK_LINES = 80  # terminationMessagePolicy FallbackToLogsOnError, as the kubelet
FALLBACK_BYTES = 2048


def restart_delay(restart_count: int) -> float:
    """The kubelet's crash back-off: first restart at once, then 10 s doubling to 5 min."""
    if restart_count == 0:
        return 0.0
    return min(BACKOFF_INITIAL_S * 2 ** (restart_count - 1), BACKOFF_MAX_S)


def should_restart(policy: RestartPolicy, exit_code: int) -> bool:
    return policy is RestartPolicy.ALWAYS or (policy is RestartPolicy.ON_FAILURE and exit_code != 0)


def termination_reason(record: dict) -> str:
    if record.get("oomKilled"):
        return "OOMKilled"
    if record.get("reason"):
        return record["reason"]
    return "Completed" if record.get("exitCode") == 0 else "Error"


class PodWorker:
    def __init__(self, kubelet: Kubelet, pod: dict) -> None:
        self.k = kubelet
        self.pod = pod
        meta = pod["metadata"]
        self.uid: str = meta["uid"]
        self.namespace: str = meta["namespace"]
        self.name: str = meta["name"]
        self.dir = pod_dir(kubelet.state_dir, self.uid)
        self.volume_paths: dict[str, str] = {}  # set up by prepare(); empty until then
        spec = pod.get("spec") or {}
        self.policy = RestartPolicy(spec.get("restartPolicy") or "Always")
        self.init_specs = spec.get("initContainers") or []
        self.main_specs = spec.get("containers") or []
        main_wait = "PodInitializing" if self.init_specs else "ContainerCreating"
        self.records: dict[str, ContainerRecord] = {}
        for c in self.init_specs:
            self.records[c["name"]] = ContainerRecord(
                c["name"], c.get("image", ""), is_init=True, waiting_reason="PodInitializing"
            )
        for c in self.main_specs:
            self.records[c["name"]] = ContainerRecord(
                c["name"], c.get("image", ""), waiting_reason=main_wait
            )
        self.facts = PodRuntimeFacts(
            host_ip=kubelet.host_ip, start_time=(pod.get("status") or {}).get("startTime")
        )
        self.runs: dict[str, ContainerRun] = {}
        self.container_env: dict[str, dict] = {}
        self.netns: str | None = None
        self.forwarder: network.PodPortForwarder | None = None
        self.stopping = asyncio.Event()
        self.deletion = asyncio.Event()
        self.gone = False
        self.dirty = asyncio.Event()
        self.status_enabled = True
        self.task: asyncio.Task | None = None
        self.lifecycle_task: asyncio.Task | None = None
        self.released = False
        self.dir_removed = False
        self.adopted = False

    # ---- inputs from the watch -------------------------------------------------
    def start(self) -> None:
        self.task = asyncio.create_task(self.run(), name=f"pod-{self.namespace}/{self.name}")

    def update(self, pod: dict) -> None:
        self.pod = pod
        if pod["metadata"].get("deletionTimestamp"):
            self.deletion.set()

    def vanish(self) -> None:
        """The pod left the API (force delete, or removed before the kubelet got to it)."""
        self.gone = True
        self.status_enabled = False
        self.deletion.set()

    # ---- the pod's life ------------------------------------------------------
    async def run(self) -> None:
        status_task = asyncio.create_task(self.status_loop())
        try:
            self.lifecycle_task = asyncio.create_task(self.lifecycle())
            deadline_task = asyncio.create_task(self.enforce_deadline())
            deletion_wait = asyncio.create_task(self.deletion.wait())
            await asyncio.wait(
                {self.lifecycle_task, deletion_wait}, return_when=asyncio.FIRST_COMPLETED
            )
            if self.deletion.is_set():
                await self.stop_containers(0 if self.gone else self.grace_period())
            else:
                try:
                    await self.lifecycle_task
                except Exception:
                    log.exception("pod %s/%s: failed to run", self.namespace, self.name)
            deadline_task.cancel()
            await self.release_resources()
            await self.flush_status()
            await deletion_wait
            if not self.gone and not self.stopping.is_set():
                await self.stop_containers(self.grace_period())
            await self.flush_status()
            self.status_enabled = False
            await self.remove_pod_dir()
            if not self.gone:
                await self.k.api.delete_pod_now(self.namespace, self.name, self.uid)
        except Exception:
            log.exception("pod %s/%s: worker failed", self.namespace, self.name)
            self.status_enabled = False
            await self.kill_everything()
            await self.release_resources()
        finally:
            status_task.cancel()
            self.k.forget(self.uid)

    def grace_period(self) -> float:
        meta = self.pod["metadata"]
        if meta.get("deletionGracePeriodSeconds") is not None:
            return float(meta["deletionGracePeriodSeconds"])
        return float(
            (self.pod.get("spec") or {}).get("terminationGracePeriodSeconds") or DEFAULT_GRACE_S
        )

    async def lifecycle(self) -> None:
        if self.adopted:
            loops = [asyncio.create_task(self.run_container_loop(c)) for c in self.main_specs]
            await asyncio.gather(*loops)
            return
        async with self.k.start_slots:
            prepared = not self.stopping.is_set() and await self.prepare()
        if not prepared:
            await self.stopping.wait()
            return
        if not await self.run_init_containers():
            return
        loops = [asyncio.create_task(self.run_container_loop(c)) for c in self.main_specs]
        await asyncio.gather(*loops)

    async def enforce_deadline(self) -> None:
        deadline = (self.pod.get("spec") or {}).get("activeDeadlineSeconds")
        if deadline is None:
            return
        while not self.facts.start_time:
            await asyncio.sleep(0.1)
        started = time.time() - self.k.age_of(self.facts.start_time)
        await asyncio.sleep(max(0.0, started + float(deadline) - time.time()))
        if self.stopping.is_set():
            return
        self.facts.failure_reason = "DeadlineExceeded"
        self.facts.failure_message = "Pod was active on the node longer than the specified deadline"
        self.k.record_event(self.pod, "Normal", "DeadlineExceeded", self.facts.failure_message)
        await self.stop_containers(self.grace_period())

    # ---- preparation -----------------------------------------------------------
    async def prepare(self) -> bool:
        if not self.facts.start_time:
            self.facts.start_time = now_rfc3339()  # when the kubelet accepted the pod
        images = await self.check_images()
        if images is None:
            return False
        self.images = images
        make_pod_dirs(self.dir)
        if (self.pod.get("spec") or {}).get("hostNetwork"):
            ip = self.facts.host_ip  # like Kubernetes: a hostNetwork pod's IP is its node's
            self.facts.pod_ip = ip
        else:
            ip = self.k.addresses.allocate()
            self.facts.pod_ip = ip
            self.netns = await asyncio.to_thread(
                network.setup_pod_network, self.k.state_dir, self.uid, ip
            )
        self.write_state()
        if self.k.forward_ports and self.netns:
            self.forwarder = network.PodPortForwarder(self.netns, self.k.forward_ports)
            await self.forwarder.start()
        self.mark_dirty()
        while True:
            try:
                self.volume_paths = await materialize_volumes(
                    self.pod, self.dir, self.ips(), self.k.get_object
                )
                self.etc_files = write_etc_files(self.pod, self.dir, ip)
                return True
            except VolumeError as exc:
                self.k.record_event(
                    self.pod, "Warning", "FailedMount", f"MountVolume.SetUp failed: {exc}"
                )
                if await self.wait_stopping(VOLUME_RETRY_S):
                    return False

    async def check_images(self) -> dict[str, ResolvedImage] | None:
        resolved, missing = {}, []
        for c in self.init_specs + self.main_specs:
            image = resolve_image(c.get("image", ""), self.k.image_rules)
            if image is None:
                missing.append(c)
            else:
                resolved[c["name"]] = image
        if not missing:
            return resolved
        reason, first = "ErrImagePull", True
        while True:
            for c in missing:
                record = self.records[c["name"]]
                record.waiting_reason = reason
                message = (
                    f'failed to pull and unpack image "{c.get("image")}": '
                    "no rule in localkube images.yaml matches it"
                )
                if reason == "ImagePullBackOff":
                    message = f'Back-off pulling image "{c.get("image")}"'
                record.waiting_message = message
                if first:
                    self.k.record_event(
                        self.pod,
                        "Normal",
                        "Pulling",
                        f'Pulling image "{c.get("image")}"',
                        c["name"],
                    )
                    self.k.record_event(
                        self.pod,
                        "Warning",
                        "Failed",
                        f'Failed to pull image "{c.get("image")}": {message}',
                        c["name"],
                    )
                    self.k.record_event(
                        self.pod, "Warning", "Failed", "Error: ErrImagePull", c["name"]
                    )
                elif reason == "ImagePullBackOff":
                    self.k.record_event(self.pod, "Normal", "BackOff", message, c["name"])
            self.mark_dirty()
            first = False
            if await self.wait_stopping(IMAGE_BACKOFF_S if reason == "ErrImagePull" else 30):
                return None
            reason = "ImagePullBackOff"

    def ips(self) -> tuple[str | None, str]:
        return self.facts.pod_ip, self.facts.host_ip

    async def wait_stopping(self, seconds: float) -> bool:
        """Sleep, waking early when the pod is being stopped; True when stopping."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)
        return self.stopping.is_set()

    # ---- containers ------------------------------------------------------------
    async def run_init_containers(self) -> bool:
        for spec in self.init_specs:
            record = self.records[spec["name"]]
            while True:
                result = await self.run_container_once(spec)
                if self.stopping.is_set():
                    return False
                if result.get("retry"):
                    continue
                if result.get("exitCode") == 0:
                    break
                if self.policy is RestartPolicy.NEVER:
                    self.mark_dirty()
                    return False
                await self.back_off(record)
                if self.stopping.is_set():
                    return False
        for spec in self.main_specs:
            self.records[spec["name"]].waiting_reason = "ContainerCreating"
        return True

    async def run_container_loop(self, spec: dict) -> None:
        record = self.records[spec["name"]]
        adopted = self.runs.get(spec["name"])
        if adopted is not None:
            result = await self.follow_run(spec["name"], adopted)
            if self.stopping.is_set() or not should_restart(self.policy, result.get("exitCode", 1)):
                return
            await self.back_off(record)
        elif record.state is ContainerState.TERMINATED:
            if not should_restart(self.policy, record.exit_code or 0):
                return
            await self.back_off(record)
        while not self.stopping.is_set():
            result = await self.run_container_once(spec)
            if result.get("retry"):
                continue
            if self.stopping.is_set() or not should_restart(self.policy, result.get("exitCode", 1)):
                return
            await self.back_off(record)

    async def back_off(self, record: ContainerRecord) -> None:
        delay = restart_delay(record.restart_count)
        record.last_terminated = record.terminated_view()
        if delay:
            record.state = ContainerState.WAITING
            record.waiting_reason = "CrashLoopBackOff"
            record.waiting_message = (
                f"back-off {delay:.0f}s restarting failed container={record.name} "
                f"pod={self.name}_{self.namespace}({self.uid})"
            )
            self.k.record_event(
                self.pod,
                "Warning",
                "BackOff",
                "Back-off restarting failed container " + record.name,
                record.name,
            )
            self.mark_dirty()
            await self.wait_stopping(delay)
        if not self.stopping.is_set():
            record.restart_count += 1

    async def run_container_once(self, spec: dict) -> dict:
        """Start one run of the container and wait for it; returns its exit record."""
        name = spec["name"]
        record = self.records[name]
        image = self.images[name]
        if self.stopping.is_set():
            return {"exitCode": 137}
        try:
            security = build_security_profile(self.pod, spec)
            env = await build_environment(
                self.pod, spec, image, self.ips(), self.k.api_port, self.k.get_object
            )
            argv = build_argv(spec, image, env)
            mounts = build_container_mounts(spec, self.volume_paths, self.etc_files)
            groups = cgroups.create_container_cgroups(self.k.state_hash, self.uid, spec)
        except (VolumeError, NoCommandError, ValueError, OSError) as exc:
            reason = (
                "CreateContainerError"
                if isinstance(exc, NoCommandError)
                else "CreateContainerConfigError"
            )
            record.state, record.waiting_reason, record.waiting_message = (
                ContainerState.WAITING,
                reason,
                str(exc),
            )
            self.k.record_event(self.pod, "Warning", "Failed", f"Error: {exc}", name)
            self.mark_dirty()
            await self.wait_stopping(VOLUME_RETRY_S)
            return (
                {"exitCode": 1, "retry": True}
                if not isinstance(exc, NoCommandError)
                else {"exitCode": 128}
            )
        netns_path = os.path.join(network.NETNS_DIR, self.netns) if self.netns else None
        shim_spec = build_shim_spec(
            self.pod, self.dir, spec, record.restart_count, netns_path=netns_path,
            security=security, mounts=mounts, host_dirs=image.host_dirs, cgroups=groups,
            argv=argv, env=env,
        )
        base = os.path.dirname(shim_spec["exit_path"])
        self.container_env[name] = {"env": env, "workingDir": shim_spec["workingDir"],
                                    "security": security}
        with contextlib.suppress(FileNotFoundError):
            os.unlink(shim_spec["log_path"])
        if record.restart_count == 0:
            self.k.record_event(
                self.pod,
                "Normal",
                "Pulled",
                f'Container image "{spec.get("image")}" already present on machine',
                name,
            )
        run = await start_container_run(shim_spec, os.path.join(base, "spec.bin"))
        if run.start_error:
            await await_container_exit(run)
            now = now_rfc3339()
            record.state, record.exit_code, record.reason = (
                ContainerState.TERMINATED,
                128,
                "StartError",
            )
            record.message, record.started_at, record.finished_at, record.ready = (
                run.start_error,
                now,
                now,
                False,
            )
            self.k.record_event(self.pod, "Warning", "Failed", f"Error: {run.start_error}", name)
            self.mark_dirty()
            return {"exitCode": 128}
        self.runs[name] = run
        record.state, record.started_at, record.waiting_message = (
            ContainerState.RUNNING,
            run.started_at,
            None,
        )
        record.container_id = f"localkube://{self.uid[:8]}-{name}-{record.restart_count}"
        self.write_state()
        if record.restart_count == 0:
            self.k.record_event(self.pod, "Normal", "Created", f"Created container {name}", name)
        self.k.record_event(self.pod, "Normal", "Started", f"Started container {name}", name)
        if self.stopping.is_set():
            signal_process(run.pid, signal.SIGKILL)
        post_start = (
            ((spec.get("lifecycle") or {}).get("postStart")) if not record.is_init else None
        )
        if post_start and not self.stopping.is_set():
            error = await run_hook(
                self.k.state_dir, self.uid, name, post_start, self.facts.pod_ip, HOOK_TIMEOUT_S
            )
            if error:
                self.k.record_event(
                    self.pod,
                    "Warning",
                    "FailedPostStartHook",
                    f"PostStartHook failed: {error}",
                    name,
                )
                signal_process(run.pid, signal.SIGKILL)
        record.ready = not record.is_init and not self.stopping.is_set()
        self.mark_dirty()
        return await self.follow_run(name, run)

    async def follow_run(self, name: str, run: ContainerRun) -> dict:
        """Wait for a started run to end and record how it ended."""
        record = self.records[name]
        result = await await_container_exit(run)
        self.runs.pop(name, None)
        record.state, record.ready = ContainerState.TERMINATED, False
        record.exit_code = result.get("exitCode", 137)
        record.signal = result.get("signal")
        record.reason = termination_reason(result)
        record.message = result.get("message") or self.fallback_message(name, record)
        record.finished_at = result.get("finishedAt") or now_rfc3339()
        if result.get("startedAt"):
            record.started_at = result["startedAt"]
        self.write_state()
        self.mark_dirty()
        return result

    def fallback_message(self, name: str, record: ContainerRecord) -> str | None:
        """terminationMessagePolicy FallbackToLogsOnError: the log's tail when the run failed."""
        spec = next((c for c in self.init_specs + self.main_specs if c["name"] == name), {})
        if spec.get("terminationMessagePolicy") != "FallbackToLogsOnError" or record.exit_code == 0:
            return None
        path = os.path.join(self.dir, "logs", name, f"{record.restart_count}.log")
        try:
            with open(path, "rb") as f:
                f.seek(max(0, os.path.getsize(path) - 64 * 1024))
                lines = f.read().decode(errors="replace").splitlines()
        except OSError:
            return None
        text = "\n".join(
            line.split(" ", 3)[3] for line in lines[-FALLBACK_LINES:] if line.count(" ") >= 3
        )
        return text[-FALLBACK_BYTES:] or None

    # ---- stopping --------------------------------------------------------------
    async def stop_containers(self, grace: float) -> None:
        """preStop, SIGTERM, wait up to `grace`, SIGKILL; returns when every process is gone."""
        first = not self.stopping.is_set()
        self.stopping.set()
        deadline = time.monotonic() + grace
        if first and grace > 0:
            hooks = []
            for name in list(self.runs):
                spec = next((c for c in self.main_specs if c["name"] == name), None)
                pre_stop = ((spec or {}).get("lifecycle") or {}).get("preStop")
                self.k.record_event(
                    self.pod, "Normal", "Killing", f"Stopping container {name}", name
                )
                if pre_stop:
                    hooks.append(self.run_pre_stop(name, pre_stop, grace))
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

    async def run_pre_stop(self, name: str, handler: dict, grace: float) -> None:
        error = await run_hook(self.k.state_dir, self.uid, name, handler, self.facts.pod_ip, grace)
        if error:
            self.k.record_event(
                self.pod, "Warning", "FailedPreStopHook", f"PreStopHook failed: {error}", name
            )

    async def kill_everything(self) -> None:
        for run in list(self.runs.values()):
            signal_process(run.pid, signal.SIGKILL)
        await asyncio.to_thread(cgroups.destroy_pod_cgroups, self.k.state_hash, self.uid)

    async def release_resources(self) -> None:
        """Port forwards, network namespace, cgroups: once every process is gone."""
        if self.released:
            return
        self.released = True
        await self.kill_everything()
        if self.forwarder:
            await self.forwarder.stop()
        # unconditional: a stop may have raced with the namespace's creation
        await asyncio.to_thread(network.teardown_pod_network, self.k.state_dir, self.uid)
        if self.netns:
            self.k.addresses.release(self.facts.pod_ip)
        self.write_state()

    async def remove_pod_dir(self) -> None:
        self.dir_removed = True
        await asyncio.to_thread(shutil.rmtree, self.dir, True)

    # ---- reporting -------------------------------------------------------------
    def write_state(self) -> None:
        if self.dir_removed:
            return
        os.makedirs(self.dir, exist_ok=True)
        containers = {}
        for name, record in self.records.items():
            run = self.runs.get(name)
            env = self.container_env.get(name, {})
            containers[name] = {
                "pid": run.pid if run else None,
                "shimPid": run.shim_pid if run else None,
                "restartCount": record.restart_count,
                "env": env.get("env", {}),
                "workingDir": env.get("workingDir", "/"),
                "root": f"/proc/{run.pid}/root" if run and run.pid else None,
                "security": env.get("security"),
            }
        state = {
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "node": self.k.node,
            "netns": self.netns if not self.released else None,
            "ip": self.facts.pod_ip,
            "containers": containers,
        }
        write_json_atomically(os.path.join(self.dir, "state.json"), state)

    def mark_dirty(self) -> None:
        self.dirty.set()

    def current_status(self) -> dict:
        init = [self.records[c["name"]] for c in self.init_specs]
        main = [self.records[c["name"]] for c in self.main_specs]
        return build_pod_status(self.pod, init, main, self.facts)

    async def status_loop(self) -> None:
        while True:
            await self.dirty.wait()
            await asyncio.sleep(0.01)  # coalesce bursts of changes into one PATCH
            self.dirty.clear()
            if not await self.send_status():
                await asyncio.sleep(STATUS_RETRY_S)
                self.mark_dirty()

    async def send_status(self) -> bool:
        """PATCH the current status; False when it did not get through (retry later)."""
        if not self.status_enabled:
            return True
        try:
            status = self.current_status()
            result = await self.k.api.patch_pod_status(self.namespace, self.name, status)
            if result is None:
                self.vanish()
            return True
        except Exception as exc:  # noqa: BLE001 - the status loop retries
            log.warning("pod %s/%s: status update failed: %s", self.namespace, self.name, exc)
            return False

    async def flush_status(self) -> None:
        self.dirty.clear()
        await self.send_status()

    @property
    def phase(self) -> PodPhase:
        return PodPhase(self.current_status()["phase"])
