"""Simulated (hollow) nodes: scheduled onto like any node, their pods reported by rules on the
pods, logs and exec served through the API server's own routes, deletion with grace, and a
cluster that mixes them with a real node.

A cluster of simulated nodes only needs no root (no process, namespace or cgroup is made per
pod); the mixed cluster does. The simulated shell's rules are first checked in-process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import kubernetes
import pytest
from kubernetes.stream import stream

from harness.localkube_fixtures import LocalkubeHandle, start_localkube, stop_localkube, wait_until
from localkube.hollow import podfs, rules
from localkube.hollow.shell import run_command
from operators.delivery import deliver_cluster_file

SIMULATED_NODES = """
- name: sim-1
  simulated: true
  capacity: {cpu: "8", memory: 16Gi, pods: "110"}
- name: sim-2
  simulated: true
  capacity: {cpu: "8", memory: 16Gi, pods: "110", nvidia.com/gpu: "4"}
  labels: {nvidia.com/gpu.product: FAKE-H100}
"""
MIXED_NODES = """
- name: node-1
  capacity: {cpu: "8", memory: 16Gi, pods: "110"}
- name: sim-1
  simulated: true
  capacity: {cpu: "8", memory: 16Gi, pods: "110"}
"""
WAIT_S = 30.0


@pytest.fixture(scope="module")
def hollow(tmp_path_factory: pytest.TempPathFactory):
    directory = tmp_path_factory.mktemp("hollow")
    nodes = directory / "nodes.yaml"
    nodes.write_text(SIMULATED_NODES)
    handle = start_localkube(directory, nodes_file=str(nodes))
    try:
        yield handle
    finally:
        stop_localkube(handle)


def make_pod(
    name: str,
    annotations: dict | None = None,
    node_selector: dict | None = None,
    gpus: int = 0,
    restart_policy: str = "Never",
    grace: int | None = None,
) -> dict:
    container = {
        "name": "tensorflow",
        "image": "busybox",
        "volumeMounts": [{"name": "config", "mountPath": "/tfjob/config"}],
    }
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    spec = {
        "restartPolicy": restart_policy,
        "initContainers": [{"name": "fetch", "image": "busybox"}],
        "containers": [container],
        "volumes": [{"name": "config", "emptyDir": {}}],
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"metadata": {"name": name, "annotations": annotations or {}}, "spec": spec}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def wait_phase(core, name: str, phases: tuple[str, ...]):
    def reached():
        pod = core.read_namespaced_pod(name, "default")
        return pod if pod.status.phase in phases else None

    return wait_until(reached, WAIT_S, f"pod {name} in {phases}")


def is_gone(core, name: str) -> bool:
    try:
        core.read_namespaced_pod(name, "default")
    except kubernetes.client.ApiException as error:
        return error.status == 404
    return False


def read_log(core, name: str) -> str:
    return core.read_namespaced_pod_log(
        name, "default", container="tensorflow", _preload_content=False
    ).data.decode()


def exec_text(core, name: str, command: list[str]) -> str:
    client = stream(
        core.connect_get_namespaced_pod_exec,
        name,
        "default",
        container="tensorflow",
        command=command,
        stdout=True,
        stderr=True,
        stdin=False,
        tty=False,
        _preload_content=False,
    )
    client.run_forever(timeout=10)
    return client.read_stdout()


# ---- the simulated shell and the rules, in-process --------------------------------------------


def test_the_delivery_command_writes_the_file_and_cat_reads_it(tmp_path: Path) -> None:
    root = podfs.create_root(str(tmp_path), ["/tfjob/config"])
    script = (
        'printf "%s" "$1" > /tfjob/config/.cluster.json.tmp'
        " && mv /tfjob/config/.cluster.json.tmp /tfjob/config/cluster.json"
    )
    content = '{"cluster": {"worker": ["w-0:2222"]}, "note": "it\'s $HOME \\" and `x`"}'
    written = run_command(root, ["sh", "-c", script, "sh", content], {}, "/", "p")
    assert (written.code, bytes(written.stderr)) == (0, b"")
    read = run_command(root, ["cat", "/tfjob/config/cluster.json"], {}, "/", "p")
    assert bytes(read.stdout).decode() == content
    assert sorted(os.listdir(Path(root) / "tfjob" / "config")) == ["cluster.json"]


def test_paths_never_leave_the_pods_root_and_unknown_programs_are_not_found(tmp_path: Path):
    root = podfs.create_root(str(tmp_path / "pod"), [])
    (tmp_path / "secret").write_text("host file")
    escaped = run_command(root, ["sh", "-c", "cat ../../../secret; echo $?"], {}, "/", "p")
    assert bytes(escaped.stdout) == b"1\n" and b"No such file" in escaped.stderr
    assert run_command(root, ["python3", "-c", "1"], {}, "/", "p").code == 127
    piped = run_command(root, ["sh", "-c", "ls / | wc -l"], {}, "/", "p")
    assert piped.code == 2 and b"not supported" in piped.stderr
    assert run_command(root, ["sh", "-c", "false || exit 7; echo no"], {}, "/", "p").code == 7


def test_bad_rule_values_name_the_annotation_and_what_is_allowed() -> None:
    with pytest.raises(
        rules.RuleError, match="simulate-exit-code: '300' given; an integer from 0 to 255"
    ):
        rules.read_rule({"metadata": {"annotations": {rules.EXIT_CODE: "300"}}})
    with pytest.raises(rules.RuleError, match="simulate-run-seconds: 'soon' given"):
        rules.read_rule({"metadata": {"annotations": {rules.RUN_SECONDS: "soon"}}})
    assert rules.stop_outcome(rules.SimulationRule(stop_seconds=5), 2) == (2, 137)
    assert rules.stop_outcome(rules.SimulationRule(stop_seconds=1), 2) == (1, 143)


# ---- a cluster of simulated nodes -------------------------------------------------------------


def test_simulated_nodes_are_ready_and_take_pods_by_selector_and_gpus(hollow: LocalkubeHandle):
    core = hollow.core_v1()
    ready = {
        n.metadata.name: n
        for n in core.list_node().items
        if any(c.type == "Ready" and c.status == "True" for c in n.status.conditions)
    }
    assert set(ready) == {"sim-1", "sim-2"}
    assert ready["sim-2"].status.node_info.container_runtime_version.startswith(
        "localkube-hollow://"
    )
    name = unique("gpu")
    core.create_namespaced_pod(
        "default", make_pod(name, node_selector={"nvidia.com/gpu.product": "FAKE-H100"}, gpus=2)
    )
    pod = wait_phase(core, name, ("Running",))
    assert pod.spec.node_name == "sim-2"
    assert pod.metadata.annotations["localkube.io/gpu-ids"] == "0,1"
    assert pod.status.pod_ip.startswith("10.77.2.")  # sim-2 is the second node: 10.77.2.0/24
    assert pod.status.init_container_statuses[0].state.terminated.reason == "Completed"
    running = pod.status.container_statuses[0]
    assert running.ready and running.state.running is not None
    assert {c.type: c.status for c in pod.status.conditions} == {
        "Initialized": "True",
        "Ready": "True",
        "ContainersReady": "True",
        "PodScheduled": "True",
    }
    too_many = unique("gpus")
    core.create_namespaced_pod("default", make_pod(too_many, gpus=8))
    wait_until(
        lambda: any(
            e.reason == "FailedScheduling" and "Insufficient nvidia.com/gpu" in e.message
            for e in core.list_namespaced_event(
                "default", field_selector=f"involvedObject.name={too_many}"
            ).items
        ),
        WAIT_S,
        "FailedScheduling of a pod asking for 8 GPUs",
    )
    for each in (name, too_many):
        core.delete_namespaced_pod(each, "default", grace_period_seconds=0)


def test_pods_end_by_their_rules_and_serve_logs(hollow: LocalkubeHandle) -> None:
    core = hollow.core_v1()
    done, failed = unique("done"), unique("failed")
    core.create_namespaced_pod("default", make_pod(done, {rules.RUN_SECONDS: "0.5"}))
    core.create_namespaced_pod(
        "default", make_pod(failed, {rules.RUN_SECONDS: "0.5", rules.EXIT_CODE: "3"})
    )
    succeeded = wait_phase(core, done, ("Succeeded", "Failed"))
    assert succeeded.status.phase == "Succeeded"
    assert succeeded.status.container_statuses[0].state.terminated.exit_code == 0
    lost = wait_phase(core, failed, ("Succeeded", "Failed"))
    assert lost.status.phase == "Failed"
    terminated = lost.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (3, "Error")
    log = read_log(core, failed)
    assert f"simulated container tensorflow of pod default/{failed} started" in log
    assert log.rstrip().endswith("simulated container tensorflow exited with code 3")
    for each in (done, failed):
        core.delete_namespaced_pod(each, "default")
        wait_until(lambda each=each: is_gone(core, each), WAIT_S, f"{each} gone")


def test_restart_policy_always_starts_the_container_again(hollow: LocalkubeHandle) -> None:
    core = hollow.core_v1()
    name = unique("again")
    core.create_namespaced_pod(
        "default", make_pod(name, {rules.RUN_SECONDS: "0.3"}, restart_policy="Always")
    )
    pod = wait_until(
        lambda: (
            (p := core.read_namespaced_pod(name, "default")).status.container_statuses
            and p.status.container_statuses[0].restart_count >= 2
            and p
        ),
        WAIT_S,
        "two restarts",
    )
    assert pod.status.phase == "Running"
    assert pod.status.container_statuses[0].last_state.terminated.exit_code == 0
    core.delete_namespaced_pod(name, "default", grace_period_seconds=0)


def test_a_bad_rule_keeps_the_pod_waiting_with_the_reason(hollow: LocalkubeHandle) -> None:
    core = hollow.core_v1()
    name = unique("bad")
    core.create_namespaced_pod("default", make_pod(name, {rules.RUN_SECONDS: "-1"}))

    def waiting():
        statuses = core.read_namespaced_pod(name, "default").status.container_statuses
        state = statuses and statuses[0].state.waiting
        return state if state and state.reason == "CreateContainerConfigError" else None

    state = wait_until(waiting, WAIT_S, "CreateContainerConfigError")
    assert "simulate-run-seconds: '-1' given" in state.message
    core.delete_namespaced_pod(name, "default")
    wait_until(lambda: is_gone(core, name), WAIT_S, f"{name} gone")


def test_cluster_spec_delivery_by_exec_lands_in_the_pods_files(hollow: LocalkubeHandle) -> None:
    core = hollow.core_v1()
    name = unique("exec")
    core.create_namespaced_pod("default", make_pod(name))
    wait_phase(core, name, ("Running",))
    content = json.dumps(
        {
            "cluster": {"worker": [f"{name}-{i}:2222" for i in range(3)]},
            "task": {"type": "worker", "index": 0},
        }
    )
    deliver_cluster_file(core, "default", name, content)
    assert exec_text(core, name, ["cat", "/tfjob/config/cluster.json"]) == content
    state_dir = Path(hollow.state_dir) / "kubelet" / "pods"
    uid = core.read_namespaced_pod(name, "default").metadata.uid
    on_disk = state_dir / uid / "rootfs" / "tfjob" / "config" / "cluster.json"
    assert on_disk.read_text() == content
    state = json.loads((state_dir / uid / "state.json").read_text())
    assert state["simulated"] and state["containers"]["tensorflow"]["pid"] is None
    # The init container has ended: refused as a real one is (read directly: the sync client
    # turns a refused upgrade into AttributeError).
    request = urllib.request.Request(
        f"{hollow.api_url}/api/v1/namespaces/default/pods/{name}/exec"
        "?command=true&stdout=true&container=fetch",
        headers={
            "Connection": "Upgrade",
            "Upgrade": "websocket",
            "Sec-WebSocket-Version": "13",
            "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
            "Sec-WebSocket-Protocol": "v4.channel.k8s.io",
            **hollow.auth_headers(),
        },
    )
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(request, timeout=10, context=hollow.ssl_context())
    assert error.value.code == 400
    assert (
        json.loads(error.value.read())["message"]
        == 'unable to upgrade connection: container not found ("fetch")'
    )
    core.delete_namespaced_pod(name, "default")
    wait_until(lambda: is_gone(core, name), WAIT_S, f"{name} gone")
    assert not (state_dir / uid).exists()


def test_a_cluster_spec_of_a_thousand_replicas_fits_in_the_exec_url(hollow: LocalkubeHandle):
    # The argv travels in the exec's query string: ~60 KB here, over aiohttp's default 8 KB
    # request line (kube-apiserver accepts 1 MB of headers).
    core = hollow.core_v1()
    name = unique("big")
    core.create_namespaced_pod("default", make_pod(name))
    wait_phase(core, name, ("Running",))
    workers = [f"10.77.{i // 250 + 1}.{i % 250 + 2}:2222" for i in range(1024)]
    content = json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": 7}})
    assert len(content) > 8190 * 2
    deliver_cluster_file(core, "default", name, content)
    assert exec_text(core, name, ["cat", "/tfjob/config/cluster.json"]) == content
    core.delete_namespaced_pod(name, "default", grace_period_seconds=0)


def watch_until_deleted(handle: LocalkubeHandle, name: str, seen: list) -> threading.Thread:
    """Record every event of pod `name` until it is DELETED, in a thread."""

    def run() -> None:
        core = handle.core_v1()
        for event in kubernetes.watch.Watch().stream(
            core.list_namespaced_pod,
            "default",
            field_selector=f"metadata.name={name}",
            timeout_seconds=int(WAIT_S),
        ):
            seen.append((event["type"], event["object"]))
            if event["type"] == "DELETED":
                return

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize(("stop_seconds", "grace", "exit_code"), [("1", 30, 143), ("60", 1, 137)])
def test_deletion_ends_the_containers_within_the_grace_period(
    hollow: LocalkubeHandle, stop_seconds: str, grace: int, exit_code: int
) -> None:
    core = hollow.core_v1()
    name = unique("stop")
    core.create_namespaced_pod(
        "default", make_pod(name, {rules.STOP_SECONDS: stop_seconds}, grace=grace)
    )
    wait_phase(core, name, ("Running",))
    seen: list = []
    watcher = watch_until_deleted(hollow, name, seen)
    core.delete_namespaced_pod(name, "default")
    terminating = core.read_namespaced_pod(name, "default")
    assert terminating.metadata.deletion_timestamp is not None
    assert terminating.metadata.deletion_grace_period_seconds == grace
    watcher.join(WAIT_S + 5)
    assert seen and seen[-1][0] == "DELETED"
    last = seen[-1][1].status.container_statuses[0].state.terminated
    assert last is not None and last.exit_code == exit_code
    assert any(e[0] == "MODIFIED" and e[1].metadata.deletion_timestamp for e in seen), (
        "the Terminating pod was seen before it went"
    )


# ---- a real node beside a simulated one ---------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="the real node's kubelet needs root")
def test_a_real_and_a_simulated_node_in_one_cluster(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(MIXED_NODES)
    handle = start_localkube(tmp_path, nodes_file=str(nodes))
    try:
        core = handle.core_v1()
        info = json.loads((Path(handle.state_dir) / "localkube.json").read_text())
        assert info["simulated_nodes"] == ["sim-1"]
        hollow_pid = info["pids"]["kubelets"]["sim-1"]
        assert hollow_pid != info["pids"]["kubelets"]["node-1"]
        real = {
            "metadata": {"name": "real"},
            "spec": {
                "nodeName": "node-1",
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "tensorflow",
                        "image": "busybox",
                        "command": ["sh", "-c", "echo from a real process; sleep 600"],
                    }
                ],
            },
        }
        core.create_namespaced_pod("default", real)
        simulated = make_pod("simulated")
        simulated["spec"]["nodeName"] = "sim-1"
        core.create_namespaced_pod("default", simulated)
        assert wait_phase(core, "real", ("Running",)).status.pod_ip.startswith("10.77.1.")
        assert wait_phase(core, "simulated", ("Running",)).status.pod_ip.startswith("10.77.2.")
        wait_until(lambda: "from a real process" in read_log(core, "real"), WAIT_S, "real log")
        assert "simulated container tensorflow" in read_log(core, "simulated")
        assert exec_text(core, "real", ["cat", "/proc/1/cmdline"]).startswith("sh")
        assert exec_text(core, "simulated", ["hostname"]) == "simulated\n"
        children = [
            p for p in os.listdir("/proc") if p.isdigit() and _parent_of(int(p)) == hollow_pid
        ]
        assert children == [], "the simulated kubelet started processes"
        refused = subprocess.run(
            [
                sys.executable,
                "-m",
                "localkube",
                "node-stop",
                "sim-1",
                "--state-dir",
                handle.state_dir,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert refused.returncode == 1 and "node 'sim-1' is simulated" in refused.stderr
        for name in ("real", "simulated"):
            core.delete_namespaced_pod(name, "default", grace_period_seconds=1)
        wait_until(
            lambda: is_gone(core, "real") and is_gone(core, "simulated"), WAIT_S, "both pods gone"
        )
    finally:
        stop_localkube(handle)


def _parent_of(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def test_the_api_server_counts_requests_by_verb_and_resource(hollow: LocalkubeHandle) -> None:
    def counts() -> dict:
        return hollow.request("GET", "/localkube/v1/requests")["counts"]

    before = counts()
    hollow.core_v1().list_namespaced_config_map("default")
    after = counts()
    assert after.get("LIST configmaps", 0) == before.get("LIST configmaps", 0) + 1
    assert after["PATCH nodes/status"] >= 2  # each simulated node reported at least once
