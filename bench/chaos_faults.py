"""The chaos soak's injectors: one function per fault kind, on a running ChaosWorld.

Why this exists: each fault is injected the way the fault's own test does it, so the soak
measures the faults the product claims to handle, not new ones: a pod deleted as a drain does
(harness/gang_actions.py) or with grace 0, a node powered off (harness/node_power.py, powered
on again once its loss was noticed), localkube's outage switch (`POST /localkube/v1/outage`,
as tests/pipeline/test_pipeline_restarts.py), a service or an Airflow component killed with
SIGKILL and its supervisor's restart awaited (harness/service_kills.py, as
tests/airflow/test_services_self_healing.py), a task's process (Airflow titles it
`airflow worker -- <task instance id>`) killed with SIGKILL. "All services killed and
started again" kills the supervisor, then every service and component, then runs
`services.py up` (the pods keep running: their kubelets are not the API server).

Each injector returns what it did, in words, or raises FaultNotApplicable when the run gives
it nothing to act on (e.g. no pod any more); the soak records both.
"""

from __future__ import annotations

import os
import random
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.chaos_plan import FaultKind
from bench.chaos_world import ChaosWorld
from harness import gang_actions, node_power, service_kills
from scripts import airflow_components, supervision
from tfjob.naming import LABEL_JOB

OUTAGE_S = 20
NODE_DOWN_S = 60  # longer than localkube's node-monitor grace period (40 s): the loss is seen


class FaultNotApplicable(Exception):
    """The run offered nothing for this fault to act on (said in the soak's record)."""


@dataclass(frozen=True)
class Target:
    """The run a fault hits: its pods' namespace and job label, its Airflow ids."""

    namespace: str
    job: str
    dag_id: str
    run_id: str


def list_pods(world: ChaosWorld, target: Target) -> list[Any]:
    core = world.kube.core_v1()
    pods = core.list_namespaced_pod(target.namespace, label_selector=f"{LABEL_JOB}={target.job}")
    return [pod for pod in pods.items if pod.metadata.deletion_timestamp is None]


def pick_pod(world: ChaosWorld, target: Target, draw: random.Random) -> Any:
    pods = sorted(list_pods(world, target), key=lambda pod: pod.metadata.name)
    if not pods:
        raise FaultNotApplicable(f"{target.job} has no pod")
    return draw.choice(pods)


def delete_replica(world: ChaosWorld, target: Target, draw: random.Random) -> str:
    pod = pick_pod(world, target, draw)
    gang_actions.delete_like_a_drain(world, pod)
    return f"deleted pod {pod.metadata.name} with its grace period"


def delete_replica_now(world: ChaosWorld, target: Target, draw: random.Random) -> str:
    pod = pick_pod(world, target, draw)
    world.kube.core_v1().delete_namespaced_pod(
        pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0
    )
    return f"deleted pod {pod.metadata.name} with grace 0"


class NodeRestarts:
    """Nodes powered off by the soak, each powered on again NODE_DOWN_S later (`finish` waits)."""

    def __init__(self) -> None:
        self.timers: list[threading.Thread] = []

    def stop_for_a_while(self, world: ChaosWorld, node: str) -> None:
        node_power.stop_node(world, node)

        def power_on() -> None:
            threading.Event().wait(NODE_DOWN_S)
            node_power.start_node(world, node)

        timer = threading.Thread(target=power_on, name=f"power-on {node}", daemon=True)
        timer.start()
        self.timers.append(timer)

    def finish(self) -> None:
        for timer in self.timers:
            timer.join()


NODES = NodeRestarts()


def stop_node(world: ChaosWorld, target: Target, draw: random.Random) -> str:
    pod = pick_pod(world, target, draw)
    node = pod.spec.node_name
    if not node:
        raise FaultNotApplicable(f"pod {pod.metadata.name} is not on a node yet")
    NODES.stop_for_a_while(world, node)
    return f"node {node} (of pod {pod.metadata.name}) stopped for {NODE_DOWN_S} s"


def blink_api(world: ChaosWorld, target: Target, draw: random.Random) -> str:
    world.kube.request("POST", "/localkube/v1/outage", {"seconds": OUTAGE_S})
    return f"localkube's API server answered 503 for {OUTAGE_S} s"


