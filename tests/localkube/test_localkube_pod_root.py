"""A pod's root holds what an image would: the system's and the Python installation's
directories read-only, its own /tmp, /var/tmp and /dev/shm, a minimal /dev, and nothing of
the checkout, the cluster's state, the host's homes, /var/lib or /run.

Every test goes through a real localkube and the official `kubernetes` client (pods are real
processes, exec goes through pods/exec). Needs root.
"""

from __future__ import annotations

import json
import os
import uuid

import pytest
from kubernetes.stream import stream

from harness.localkube_fixtures import start_localkube, stop_localkube, wait_until
from harness.repo_root import REPO_ROOT
from localkube.kubelet.images import find_venv, find_venv_interpreter_home

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="the kubelet needs root"),
]

USER = 10001
RESTRICTED_POD = {
    "runAsNonRoot": True,
    "runAsUser": USER,
    "runAsGroup": USER,
    "fsGroup": USER,
    "seccompProfile": {"type": "RuntimeDefault"},
}
RESTRICTED_CONTAINER = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}
DEV_ENTRIES = [
    "fd",
    "full",
    "null",
    "ptmx",
    "pts",
    "random",
    "shm",
    "stderr",
    "stdin",
    "stdout",
    "tty",
    "urandom",
    "zero",
]
SCRATCH_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
DEFAULT_SCRATCH_BYTES = 64 * 2**20
# What the pod reports about its root: every path the host has and the pod must not.
PROBE = r"""
import errno, json, os, sys

def attempt(action):
    try:
        result = action()
        return ["ok", sorted(result)[:5] if isinstance(result, list) else result]
    except OSError as error:
        return ["error", errno.errorcode.get(error.errno, str(error.errno))]

def write(path):
    with open(path, "w") as handle:
        handle.write("x")
    return "written"

hidden, passable = json.loads(sys.argv[1]), json.loads(sys.argv[2])
import numpy
report = {
    "uid": os.getuid(),
    "prefix": sys.prefix,
    "numpy": numpy.__version__,
    "hidden": {path: attempt(lambda p=path: os.listdir(p) if os.path.isdir(p) else open(p).read(1))
               for path in hidden},
    "listed": {path: attempt(lambda p=path: os.listdir(p))
               for path in ["/", "/home", "/run", "/var", "/tmp", "/var/tmp", *passable]},
    "write": {path: attempt(lambda p=path: write(p))
              for path in ("/usr/lk-probe", "/etc/passwd", "/etc/lk-probe", "/sys/lk-probe",
                           "/tmp/lk-probe", "/var/tmp/lk-probe", "/dev/shm/lk-probe")},
    "dev": sorted(os.listdir("/dev")),
    "scratch": {path: [oct(os.stat(path).st_mode & 0o7777),
                       os.statvfs(path).f_blocks * os.statvfs(path).f_frsize]
                for path in ("/tmp", "/var/tmp", "/dev/shm")},
    "urandom": len(open("/dev/urandom", "rb").read(16)),
    "pty": attempt(lambda: os.ttyname(os.openpty()[1])),
    "etc": sorted(os.listdir("/etc")),
}
print("REPORT " + json.dumps(report), flush=True)
"""


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    handle = start_localkube(tmp_path_factory.mktemp("podroot"))
    yield handle
    stop_localkube(handle)


@pytest.fixture(scope="module")
def v1(cluster):
    return cluster.core_v1()


def make_pod(name: str, command: list[str], restricted: bool, **container) -> dict:
    main = {"name": "main", "image": "python:3.11", "command": command, **container}
    spec = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0, "containers": [main]}
    if restricted:
        main["securityContext"] = RESTRICTED_CONTAINER
        spec["securityContext"] = RESTRICTED_POD
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def wait_phase(v1, name: str, phases: tuple[str, ...]):
    return wait_until(
        lambda: (p := v1.read_namespaced_pod(name, "default")).status.phase in phases and p,
        what=f"pod {name} in {phases}",
    )


def read_log(v1, name: str) -> str:
    return v1.read_namespaced_pod_log(name, "default", _preload_content=False).data.decode()


def exec_in(v1, name: str, script: str) -> str:
    return stream(
        v1.connect_get_namespaced_pod_exec,
        name,
        "default",
        container="main",
        command=["sh", "-c", script],
        stderr=True,
        stdout=True,
        stdin=False,
        tty=False,
    )


def list_passable_parents() -> list[str]:
    """The directories above the venv and its interpreter that the pod's root makes to reach
    them (wherever the checkout lies): outside /usr, each can be passed but not listed."""
    venv = find_venv()
    parents = set()
    for installation in (venv, find_venv_interpreter_home(venv)):
        path = os.path.dirname(installation or "/")
        while path != "/" and not (path + "/").startswith("/usr/"):
            parents.add(path)
            path = os.path.dirname(path)
    return sorted(parents)


