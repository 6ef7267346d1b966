"""The kubelet running real pods: namespaces, network, volumes, limits, deletion, cleanup.

Every test goes through a real localkube (API server + two kubelets) and the
`kubernetes` client; pods are real processes. Needs root.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest

from harness.localkube_fixtures import start_localkube, stop_localkube, wait_until
from localkube.kubelet.cleanup import list_state_netns
from localkube.kubelet.exec import ContainerNotRunning, build_exec_command
from localkube.kubelet.network import state_hash

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="the kubelet needs root"),
]

POD_TIMEOUT_S = 30.0
HOST_REPLY = b"hello from the host"


def poll(predicate, timeout: float = POD_TIMEOUT_S, interval: float = 0.1):
    return wait_until(predicate, timeout, "condition", interval)


class HostService:
    """A TCP server on the host's 127.0.0.1 that answers HOST_REPLY to every connection."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.sendall(HOST_REPLY)
            conn.close()


@pytest.fixture(scope="module")
def host_service():
    service = HostService()
    yield service
    service.sock.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, host_service):
    handle = start_localkube(tmp_path_factory.mktemp("kubelet"), forward_ports=(host_service.port,))
    yield handle
    stop_localkube(handle)


@pytest.fixture(scope="module")
def v1(cluster):
    return cluster.core_v1()


def make_pod(name: str, command: list[str], **extra) -> dict:
    container = {"name": "main", "image": extra.pop("image", "python:3.11"), "command": command}
    container.update(extra.pop("container", {}))
    spec = {"restartPolicy": extra.pop("restart_policy", "Never"), "containers": [container]}
    spec.update(extra)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def wait_phase(v1, name: str, phases: tuple[str, ...], timeout: float = POD_TIMEOUT_S):
    return poll(
        lambda: (p := v1.read_namespaced_pod(name, "default")).status.phase in phases and p, timeout
    )


def wait_gone(v1, name: str, timeout: float = POD_TIMEOUT_S) -> None:
    import kubernetes

    def gone() -> bool:
        try:
            v1.read_namespaced_pod(name, "default")
            return False
        except kubernetes.client.ApiException as exc:
            return exc.status == 404

    poll(gone, timeout)


def read_log(v1, name: str, **kwargs) -> str:
    # kubernetes 36 returns str(bytes) for logs unless the raw response is read
    return v1.read_namespaced_pod_log(
        name, "default", _preload_content=False, **kwargs
    ).data.decode()