def kill_service(world: ChaosWorld, name: str) -> str:
    table = world.state / supervision.STATE_FILE
    pid = service_kills.read_service_pid(world.state, name)
    row = service_kills.kill_and_await_restart(table, name, pid)
    return f"{name} pid {pid} killed; back as pid {row.pid}"


def kill_component(world: ChaosWorld, name: str) -> str:
    table = world.state / "airflow" / airflow_components.COMPONENTS_FILE
    pid = service_kills.await_running(table, name).pid
    assert pid is not None  # await_running returns a row with a live pid
    row = service_kills.kill_and_await_restart(table, name, pid)
    return f"airflow {name} pid {pid} killed; back as pid {row.pid}"


def find_task_process(task_instance_id: str) -> int | None:
    """The pid Airflow's task runner titled `airflow worker -- <task instance id>`."""
    title = f"airflow worker -- {task_instance_id}".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if (proc / "cmdline").read_bytes().rstrip(b"\0").startswith(title):
                return int(proc.name)
        except OSError:  # gone meanwhile
            continue
    return None


def kill_task_process(world: ChaosWorld, target: Target, draw: random.Random) -> str:
    path = f"/api/v2/dags/{target.dag_id}/dagRuns/{target.run_id}/taskInstances"
    instances = world.airflow().request("GET", path)["task_instances"]
    running = sorted((ti["task_id"], ti["id"]) for ti in instances if ti.get("state") == "running")
    for task_id, ti_id in running:
        pid = find_task_process(ti_id)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            return f"the process of task {task_id} (pid {pid}) killed"
    raise FaultNotApplicable(f"no running task process of {target.run_id}")


def restart_everything(world: ChaosWorld, target: Target, draw: random.Random) -> str:
    """SIGKILL to the supervisor, then to every service it watches and every Airflow
    component; then `services.py up`, as after a crash of the whole machine's services."""
    killed = []
    supervisor = supervision.find_supervisor(world.state)
    if supervisor is not None:
        os.kill(supervisor, signal.SIGKILL)
        killed.append(f"supervisor {supervisor}")
    # the supervisor's rows (each service, Airflow's launcher), then Airflow's components
    _, services = supervision.read_table(world.state / supervision.STATE_FILE)
    _, components = supervision.read_table(
        world.state / "airflow" / airflow_components.COMPONENTS_FILE
    )
    pids = [(row.name, row.pid) for row in services if row.pid]
    pids += [(f"airflow {row.name}", row.pid) for row in components if row.pid]
    for name, pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(f"{name} {pid}")
        except ProcessLookupError:
            continue
    up = world.services("up")
    if up.returncode != 0:
        raise RuntimeError(f"services.py up after killing everything failed:\n{up.stderr[-2000:]}")
    return "killed " + ", ".join(killed) + "; services.py up"


INJECTORS: dict[FaultKind, Callable[[ChaosWorld, Target, random.Random], str]] = {
    FaultKind.REPLICA_DELETED: delete_replica,
    FaultKind.REPLICA_DELETED_GRACE_0: delete_replica_now,
    FaultKind.NODE_STOPPED: stop_node,
    FaultKind.API_OUTAGE: blink_api,
    FaultKind.S3_KILLED: lambda world, _target, _draw: kill_service(world, "s3"),
    FaultKind.POSTGRES_RESTARTED: lambda world, _target, _draw: kill_service(world, "postgresql"),
    FaultKind.SCHEDULER_KILLED: lambda world, _target, _draw: kill_component(world, "scheduler"),
    FaultKind.TRIGGERER_KILLED: lambda world, _target, _draw: kill_component(world, "triggerer"),
    FaultKind.API_SERVER_KILLED: lambda world, _target, _draw: kill_component(world, "api-server"),
    FaultKind.TASK_PROCESS_KILLED: kill_task_process,
    FaultKind.ALL_SERVICES_RESTARTED: restart_everything,
}


def inject(world: ChaosWorld, kind: FaultKind, target: Target, draw: random.Random) -> str:
    return INJECTORS[kind](world, target, draw)
