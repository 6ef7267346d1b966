"""One pod on a simulated node: its containers' simulated life, reported like a real kubelet's.

The status is built by the real kubelet's pure functions (localkube/kubelet/status.py) and sent
by its reporter (statusreporter.py); state.json (marked `simulated`) and the CRI log files are
written where the API server's `pods/log` and `pods/exec` look. Life: Pending (ContainerCreating
for `simulate-start-seconds`), init containers each complete at once, the main containers run
(for `simulate-run-seconds`, or until stopped), exit with `simulate-exit-code` and are started
again as restartPolicy says (a second later: no back-off). A deletion sends the simulated SIGTERM:
the containers end after `simulate-stop-seconds` (143), or at the grace period's end (137); the
pod's directory goes and the pod is removed with gracePeriodSeconds=0, as a kubelet does.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import shutil
from enum import StrEnum
from typing import Protocol

from localkube.hollow import podfs
from localkube.hollow.rules import (
    RuleError,
    SimulationRule,
    ends_restarted,
    read_rule,
    stop_outcome,
)
from localkube.kubelet.apiclient import ApiClient
from localkube.kubelet.network import AddressPool, NetworkError
from localkube.kubelet.podstate import write_pod_state
from localkube.kubelet.status import (
    ContainerRecord,
    ContainerState,
    PodRuntimeFacts,
    build_container_records,
    build_pod_status,
    now_rfc3339,
)
from localkube.kubelet.statusreporter import PodStatusReporter
from localkube.kubelet.termination import read_grace_period

log = logging.getLogger(__name__)

RESTART_DELAY_S = 1.0
RUN_AFTER_FILE_POLL_S = 0.5  # how often a container waiting for its file looks for it
NODE_RESTART_MESSAGE = "the simulated kubelet restarted; the pod's simulated containers are lost"


class PodOrigin(StrEnum):
    """How the simulated kubelet came to the pod."""

    NEW = "new"  # to be started
    FINISHED = "finished"  # Succeeded/Failed before: only its deletion is left to do
    LOST = "lost"  # started by an earlier run of the simulated kubelet: reported Failed


class HollowNode(Protocol):
    """What a hollow pod needs from the simulated kubelet of its node."""

    node: str
    state_dir: str
    host_ip: str
    api: ApiClient
    addresses: AddressPool

    def record_event(
        self, pod: dict, kind: str, reason: str, message: str, container: str | None = None
    ) -> None: ...

    def forget(self, uid: str) -> None: ...


def cri_line(stream: str, text: str) -> str:
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return f"{stamp} {stream} F {text}\n"


class HollowPod:
    def __init__(self, node: HollowNode, pod: dict, origin: PodOrigin = PodOrigin.NEW) -> None:
        self.node, self.pod, self.origin = node, pod, origin
        meta = pod["metadata"]
        self.namespace, self.name, self.uid = meta["namespace"], meta["name"], meta["uid"]
        spec = pod.get("spec") or {}
        self.init_specs = spec.get("initContainers") or []
        self.main_specs = spec.get("containers") or []
        self.policy = spec.get("restartPolicy") or "Always"
        self.records = build_container_records(self.init_specs, self.main_specs)
        self.facts = PodRuntimeFacts(host_ip=node.host_ip)
        if origin is PodOrigin.LOST:
            self.facts.failure_reason, self.facts.failure_message = (
                "NodeRestart",
                NODE_RESTART_MESSAGE,
            )
        self.dir = os.path.join(node.state_dir, "kubelet", "pods", self.uid)
        self.reporter = PodStatusReporter(
            node.api, self.namespace, self.name, self.current_status, self.vanish
        )
        self.deletion = asyncio.Event()
        self.gone = False
        self.task: asyncio.Task | None = None

    # ---- events from the watch ---------------------------------------------------
    def start(self) -> None:
        self.task = asyncio.create_task(self.run(), name=f"hollow-{self.namespace}/{self.name}")

    def update(self, pod: dict) -> None:
        self.pod = pod
        if pod["metadata"].get("deletionTimestamp"):
            self.deletion.set()

    def vanish(self) -> None:
        """The pod left the API: stop at once, report nothing more."""
        self.gone = True
        self.reporter.enabled = False
        self.deletion.set()

    # ---- the pod's life ------------------------------------------------------------
    async def run(self) -> None:
        status_task = asyncio.create_task(self.reporter.run())
        try:
            life = asyncio.create_task(self.live())
            deletion = asyncio.create_task(self.deletion.wait())
            await asyncio.wait({life, deletion}, return_when=asyncio.FIRST_COMPLETED)
            life.cancel()
            await asyncio.gather(life, return_exceptions=True)
            await deletion
            if self.origin is PodOrigin.FINISHED:
                self.reporter.enabled = False  # its last status is already in the API
            if not self.gone:
                await self.stop(read_grace_period(self.pod))
                await self.reporter.flush()
            self.reporter.enabled = False
            self.node.addresses.release(self.facts.pod_ip)
            await asyncio.to_thread(shutil.rmtree, self.dir, True)
            if not self.gone:
                await self.node.api.delete_pod_now(self.namespace, self.name, self.uid)
        except Exception:
            log.exception("hollow pod %s/%s: failed", self.namespace, self.name)
        finally:
            status_task.cancel()
            self.node.forget(self.uid)

    async def live(self) -> None:
        """Everything until the pod ends by itself (or forever); cancelled by a deletion."""
        if self.origin is not PodOrigin.NEW:
            self.mark_dirty()
            await asyncio.Event().wait()
        try:
            rule = read_rule(self.pod)
        except RuleError as error:
            for record in self.records.values():
                record.waiting_reason = "CreateContainerConfigError"
                record.waiting_message = str(error)
            self.node.record_event(self.pod, "Warning", "Failed", f"Error: {error}")
            self.mark_dirty()
            await asyncio.Event().wait()
        await asyncio.sleep(rule.start_seconds)
        try:
            self.facts.pod_ip = self.node.addresses.allocate()
        except NetworkError as error:  # more pods than the node's /24 holds
            self.node.record_event(self.pod, "Warning", "FailedCreatePodSandBox", str(error))
            for record in self.records.values():
                record.waiting_message = str(error)
            self.mark_dirty()
            await asyncio.Event().wait()
        self.facts.start_time = now_rfc3339()
        mounts = [
            m["mountPath"]
            for c in self.init_specs + self.main_specs
            for m in c.get("volumeMounts") or []
            if m.get("mountPath")
        ]
        await asyncio.to_thread(podfs.create_root, self.dir, mounts)
        for spec in self.init_specs:
            record = self.records[spec["name"]]
            self.begin(record)
            self.end(record, 0)
        for spec in self.main_specs:
            self.begin(self.records[spec["name"]])
        self.mark_dirty()
        await asyncio.gather(
            *(self.run_container(self.records[c["name"]], rule) for c in self.main_specs)
        )

    async def run_container(self, record: ContainerRecord, rule: SimulationRule) -> None:
        if rule.run_after_file and rule.run_seconds is not None:
            # as a program that waits for its configuration (the ClusterSpec) before it works
            path = podfs.host_path(podfs.build_root(self.dir), "/", rule.run_after_file)
            while not await asyncio.to_thread(os.path.exists, path):
                await asyncio.sleep(RUN_AFTER_FILE_POLL_S)
        while rule.run_seconds is not None:
            await asyncio.sleep(rule.run_seconds)
            self.end(record, rule.exit_code)
            self.mark_dirty()
            if not ends_restarted(self.policy, rule.exit_code):
                return
            await asyncio.sleep(RESTART_DELAY_S)
            record.last_terminated = record.terminated_view()
            record.restart_count += 1
            self.begin(record)
            self.mark_dirty()

    def begin(self, record: ContainerRecord) -> None:
        record.state = ContainerState.RUNNING
        record.started_at, record.finished_at = now_rfc3339(), None
        record.exit_code = record.reason = None
        record.container_id = (
            f"localkube-hollow://{self.uid[:8]}-{record.name}-{record.restart_count}"
        )
        record.ready = not record.is_init
        self.write_state()
        self.append_log(
            record,
            [
                f"simulated container {record.name} of pod {self.namespace}/{self.name} started on "
                f"node {self.node.node} (image {record.image})",
                f"pod IP {self.facts.pod_ip}, restart {record.restart_count}",
            ],
        )
        if not record.is_init:
            self.node.record_event(
                self.pod, "Normal", "Started", f"Started container {record.name}", record.name
            )

    def end(self, record: ContainerRecord, exit_code: int) -> None:
        if record.state is not ContainerState.RUNNING:
            return
        record.state = ContainerState.TERMINATED
        record.exit_code = exit_code
        record.reason = "Completed" if exit_code == 0 else "Error"
        record.finished_at = now_rfc3339()
        record.ready = False
        self.append_log(record, [f"simulated container {record.name} exited with code {exit_code}"])
        self.write_state()

    async def stop(self, grace: float) -> None:
        """The simulated SIGTERM (and SIGKILL at the grace period's end) of running containers."""
        running = [r for r in self.records.values() if r.state is ContainerState.RUNNING]
        try:
            rule = read_rule(self.pod)
        except RuleError:
            rule = SimulationRule()
        seconds, code = stop_outcome(rule, grace)
        for record in running:
            self.node.record_event(
                self.pod, "Normal", "Killing", f"Stopping container {record.name}", record.name
            )
            self.append_log(
                record,
                [
                    "simulated container received SIGTERM"
                    if grace > 0
                    else "simulated container received SIGKILL"
                ],
            )
        await asyncio.sleep(seconds)
        for record in running:
            self.end(record, code)
        self.mark_dirty()

    # ---- files the API server reads ---------------------------------------------------
    def write_state(self) -> None:
        if not os.path.isdir(os.path.dirname(self.dir)):
            os.makedirs(os.path.dirname(self.dir), mode=0o700, exist_ok=True)
        state = {
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "node": self.node.node,
            "netns": None,
            "ip": self.facts.pod_ip,
            "simulated": True,
            "containers": {
                name: {
                    "pid": None,
                    "restartCount": r.restart_count,
                    "running": r.state is ContainerState.RUNNING,
                    "env": container_environment(self.spec_of(name)),
                    "workingDir": self.spec_of(name).get("workingDir") or "/",
                }
                for name, r in self.records.items()
            },
        }
        write_pod_state(self.dir, state)

    def spec_of(self, name: str) -> dict:
        return next((c for c in self.init_specs + self.main_specs if c["name"] == name), {})

    def append_log(self, record: ContainerRecord, lines: list[str]) -> None:
        directory = os.path.join(self.dir, "logs", record.name)
        os.makedirs(directory, mode=0o700, exist_ok=True)
        with open(os.path.join(directory, f"{record.restart_count}.log"), "a") as f:
            f.writelines(cri_line("stdout", line) for line in lines)

    # ---- status ----------------------------------------------------------------------
    def mark_dirty(self) -> None:
        self.reporter.mark_dirty()

    def current_status(self) -> dict:
        init = [self.records[c["name"]] for c in self.init_specs]
        main = [self.records[c["name"]] for c in self.main_specs]
        return build_pod_status(self.pod, init, main, self.facts)


def container_environment(spec: dict) -> dict[str, str]:
    """The literal `env` values of a container (what `env` in an exec shows); references to
    ConfigMaps, Secrets and fields are not resolved in a simulated pod."""
    return {
        e["name"]: str(e.get("value", ""))
        for e in spec.get("env") or []
        if "name" in e and "valueFrom" not in e
    }