def run_probe(v1, cluster, restricted: bool) -> dict:
    hidden = [
        str(REPO_ROOT / "README.md"),
        str(REPO_ROOT / "deploy"),
        str(REPO_ROOT / ".state"),
        str(REPO_ROOT / "localkube"),
        str(cluster.state_dir),
        os.path.join(cluster.state_dir, "token"),
        "/var/lib",
        "/run/netns",
        "/etc/shadow",
        "/etc/gitconfig",
        "/proc/1/root/etc/shadow",
    ]
    name = unique("probe")
    passable = list_passable_parents()
    command = ["python3", "-c", PROBE, json.dumps(hidden), json.dumps(passable)]
    pod = make_pod(name, command, restricted)
    pod["spec"]["containers"][0]["env"] = [{"name": "HOME", "value": "/tmp"}]
    v1.create_namespaced_pod("default", pod)
    done = wait_phase(v1, name, ("Succeeded", "Failed"))
    log = read_log(v1, name)
    v1.delete_namespaced_pod(name, "default")
    assert done.status.phase == "Succeeded", log
    line = next(x for x in log.splitlines() if x.startswith("REPORT "))
    report = json.loads(line.removeprefix("REPORT "))
    report["hidden_paths"], report["passable_paths"] = hidden, passable
    return report


@pytest.mark.parametrize("restricted", [True, False], ids=["uid-10001", "root"])
def test_a_pod_sees_an_image_not_the_host(v1, cluster, restricted):
    report = run_probe(v1, cluster, restricted)
    assert report["uid"] == (USER if restricted else 0)
    # Python and the venv's packages work, from the venv's own path.
    assert report["prefix"] == find_venv() and report["numpy"]
    # Nothing of the checkout, the cluster's state, the host's secrets, /var/lib or /run.
    for path in report["hidden_paths"]:
        assert report["hidden"][path] == ["error", "ENOENT"], (path, report["hidden"][path])
    listed = report["listed"]
    assert listed["/home"] == ["ok", []] and listed["/run"] == ["ok", ["lock"]]
    assert listed["/var"] == ["ok", ["lock", "run", "tmp"]]
    top = set(listed["/"][1]) | set(report["etc"])
    assert not {"boot", "old_root", "farm", "gitconfig", "npmrc", "shadow"} & top
    if restricted:  # the parents of the venv and its interpreter can be passed, not listed
        assert report["passable_paths"], "the venv lies below no directory outside /usr"
        for path in report["passable_paths"]:
            assert listed[path] == ["error", "EACCES"], (path, listed[path])
    # The system is read-only; /tmp, /var/tmp and /dev/shm are writable.
    writes = report["write"]
    for path in ("/usr/lk-probe", "/etc/passwd", "/sys/lk-probe"):
        assert writes[path] == ["error", "EROFS"], (path, writes[path])
    for path in SCRATCH_DIRS:
        assert writes[f"{path}/lk-probe"] == ["ok", "written"], path
    for path, (mode, size) in report["scratch"].items():
        assert (mode, size) == ("0o1777", DEFAULT_SCRATCH_BYTES), path
    # A minimal /dev, with a pseudo-terminal of its own devpts.
    assert report["dev"] == DEV_ENTRIES
    assert report["urandom"] == 16 and report["pty"] == ["ok", "/dev/pts/0"]
    assert "passwd" in report["etc"] and "resolv.conf" in report["etc"]


def test_tmp_var_tmp_and_dev_shm_are_each_pods_own_and_size_limited(v1, cluster):
    names = [unique("scratch-a"), unique("scratch-b")]
    for name in names:
        pod = make_pod(name, ["sleep", "3600"], restricted=True)
        v1.create_namespaced_pod("default", pod)
    for name in names:
        wait_phase(v1, name, ("Running",))
    first, second = names
    write = " && ".join(f"echo {first} > {d}/owner" for d in SCRATCH_DIRS)
    assert exec_in(v1, first, write + " && echo done").strip() == "done"
    # While both run, the second pod sees none of the first's files, and writes its own.
    look = " ; ".join(f"cat {d}/owner 2>&1 || true" for d in SCRATCH_DIRS)
    assert "No such file" in exec_in(v1, second, look)
    assert first not in exec_in(v1, second, look)
    exec_in(v1, second, " && ".join(f"echo {second} > {d}/owner" for d in SCRATCH_DIRS))
    assert exec_in(v1, first, look).split() == [first] * 3
    # Each is a tmpfs of the container's size (64Mi without a memory limit): full is full.
    for directory in SCRATCH_DIRS:
        out = exec_in(v1, second, f"head -c 80M /dev/zero > {directory}/big; echo rc=$?")
        assert "No space left on device" in out and "rc=1" in out, (directory, out)
        exec_in(v1, second, f"rm {directory}/big")
    for name in names:
        v1.delete_namespaced_pod(name, "default")
    # Every mount was the containers' own: nothing stays on the host's side.
    wait_until(lambda: not any(v1.list_namespaced_pod("default").items), what="the pods are gone")
    with open("/proc/self/mountinfo") as mounts:
        assert [line for line in mounts if str(cluster.state_dir) in line] == []


def test_memory_backed_directories_count_against_the_containers_memory_limit(v1):
    name = unique("scratch-oom")
    fill = " && ".join(f"head -c 20M /dev/zero > {d}/fill" for d in SCRATCH_DIRS)
    pod = make_pod(
        name,
        ["sh", "-c", fill + " && echo survived"],
        restricted=True,
        resources={"limits": {"memory": "48Mi"}},
    )
    v1.create_namespaced_pod("default", pod)
    done = wait_phase(v1, name, ("Succeeded", "Failed"))
    state = done.status.container_statuses[0].state.terminated
    assert "survived" not in read_log(v1, name)
    assert done.status.phase == "Failed" and state.reason == "OOMKilled", state
    v1.delete_namespaced_pod(name, "default")
