"""What a restarted kubelet does with the pods a previous kubelet of its node ran.

After a crash (SIGKILL) the shims and containers keep running and keep
writing logs and exit records, so a started pod whose containers all still
live (or have exit records) is re-adopted: the new PodWorker follows the same
runs through pidfds and goes on reporting. A pod that cannot be re-adopted
(after `down`, or mid-initialisation) is stopped and reported Failed with
reason NodeRestart, its unfinished containers terminated ContainerStatusUnknown
(exit 137), as the real kubelet reports containers it cannot find.
"""

from __future__ import annotations

import asyncio
import logging
import os
from enum import StrEnum
from typing import TYPE_CHECKING

from localkube.kubelet import cleanup, network
from localkube.kubelet.cleanup import SHIM_MARKER, is_recorded_process
from localkube.kubelet.images import resolve_pod_images
from localkube.kubelet.runtime import ContainerRun
from localkube.kubelet.status import ContainerState, now_rfc3339

if TYPE_CHECKING:
    from localkube.kubelet.podhost import PodHost
    from localkube.kubelet.podworker import PodWorker

log = logging.getLogger(__name__)

NODE_RESTART_MESSAGE = (
    "The node's kubelet restarted and could not re-adopt the pod's containers; they were stopped"
)


class PodOrigin(StrEnum):
    """How a pod came to this kubelet."""

    NEW = "new"
    FINISHED = "finished"
    NODE_RESTART = "node-restart"


async def adopt_pod(worker: PodWorker, state: dict) -> bool:
    """Take over a pod a previous kubelet started, if its containers still live.

    Possible when the pod was initialized and every container is either
    running under a live shim or terminated; the shims keep writing logs
    and exit records, so nothing was lost while no kubelet watched.
    """
    status = worker.pod.get("status") or {}
    previous = {s["name"]: s for s in status.get("containerStatuses") or []}
    init_done = {
        s["name"]
        for s in status.get("initContainerStatuses") or []
        if ((s.get("state") or {}).get("terminated") or {}).get("exitCode") == 0
    }
    if (
        any(c["name"] not in init_done for c in worker.init_specs)
        or not state.get("netns")
        or not network.netns_exists(state["netns"])
    ):
        return False
    containers = worker.init_specs + worker.main_specs
    images, missing = resolve_pod_images(containers, worker.kubelet.image_rules)
    if missing:
        return False
    runs = {}
    base_dir = os.path.join(worker.dir, "containers")
    for c in worker.main_specs:
        name, before = c["name"], previous.get(c["name"]) or {}
        entry = (state.get("containers") or {}).get(name) or {}
        record = worker.records[name]
        record.restart_count = entry.get("restartCount", before.get("restartCount", 0))
        record.container_id = before.get("containerID")
        if before.get("lastState", {}).get("terminated"):
            record.last_terminated = before["lastState"]["terminated"]
        terminated = (before.get("state") or {}).get("terminated")
        if is_recorded_process(entry, "shimPid", "shimStart", SHIM_MARKER) and is_recorded_process(
            entry, "pid", "pidStart"
        ):
            runs[name] = ContainerRun(
                os.path.join(base_dir, name, "exit.bin"),
                entry["shimPid"],
                entry["pid"],
                (before.get("state") or {}).get("running", {}).get("startedAt"),
                shim_start=entry["shimStart"],
                pid_start=entry["pidStart"],
            )
            record.state, record.started_at, record.ready = (
                ContainerState.RUNNING,
                runs[name].started_at,
                True,
            )
        elif terminated:
            record.state, record.exit_code, record.reason = (
                ContainerState.TERMINATED,
                terminated.get("exitCode"),
                terminated.get("reason"),
            )
            record.started_at, record.finished_at = (
                terminated.get("startedAt"),
                terminated.get("finishedAt"),
            )
        else:
            return False
    for c in worker.init_specs:
        record = worker.records[c["name"]]
        record.state, record.exit_code, record.reason = (
            ContainerState.TERMINATED,
            0,
            "Completed",
        )
    container_env = {
        name: {
            "env": entry.get("env") or {},
            "workingDir": entry.get("workingDir") or "/",
            "security": entry.get("security"),  # exec sessions keep running as the container
        }
        for name, entry in (state.get("containers") or {}).items()
    }
    await worker.adopt(images, runs, container_env, state["netns"], state.get("ip"))
    return True


async def settle_previous_pod(kubelet: PodHost, worker: PodWorker, origin: PodOrigin) -> None:
    """A pod from before this kubelet started: re-adopt it, or stop leftovers and report."""
    if origin is PodOrigin.NODE_RESTART and not worker.deletion_requested.is_set():
        state = cleanup.read_state(os.path.join(worker.dir, "state.json"))
        try:
            adopted = bool(state) and await adopt_pod(worker, state)
        except Exception:
            log.exception("pod %s/%s: re-adoption failed", worker.namespace, worker.name)
            adopted = False
        if adopted:
            log.info("pod %s/%s: re-adopted its running containers", worker.namespace, worker.name)
            await worker.run()
            return
        await worker.sandbox.stop_forwarding()
    await asyncio.to_thread(cleanup.clean_pod_leftovers, kubelet.state_dir, worker.uid, False)
    try:
        if origin is PodOrigin.NODE_RESTART:
            previous = {
                s["name"]: s
                for s in ((worker.pod.get("status") or {}).get("containerStatuses") or [])
            }
            previous.update(
                {
                    s["name"]: s
                    for s in ((worker.pod.get("status") or {}).get("initContainerStatuses") or [])
                }
            )
            now = now_rfc3339()
            for name, record in worker.records.items():
                before = previous.get(name) or {}
                record.restart_count = before.get("restartCount", 0)
                terminated = (before.get("state") or {}).get("terminated")
                record.state = ContainerState.TERMINATED
                if terminated:
                    record.exit_code, record.reason = (
                        terminated.get("exitCode"),
                        terminated.get("reason"),
                    )
                    record.started_at, record.finished_at = (
                        terminated.get("startedAt"),
                        terminated.get("finishedAt"),
                    )
                else:
                    record.exit_code, record.reason, record.finished_at = (
                        137,
                        "ContainerStatusUnknown",
                        now,
                    )
                    record.message = (
                        "The container could not be located when the pod was terminated"
                    )
            worker.fail_for_node_restart(NODE_RESTART_MESSAGE)
            await worker.reporter.flush()
            kubelet.record_event(worker.pod, "Warning", "NodeRestart", NODE_RESTART_MESSAGE)
        await worker.deletion_requested.wait()
        await worker.remove_pod_dir()
        if not worker.life.detached:
            await kubelet.api.delete_pod_now(worker.namespace, worker.name, worker.uid)
    except Exception:
        log.exception("pod %s/%s: settling failed", worker.namespace, worker.name)
    finally:
        kubelet.forget(worker.uid)