def processes_with(marker: str) -> list[int]:
    """Host pids whose command line contains `marker` (the pods' processes, seen from the host)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(entry))
        except OSError:
            pass
    return found


def test_pod_runs_with_its_env_hostname_volumes_and_logs(v1):
    name = unique("basic")
    script = (
        "echo ip=$POD_IP name=$POD_NAME; hostname; "
        "echo hi > /tfjob/workspace/f; cat /tfjob/workspace/f; "
        "cat /cfg/greeting; ls /airflow/xcom && echo xcom-ok; echo err >&2"
    )
    v1.create_namespaced_config_map(
        "default", {"metadata": {"name": name}, "data": {"greeting": "hello-cm"}}
    )
    pod = make_pod(
        name,
        ["sh", "-c", script],
        container={
            "env": [
                {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            ],
            "volumeMounts": [
                {"name": "work", "mountPath": "/tfjob/workspace"},
                {"name": "cfg", "mountPath": "/cfg"},
                {"name": "xcom", "mountPath": "/airflow/xcom"},
            ],
        },
        volumes=[
            {"name": "work", "emptyDir": {}},
            {"name": "cfg", "configMap": {"name": name}},
            {"name": "xcom", "emptyDir": {}},
        ],
    )
    v1.create_namespaced_pod("default", pod)
    done = wait_phase(v1, name, ("Succeeded", "Failed"))
    assert done.status.phase == "Succeeded"
    assert done.status.pod_ip.startswith("10.77.")
    state = done.status.container_statuses[0].state.terminated
    assert state.exit_code == 0 and state.reason == "Completed"
    log = read_log(v1, name)
    assert f"ip={done.status.pod_ip} name={name}" in log
    assert f"\n{name}\n" in log and "hi\nhello-cmxcom-ok" in log and "err" in log
    assert (
        not os.path.exists("/tfjob")
        and not os.path.exists("/airflow")
        and not os.path.exists("/cfg")
    )
    v1.delete_namespaced_pod(name, "default")
    wait_gone(v1, name)


def test_pods_on_both_nodes_listen_on_one_port_and_talk_across_nodes(v1):
    server = (
        "import socket\ns=socket.socket()\n"
        "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "s.bind(('0.0.0.0', 2222)); s.listen(); print('listening', flush=True)\n"
        "while True:\n c,_=s.accept(); c.sendall(socket.gethostname().encode()); c.close()\n"
    )
    names = [unique("srv1"), unique("srv2")]
    for name, node in zip(names, ("node-1", "node-2"), strict=True):
        v1.create_namespaced_pod(
            "default",
            make_pod(
                name,
                ["python3", "-c", server],
                nodeSelector={"kubernetes.io/hostname": node},
                terminationGracePeriodSeconds=1,
            ),
        )
    pods = [wait_phase(v1, n, ("Running",)) for n in names]
    assert {p.spec.node_name for p in pods} == {"node-1", "node-2"}
    poll(lambda: all("listening" in read_log(v1, n) for n in names))
    client_name = unique("client")
    client = (
        f"import socket\nfor ip in {[p.status.pod_ip for p in pods]!r}:\n"
        " c=socket.create_connection((ip, 2222), timeout=5); print(c.recv(100).decode())\n"
    )
    v1.create_namespaced_pod(
        "default",
        make_pod(
            client_name,
            ["python3", "-c", client],
            nodeSelector={"kubernetes.io/hostname": "node-2"},
        ),
    )
    done = wait_phase(v1, client_name, ("Succeeded", "Failed"))
    assert done.status.phase == "Succeeded", read_log(v1, client_name)
    assert read_log(v1, client_name).split() == names
    for name in names + [client_name]:
        v1.delete_namespaced_pod(name, "default")
    for name in names + [client_name]:
        wait_gone(v1, name)


def test_forwarded_host_port_answers_on_the_pods_loopback(v1, host_service):
    name = unique("fwd")
    code = (
        "import socket\n"
        f"c=socket.create_connection(('127.0.0.1', {host_service.port}), timeout=5)\n"
        "print(c.recv(100).decode())"
    )
    v1.create_namespaced_pod("default", make_pod(name, ["python3", "-c", code]))
    done = wait_phase(v1, name, ("Succeeded", "Failed"))
    assert done.status.phase == "Succeeded", read_log(v1, name)
    assert HOST_REPLY.decode() in read_log(v1, name)
    v1.delete_namespaced_pod(name, "default")


def test_memory_limit_exceeded_is_oomkilled(v1):
    name = unique("oom")
    pod = make_pod(
        name,
        ["python3", "-c", "x = bytearray(300 * 2**20); print('survived')"],
        container={"resources": {"limits": {"memory": "64Mi"}}},
    )
    v1.create_namespaced_pod("default", pod)
    done = wait_phase(v1, name, ("Succeeded", "Failed"))
    state = done.status.container_statuses[0].state.terminated
    assert done.status.phase == "Failed"
    assert state.reason == "OOMKilled" and state.exit_code == 137
    v1.delete_namespaced_pod(name, "default")


def test_delete_sends_sigterm_then_sigkill_after_the_grace_period(v1):
    marker = uuid.uuid4().hex
    stubborn = (
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"print('ready', flush=True)\ntime.sleep(3600)  # {marker}"
    )
    polite = (
        "import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
        f"print('ready', flush=True)\ntime.sleep(3600)  # {marker}"
    )
    stubborn_name, polite_name = unique("stubborn"), unique("polite")
    v1.create_namespaced_pod("default", make_pod(stubborn_name, ["python3", "-c", stubborn]))
    v1.create_namespaced_pod("default", make_pod(polite_name, ["python3", "-c", polite]))
    for name in (stubborn_name, polite_name):
        wait_phase(v1, name, ("Running",))
        poll(lambda n=name: "ready" in read_log(v1, n))
    assert len(processes_with(marker)) == 2
    start = time.monotonic()
    v1.delete_namespaced_pod(polite_name, "default", grace_period_seconds=30)
    wait_gone(v1, polite_name)
    # The bound is the grace period's, not a speed target: a busy 2-core machine needs seconds.
    assert time.monotonic() - start < 20, (
        "a process that exits on SIGTERM must not wait for the 30 s grace period"
    )
    start = time.monotonic()
    v1.delete_namespaced_pod(stubborn_name, "default", grace_period_seconds=2)
    pod = v1.read_namespaced_pod(stubborn_name, "default")
    assert pod.metadata.deletion_timestamp is not None
    wait_gone(v1, stubborn_name)
    elapsed = time.monotonic() - start
    assert 2 <= elapsed < 20, f"{elapsed:.1f} s: SIGKILL must follow the 2 s grace, not never"
    assert processes_with(marker) == []


def test_unmapped_image_fails_like_an_unpullable_image(v1):
    name = unique("noimage")
    v1.create_namespaced_pod("default", make_pod(name, ["true"], image="nginx:1.27"))

    def reason():
        pod = v1.read_namespaced_pod(name, "default")
        statuses = pod.status.container_statuses or []
        return statuses and statuses[0].state.waiting and statuses[0].state.waiting.reason

    assert poll(lambda: reason() in ("ErrImagePull", "ImagePullBackOff"))
    assert poll(lambda: reason() == "ImagePullBackOff")
    assert v1.read_namespaced_pod(name, "default").status.phase == "Pending"
    events = v1.list_namespaced_event("default", field_selector=f"involvedObject.name={name}").items
    assert any(
        e.reason == "Failed" and 'Failed to pull image "nginx:1.27"' in e.message for e in events
    )
    v1.delete_namespaced_pod(name, "default")
    wait_gone(v1, name)


def test_init_containers_run_in_order_and_on_failure_restarts(v1):
    name = unique("init")
    pod = make_pod(
        name,
        [
            "sh",
            "-c",
            "cat /w/order; n=$(cat /w/n 2>/dev/null || echo 0); echo $((n+1)) > /w/n; [ $n -ge 1 ]",
        ],
        restart_policy="OnFailure",
        container={"volumeMounts": [{"name": "w", "mountPath": "/w"}]},
        initContainers=[
            {
                "name": f"i{i}",
                "image": "busybox:1.36",
                "command": ["sh", "-c", f"echo i{i} >> /w/order"],
                "volumeMounts": [{"name": "w", "mountPath": "/w"}],
            }
            for i in (1, 2)
        ],
        volumes=[{"name": "w", "emptyDir": {}}],
    )
    v1.create_namespaced_pod("default", pod)
    done = wait_phase(v1, name, ("Succeeded", "Failed"))
    assert done.status.phase == "Succeeded"
    assert [s.state.terminated.reason for s in done.status.init_container_statuses] == [
        "Completed",
        "Completed",
    ]
    main = done.status.container_statuses[0]
    assert main.restart_count == 1 and main.last_state.terminated.exit_code == 1
    assert read_log(v1, name).split() == ["i1", "i2"]
    assert read_log(v1, name, previous=True).split() == ["i1", "i2"]
    v1.delete_namespaced_pod(name, "default")


def test_active_deadline_fails_the_pod(v1):
    name = unique("deadline")
    v1.create_namespaced_pod(
        "default",
        make_pod(name, ["sleep", "3600"], activeDeadlineSeconds=1, terminationGracePeriodSeconds=1),
    )
    done = wait_phase(v1, name, ("Failed",))
    assert done.status.reason == "DeadlineExceeded"
    v1.delete_namespaced_pod(name, "default")


def test_exec_command_runs_inside_the_container(v1, cluster):
    name = unique("exec")
    v1.create_namespaced_pod(
        "default",
        make_pod(
            name,
            ["sleep", "3600"],
            terminationGracePeriodSeconds=0,
            container={"env": [{"name": "GREETING", "value": "hi"}], "workingDir": "/srv/lk-work"},
        ),
    )
    pod = wait_phase(v1, name, ("Running",))
    argv, env, cwd = build_exec_command(
        cluster.state_dir,
        pod.metadata.uid,
        "main",
        ["sh", "-c", "hostname; echo $GREETING; cat /proc/1/cmdline | tr '\\0' ' '; echo; pwd"],
    )
    out = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:4] == [name, "hi", "sleep 3600 ", "/srv/lk-work"]
    assert not os.path.exists("/srv/lk-work")
    cgroup_check = "grep memory /proc/self/cgroup"
    argv, env, cwd = build_exec_command(
        cluster.state_dir, pod.metadata.uid, "main", ["sh", "-c", cgroup_check]
    )
    out = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=10)
    assert f"/{pod.metadata.uid}/main" in out.stdout, out
    with pytest.raises(ContainerNotRunning):
        build_exec_command(cluster.state_dir, pod.metadata.uid, "nope", ["true"])
    v1.delete_namespaced_pod(name, "default")
    wait_gone(v1, name)

    def refused() -> bool:
        try:
            build_exec_command(cluster.state_dir, pod.metadata.uid, "main", ["true"])
            return False
        except ContainerNotRunning:
            return True

    poll(refused)


def leftovers(state_dir: str, marker: str) -> dict:
    h = state_hash(state_dir)
    cgroup_dirs = [
        d
        for d in (f"/sys/fs/cgroup/{c}/localkube-{h}" for c in ("memory", "cpu", "pids"))
        if os.path.exists(d)
    ]
    with open("/proc/mounts") as f:
        mounts = [line for line in f if state_dir in line]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    return {
        "processes": processes_with(marker),
        "netns": list_state_netns(state_dir),
        "cgroups": cgroup_dirs,
        "mounts": mounts,
        "veths": [line for line in links.splitlines() if " lkv" in line],
    }


@pytest.mark.slow
def test_kubelet_crash_readopts_pods_and_down_leaves_nothing_behind(tmp_path):
    marker = uuid.uuid4().hex
    handle = start_localkube(tmp_path)
    try:
        v1 = handle.core_v1()
        names = [unique("keep") for _ in range(3)]
        for name in names:
            pod = make_pod(
                name,
                ["sh", "-c", f"sleep 3600 & sleep 3601; : {marker}"],
                terminationGracePeriodSeconds=1,
                container={"resources": {"limits": {"memory": "100Mi", "cpu": "1"}}},
            )
            v1.create_namespaced_pod("default", pod)
        for name in names:
            wait_phase(v1, name, ("Running",))
        assert len(processes_with(marker)) == 3
        uid = v1.read_namespaced_pod(names[0], "default").metadata.uid
        group = f"localkube-{state_hash(handle.state_dir)}/{uid}/main"
        with open(f"/sys/fs/cgroup/memory/{group}/memory.limit_in_bytes") as f:
            assert int(f.read()) == 100 * 2**20
        with open(f"/sys/fs/cgroup/cpu/{group}/cpu.cfs_quota_us") as f:
            assert int(f.read()) == 100_000
        # SIGKILL one kubelet: its pods keep running; a new kubelet re-adopts them
        info = json.loads(open(os.path.join(handle.state_dir, "localkube.json")).read())
        crashed = v1.read_namespaced_pod(names[0], "default").spec.node_name
        os.kill(info["pids"]["kubelets"][crashed], signal.SIGKILL)
        log = open(os.path.join(str(tmp_path), "kubelet-restarted.log"), "w")
        restarted = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "localkube.kubelet",
                "--api",
                handle.api_url,
                "--node",
                crashed,
                "--state-dir",
                handle.state_dir,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            poll(lambda: "re-adopted" in open(log.name).read())
            assert v1.read_namespaced_pod(names[0], "default").status.phase == "Running"
            assert len(processes_with(marker)) == 3
            v1.delete_namespaced_pod(names[0], "default", grace_period_seconds=1)
            wait_gone(v1, names[0])
            poll(lambda: len(processes_with(marker)) == 2)
        finally:
            restarted.send_signal(signal.SIGTERM)
            restarted.wait(timeout=30)
    finally:
        stop_localkube(handle)
    left = leftovers(handle.state_dir, marker)
    assert left == {"processes": [], "netns": [], "cgroups": [], "mounts": [], "veths": []}
    # after down + up, pods that were running are reported honestly
    handle = start_localkube(tmp_path)
    try:
        v1 = handle.core_v1()
        pod = wait_phase(v1, names[1], ("Failed",))
        assert pod.status.reason == "NodeRestart"
        assert pod.status.container_statuses[0].state.terminated.reason == "ContainerStatusUnknown"
    finally:
        stop_localkube(handle)
    assert leftovers(handle.state_dir, marker) == left


def test_lifecycle_hooks_run_inside_the_container(v1, tmp_path):
    name = unique("hooks")
    out = tmp_path / "hooks"
    out.mkdir()
    loop = "trap 'exit 0' TERM; while true; do sleep 0.1; done"
    pod = make_pod(
        name,
        ["sh", "-c", loop],
        terminationGracePeriodSeconds=60,
        container={
            "volumeMounts": [{"name": "out", "mountPath": "/out"}],
            "lifecycle": {
                "postStart": {"exec": {"command": ["sh", "-c", "hostname > /out/post"]}},
                "preStop": {"exec": {"command": ["sh", "-c", "echo stopping > /out/pre"]}},
            },
        },
        volumes=[{"name": "out", "hostPath": {"path": str(out)}}],
    )
    v1.create_namespaced_pod("default", pod)
    wait_phase(v1, name, ("Running",))
    poll(lambda: (out / "post").exists() and (out / "post").read_text() == f"{name}\n")
    start = time.monotonic()
    v1.delete_namespaced_pod(name, "default")
    wait_gone(v1, name)
    assert (out / "pre").read_text() == "stopping\n"
    assert time.monotonic() - start < 20, "the container must end on SIGTERM, not at the grace"


def test_failures_carry_exit_codes_and_messages(v1):
    failing = unique("fallback")
    pod = make_pod(
        failing,
        ["sh", "-c", "echo first; echo 'it broke' >&2; exit 3"],
        container={"terminationMessagePolicy": "FallbackToLogsOnError"},
    )
    v1.create_namespaced_pod("default", pod)
    state = wait_phase(v1, failing, ("Failed",)).status.container_statuses[0].state.terminated
    assert state.exit_code == 3 and state.reason == "Error" and state.message == "first\nit broke"
    v1.delete_namespaced_pod(failing, "default")
    name = unique("nocmd")
    v1.create_namespaced_pod("default", make_pod(name, ["no-such-program-anywhere"]))
    done = wait_phase(v1, name, ("Failed",))
    state = done.status.container_statuses[0].state.terminated
    assert state.exit_code == 128 and state.reason == "StartError"
    assert "no-such-program-anywhere" in state.message
    v1.delete_namespaced_pod(name, "default")


def test_gpus_allocated_by_the_scheduler_are_visible_to_the_container(v1):
    name = unique("gpu")
    pod = make_pod(
        name,
        ["sh", "-c", "echo devices=$NVIDIA_VISIBLE_DEVICES"],
        container={"resources": {"limits": {"nvidia.com/gpu": "2"}}},
    )
    v1.create_namespaced_pod("default", pod)
    done = wait_phase(v1, name, ("Succeeded", "Failed"))
    ids = (done.metadata.annotations or {}).get("localkube.io/gpu-ids")
    assert ids and len(ids.split(",")) == 2
    assert f"devices={ids}" in read_log(v1, name)
    v1.delete_namespaced_pod(name, "default")


def test_unsupported_volume_type_keeps_the_pod_pending_with_failed_mount(v1):
    name = unique("pvc")
    pod = make_pod(
        name,
        ["true"],
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "nope"}}],
    )
    v1.create_namespaced_pod("default", pod)

    def failed_mount():
        events = v1.list_namespaced_event("default", field_selector=f"involvedObject.name={name}")
        return [e for e in events.items if e.reason == "FailedMount"]

    assert "not supported by localkube" in poll(failed_mount)[0].message
    assert v1.read_namespaced_pod(name, "default").status.phase == "Pending"
    v1.delete_namespaced_pod(name, "default")
    wait_gone(v1, name)


def test_a_secret_update_reaches_the_running_pods_mounted_file(v1):
    """As a kubelet does: a changed Secret is carried into the volume of a pod that runs."""
    name = unique("secret-sync")
    v1.create_namespaced_secret(
        "default", {"metadata": {"name": name}, "stringData": {"grant": "first"}}
    )
    script = (
        "cat /grants/grant; echo; "
        'while [ "$(cat /grants/grant)" != second ]; do sleep 0.1; done; echo saw-second'
    )
    pod = make_pod(
        name,
        ["sh", "-c", script],
        container={"volumeMounts": [{"name": "g", "mountPath": "/grants", "readOnly": True}]},
        volumes=[{"name": "g", "secret": {"secretName": name, "defaultMode": 0o400}}],
    )
    v1.create_namespaced_pod("default", pod)
    wait_phase(v1, name, ("Running",))
    poll(lambda: "first" in read_log(v1, name))
    v1.patch_namespaced_secret(name, "default", {"stringData": {"grant": "second"}})
    done = wait_phase(v1, name, ("Succeeded", "Failed"))
    assert done.status.phase == "Succeeded"
    assert read_log(v1, name).split() == ["first", "saw-second"]
    v1.delete_namespaced_pod(name, "default")
    wait_gone(v1, name)
