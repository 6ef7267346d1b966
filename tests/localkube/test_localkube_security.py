"""Pods run as their securityContext says; Pod Security Admission refuses what a namespace's
level forbids.

Kubelet tests go through a real localkube (pods are real processes; root needed): a training
pod's security context is what its processes and exec sessions run with, its volumes are usable
by its user, and no pod reaches another pod's secret through the host. Admission tests need
only the API server."""

from __future__ import annotations

import base64
import errno
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import kubernetes
import pytest
from kubernetes.stream import stream

from harness.localkube_fixtures import restart_kubelet, start_localkube, stop_localkube, wait_until
from harness.repo_root import REPO_ROOT
from localkube.apiserver.podsecurity import Level, evaluate_pod
from localkube.kubelet import securitycontext


def kubelet_test(test):
    """A test of pods run by real kubelets: e2e, needs root."""
    needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the kubelet needs root")
    return pytest.mark.e2e(pytest.mark.root(needs_root(test)))


USER = 10001
POD_SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": USER,
    "runAsGroup": USER,
    "fsGroup": USER,
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "runAsNonRoot": True,
    "capabilities": {"drop": ["ALL"]},
}
HOME_TMP = [{"name": "HOME", "value": "/tmp"}]
DEFAULT_CAPS_HEX = "00000000a80425fb"  # containerd's default set
NET_BIND_SERVICE_HEX = "0000000000000400"
NO_CAPS_HEX = "0000000000000000"
FILTERS_SYSCALLS = os.uname().machine == "x86_64"  # localkube's seccomp table is x86_64's
RUNTIME_DIR = REPO_ROOT / "runtime"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def restricted_pod(name: str, script: str, **spec) -> dict:
    """A pod shaped like production's training pods: the restricted security context."""
    container = {
        "name": "main",
        "image": "python:3.11",
        "command": ["sh", "-c", script],
        "securityContext": CONTAINER_SECURITY,
        "env": HOME_TMP,
    }
    container.update(spec.pop("container", {}))
    body = {
        "restartPolicy": "Never",
        "serviceAccountName": "default",
        "automountServiceAccountToken": False,
        "securityContext": POD_SECURITY,
        "terminationGracePeriodSeconds": 0,
        "containers": [container],
    }
    body.update(spec)
    return {"metadata": {"name": name}, "spec": body}


def read_log(v1, name: str, container: str = "main") -> str:
    return v1.read_namespaced_pod_log(
        name, "default", container=container, _preload_content=False
    ).data.decode()


def wait_phase(v1, name: str, phases: tuple[str, ...]):
    return wait_until(
        lambda: (p := v1.read_namespaced_pod(name, "default")).status.phase in phases and p,
        what=f"pod {name} in {phases}",
    )


def exec_in(v1, name: str, command: list[str]) -> str:
    return stream(
        v1.connect_get_namespaced_pod_exec,
        name,
        "default",
        container="main",
        command=command,
        stderr=True,
        stdout=True,
        stdin=False,
        tty=False,
    )


def status_fields(text: str) -> dict[str, str]:
    """`Key:\tvalue` lines of /proc/<pid>/status."""
    return {
        k.strip(): v.strip() for k, _, v in (line.partition(":") for line in text.splitlines()) if v
    }


def volume_file(state_dir: str, pod_uid: str, volume: str, key: str) -> Path:
    return Path(state_dir) / "kubelet" / "pods" / pod_uid / "volumes" / volume / key


def describe_owner(path: Path) -> tuple[int, int, int]:
    """(mode bits, uid, gid) of a host path."""
    st = path.stat()
    return stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid


@pytest.fixture(scope="module")
def cluster():
    # Under /var/tmp, in a directory any user may search: were the state dir in a pod's root,
    # only localkube's own directory modes would keep one pod out of another's volumes.
    base = tempfile.mkdtemp(prefix="lk-security-", dir="/var/tmp")
    os.chmod(base, 0o755)
    handle = start_localkube(Path(base))
    yield handle
    stop_localkube(handle)
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def v1(cluster):
    return cluster.core_v1()


@kubelet_test
def test_a_restricted_pod_runs_as_its_user_with_no_privileges_and_usable_volumes(v1, cluster):
    name = unique("restricted")
    for secret, token in ((name, "s3cret"), (f"{name}-init", "init-s3cret")):
        v1.create_namespaced_secret(
            "default", {"metadata": {"name": secret}, "stringData": {"token": token}}
        )
    v1.create_namespaced_config_map(
        "default", {"metadata": {"name": name}, "data": {"probe.py": "print('cm-ok')"}}
    )
    script = (
        "echo uid=$(id -u) gid=$(id -g) groups=$(id -G); cat /proc/self/status; "
        "cat /creds/token; echo; python3 /runtime/probe.py; "
        "cat /workspace/from-init; echo main > /workspace/main && echo workspace-ok; "
        "echo x > $HOME/x && python3 -c 'import os, numpy; os.makedirs(os.path.expanduser("
        '"~/.keras"))\' && echo home-ok; stat -c tmp=%a /tmp; echo ready; exec sleep 3600'
    )
    volume_mounts = [
        {"name": "workspace", "mountPath": "/workspace"},
        {"name": "creds", "mountPath": "/creds", "readOnly": True},
        {"name": "runtime", "mountPath": "/runtime", "readOnly": True},
        {"name": "config", "mountPath": "/tfjob/config"},
    ]
    init = {
        "name": "fetch",
        "image": "python:3.11",
        "securityContext": CONTAINER_SECURITY,
        "env": HOME_TMP,
        "command": [
            "sh",
            "-c",
            "cat /init-creds/token > /workspace/from-init && echo >> /workspace/from-init && id -u",
        ],
        "volumeMounts": [volume_mounts[0], {"name": "init-creds", "mountPath": "/init-creds"}],
    }
    volumes = [
        {"name": "workspace", "emptyDir": {}},
        {"name": "config", "emptyDir": {}},
        {"name": "creds", "secret": {"secretName": name, "defaultMode": 0o400}},
        {"name": "init-creds", "secret": {"secretName": f"{name}-init", "defaultMode": 0o400}},
        {"name": "runtime", "configMap": {"name": name}},
    ]
    pod = restricted_pod(
        name,
        script,
        initContainers=[init],
        volumes=volumes,
        container={"volumeMounts": volume_mounts},
    )
    uid = v1.create_namespaced_pod("default", pod).metadata.uid
    wait_phase(v1, name, ("Running", "Failed", "Succeeded"))
    log = wait_until(lambda: "ready" in (text := read_log(v1, name)) and text, what="main ready")
    assert read_log(v1, name, "fetch").strip() == str(USER)
    assert f"uid={USER} gid={USER} groups={USER}\n" in log
    status = status_fields(log)
    for field in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert status[field] == "0000000000000000", (field, status[field])
    assert status["NoNewPrivs"] == "1"
    if FILTERS_SYSCALLS:
        assert status["Seccomp"] == "2"
    for line in ("s3cret", "cm-ok", "init-s3cret", "workspace-ok", "home-ok", "tmp=1777"):
        assert f"{line}\n" in log, (line, log)

    # An exec session (how the ClusterSpec file is delivered) runs like the container.
    out = exec_in(
        v1,
        name,
        [
            "sh",
            "-c",
            "id -u; id -G; grep -E '^(CapEff|NoNewPrivs)' "
            "/proc/self/status; echo '{}' > /tfjob/config/c.json "
            "&& stat -c '%u:%g' /tfjob/config/c.json",
        ],
    )
    assert out.split("\n")[:2] == [str(USER), str(USER)], out
    assert "CapEff:\t0000000000000000" in out and "NoNewPrivs:\t1" in out
    assert f"{USER}:{USER}" in out

    # On the host: the secret is 0440 root:fsGroup, as a kubelet makes it, and the
    # periodic refresh keeps that when the Secret changes.
    secret_file = volume_file(cluster.state_dir, uid, "creds", "token")
    assert describe_owner(secret_file) == (0o440, 0, USER)
    rotated = base64.b64encode(b"rotated").decode()
    v1.patch_namespaced_secret(name, "default", {"data": {"token": rotated}})
    wait_until(lambda: secret_file.read_bytes() == b"rotated", timeout=30, what="secret refreshed")
    assert describe_owner(secret_file) == (0o440, 0, USER)
    assert exec_in(v1, name, ["cat", "/creds/token"]) == "rotated"
    v1.delete_namespaced_pod(name, "default", grace_period_seconds=0)


@kubelet_test
def test_a_pod_cannot_read_another_pods_secret_through_the_host(v1, cluster):
    owner, intruder = unique("owner"), unique("intruder")
    v1.create_namespaced_secret(
        "default", {"metadata": {"name": owner}, "stringData": {"token": "not-yours"}}
    )
    pod = restricted_pod(
        owner,
        "echo ready; exec sleep 3600",
        container={"volumeMounts": [{"name": "creds", "mountPath": "/creds"}]},
        volumes=[{"name": "creds", "secret": {"secretName": owner, "defaultMode": 0o400}}],
    )
    owner_uid = v1.create_namespaced_pod("default", pod).metadata.uid
    wait_phase(v1, owner, ("Running",))
    secret_file = volume_file(cluster.state_dir, owner_uid, "creds", "token")
    assert secret_file.read_bytes() == b"not-yours"
    pods_dir = Path(cluster.state_dir) / "kubelet" / "pods"
    for directory in (pods_dir.parent, pods_dir, pods_dir / owner_uid):
        assert describe_owner(directory) == (0o700, 0, 0), directory

    # Same uid and fsGroup as the owner: the state dir is not in a pod's root at all
    # (podroot.py), and behind that the kubelet's directory modes (above) stand in the way.
    script = f"cat {secret_file}; echo rc=$?; ls {pods_dir}; echo rc=$?"
    v1.create_namespaced_pod("default", restricted_pod(intruder, script))
    done = wait_phase(v1, intruder, ("Succeeded", "Failed"))
    log = read_log(v1, intruder)
    assert done.status.phase == "Succeeded", log
    assert "not-yours" not in log
    assert log.count("No such file or directory") == 2, log
    assert log.count("rc=1") + log.count("rc=2") == 2, log
    for name in (owner, intruder):
        v1.delete_namespaced_pod(name, "default", grace_period_seconds=0)


@kubelet_test
def test_run_as_non_root_with_a_root_image_is_a_create_container_config_error(v1):
    name = unique("nonroot")
    containers = [
        {"name": "image-user", "image": "busybox:1.36", "command": ["true"]},
        {
            "name": "explicit-root",
            "image": "busybox:1.36",
            "command": ["true"],
            "securityContext": {"runAsUser": 0},
        },
    ]
    uid = v1.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": name},
            "spec": {"securityContext": {"runAsNonRoot": True}, "containers": containers},
        },
    ).metadata.uid

    def waiting() -> dict:
        statuses = v1.read_namespaced_pod(name, "default").status.container_statuses or []
        return {
            s.name: s.state.waiting
            for s in statuses
            if s.state.waiting and s.state.waiting.reason == "CreateContainerConfigError"
        }

    found = wait_until(lambda: len(w := waiting()) == 2 and w, what="both containers refused")
    where = f'(pod: "{name}_default({uid})", container: '
    assert found["image-user"].message == (
        f"container has runAsNonRoot and image will run as root {where}image-user)"
    )
    assert found["explicit-root"].message == (
        f"container's runAsUser breaks non-root policy {where}explicit-root)"
    )
    assert v1.read_namespaced_pod(name, "default").status.phase == "Pending"
    events = v1.list_namespaced_event("default", field_selector=f"involvedObject.name={name}")
    assert any(
        e.reason == "Failed"
        and e.message.startswith("Error: container has runAsNonRoot and image will run as root")
        for e in events.items
    )
    v1.delete_namespaced_pod(name, "default", grace_period_seconds=0)


@kubelet_test
def test_capabilities_and_seccomp_follow_the_security_context_for_root_and_non_root(v1):
    cases = {  # container securityContext -> (CapEff, CapBnd)
        "root-default": ({}, (DEFAULT_CAPS_HEX, DEFAULT_CAPS_HEX)),
        "root-drop-all": ({"capabilities": {"drop": ["ALL"]}}, (NO_CAPS_HEX, NO_CAPS_HEX)),
        "root-bind": (
            {"capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}},
            (NET_BIND_SERVICE_HEX, NET_BIND_SERVICE_HEX),
        ),
        "user-bind": (
            {"runAsUser": USER, "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}},
            (NO_CAPS_HEX, NET_BIND_SERVICE_HEX),
        ),
    }
    caps = ["grep", "-E", "^Cap(Eff|Bnd)", "/proc/self/status"]
    unshare = [
        "python3",
        "-c",
        "import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
        "print(libc.unshare(0x04000000), ctypes.get_errno())",
    ]  # CLONE_NEWUTS
    admin = {"capabilities": {"add": ["SYS_ADMIN"]}}
    containers = [
        {"name": key, "image": "python:3.11", "securityContext": sc, "command": caps}
        for key, (sc, _) in cases.items()
    ] + [
        {
            "name": "filtered",
            "image": "python:3.11",
            "command": unshare,
            "securityContext": {**admin, "seccompProfile": {"type": "RuntimeDefault"}},
        },
        {
            "name": "unconfined",
            "image": "python:3.11",
            "command": unshare,
            "securityContext": admin,
        },
    ]
    name = unique("caps")
    v1.create_namespaced_pod(
        "default",
        {"metadata": {"name": name}, "spec": {"restartPolicy": "Never", "containers": containers}},
    )
    assert wait_phase(v1, name, ("Succeeded", "Failed")).status.phase == "Succeeded"
    for key, (_, (eff, bnd)) in cases.items():
        fields = status_fields(read_log(v1, name, key))
        assert (fields["CapEff"], fields["CapBnd"]) == (eff, bnd), key
    if FILTERS_SYSCALLS:  # RuntimeDefault refuses unshare even to CAP_SYS_ADMIN
        assert read_log(v1, name, "filtered").split() == ["-1", str(errno.EPERM)]
    assert read_log(v1, name, "unconfined").split() == ["0", "0"]
    v1.delete_namespaced_pod(name, "default", grace_period_seconds=0)


@kubelet_test
def test_a_non_root_pod_runs_python_from_a_clone_under_tmp_with_the_state_there_too(
    tmp_path, monkeypatch
):
    # A clean clone under /tmp: its venv (whose python links to an interpreter that may sit
    # below a 0700 /root) and localkube's state both live below pytest's 0700 directories.
    assert any(stat.S_IMODE(p.stat().st_mode) == 0o700 for p in tmp_path.parents)
    venv = tmp_path / "clone" / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    monkeypatch.setenv("LOCALKUBE_VENV", str(venv))
    handle = start_localkube(tmp_path)
    try:
        core = handle.core_v1()
        files = {p.name: p.read_text() for p in RUNTIME_DIR.glob("*.py")}
        core.create_namespaced_config_map(
            "default", {"metadata": {"name": "runtime"}, "data": files}
        )
        # As the replica pods import it: the package below the working directory.
        code = (
            "import os, sys; "
            "import runtime.bundle, runtime.bundleread, runtime.fetch, runtime.keeper; "
            "import runtime.protocol, runtime.transfer; "
            "open(os.path.expanduser('~/probe'), 'w').write('ok'); "
            "print('runtime-ok', os.getuid(), sys.prefix)"
        )
        pod = restricted_pod(
            "py",
            "",
            container={
                "command": ["python3", "-c", code],
                "workingDir": "/tfjob/python",
                "volumeMounts": [{"name": "runtime", "mountPath": "/tfjob/python/runtime"}],
            },
            volumes=[{"name": "runtime", "configMap": {"name": "runtime"}}],
        )
        core.create_namespaced_pod("default", pod)
        done = wait_until(
            lambda: (
                (p := core.read_namespaced_pod("py", "default")).status.phase
                in ("Succeeded", "Failed")
                and p
            ),
            what="python pod finished",
        )
        log = core.read_namespaced_pod_log("py", "default", _preload_content=False).data.decode()
        assert done.status.phase == "Succeeded", log
        assert log.strip() == f"runtime-ok {USER} {venv}", log
    finally:
        stop_localkube(handle)


@kubelet_test
def test_exec_still_runs_as_the_container_after_the_kubelet_restarts(tmp_path):
    handle = start_localkube(tmp_path)
    try:
        core = handle.core_v1()
        core.create_namespaced_pod("default", restricted_pod("kept", "exec sleep 3600"))
        pod = wait_until(
            lambda: (
                (p := core.read_namespaced_pod("kept", "default")).status.phase == "Running" and p
            ),
            what="pod running",
        )
        info = json.loads((Path(handle.state_dir) / "localkube.json").read_text())
        os.kill(info["pids"]["kubelets"][pod.spec.node_name], signal.SIGKILL)
        log_path = tmp_path / "kubelet-restarted.log"
        restarted = restart_kubelet(handle, pod.spec.node_name, log_path)
        try:
            wait_until(lambda: "re-adopted" in log_path.read_text(), what="pod re-adopted")
            out = exec_in(core, "kept", ["sh", "-c", "id -u; grep NoNewPrivs /proc/self/status"])
            assert out == f"{USER}\nNoNewPrivs:\t1\n"
        finally:
            restarted.send_signal(signal.SIGTERM)
            restarted.wait(timeout=30)
    finally:
        stop_localkube(handle)


# ---- Pod Security Admission (API server only) ----------------------------------------------
def labelled_namespace(api, level: str | None, version: str | None = None) -> str:
    name, prefix = unique(f"psa-{level or 'none'}"), "pod-security.kubernetes.io/enforce"
    labels = {
        key: value for key, value in ((prefix, level), (f"{prefix}-version", version)) if value
    }
    api.create_namespace({"metadata": {"name": name, "labels": labels}})
    return name


def compliant_pod(volume: dict | None = None, run_as_user: int = USER, **container) -> dict:
    """A pod the restricted standard admits; `volume`, `run_as_user` and container
    securityContext fields (None removes one) break it."""
    volumes = [
        {"name": "w", "emptyDir": {}},
        {"name": "s", "secret": {"secretName": "x"}},
        {"name": "c", "configMap": {"name": "x"}},
    ] + ([volume] if volume else [])
    sc = {k: v for k, v in {**CONTAINER_SECURITY, **container}.items() if v is not None}
    return {
        "metadata": {"name": "p"},
        "spec": {
            "securityContext": {**POD_SECURITY, "runAsUser": run_as_user},
            "volumes": volumes,
            "containers": [
                {"name": "main", "image": "python:3.11", "command": ["true"], "securityContext": sc}
            ],
        },
    }


HOST_PATH = {"name": "host", "hostPath": {"path": "/etc"}}


def refusal(api, namespace: str, pod: dict) -> str:
    """The message of the 403 refusing `pod` (after checking that nothing was stored)."""
    with pytest.raises(kubernetes.client.ApiException) as caught:
        api.create_namespaced_pod(namespace, pod)
    assert caught.value.status == 403
    assert api.list_namespaced_pod(namespace).items == []  # nothing stored
    body = json.loads(caught.value.body)
    assert body["reason"] == "Forbidden" and body["code"] == 403
    assert body["details"] == {"name": pod["metadata"]["name"], "kind": "pods"}
    return body["message"]


def test_a_restricted_namespace_admits_a_compliant_pod(localkube_api):
    api = localkube_api.core_v1()
    namespace = labelled_namespace(api, "restricted", "latest")
    created = api.create_namespaced_pod(namespace, compliant_pod())
    assert created.metadata.uid and api.read_namespaced_pod("p", namespace).metadata.name == "p"


@pytest.mark.parametrize(
    ("pod", "version", "message"),
    [
        (
            compliant_pod(privileged=True),
            None,
            'privileged (container "main" must not set securityContext.privileged=true)',
        ),
        (
            compliant_pod(allowPrivilegeEscalation=None),
            None,
            'allowPrivilegeEscalation != false (container "main" must set '
            "securityContext.allowPrivilegeEscalation=false)",
        ),
        (
            compliant_pod(HOST_PATH),
            None,
            'restricted volume types (volume "host" uses restricted volume type "hostPath")',
        ),
        (compliant_pod(run_as_user=0), None, "runAsUser=0 (pod must not set runAsUser=0)"),
        (
            compliant_pod(capabilities={"add": ["SYS_ADMIN"]}),
            "v1.30",
            'unrestricted capabilities (container "main" must set '
            'securityContext.capabilities.drop=["ALL"]; container "main" must not include '
            '"SYS_ADMIN" in securityContext.capabilities.add)',
        ),
        (
            {
                "metadata": {"name": "p"},
                "spec": {
                    "initContainers": [{"name": "init", "image": "busybox:1.36"}],
                    "containers": [{"name": "main", "image": "busybox:1.36"}],
                },
            },
            None,
            'allowPrivilegeEscalation != false (containers "init", "main" must set '
            "securityContext.allowPrivilegeEscalation=false), unrestricted capabilities "
            '(containers "init", "main" must set securityContext.capabilities.drop=["ALL"]), '
            'runAsNonRoot != true (pod or containers "init", "main" must set '
            'securityContext.runAsNonRoot=true), seccompProfile (pod or containers "init", "main" '
            'must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")',
        ),
    ],
    ids=["privileged", "privilege-escalation", "hostPath", "root", "version-v1.30", "bare"],
)
def test_a_restricted_namespace_refuses_pods_naming_every_violation(
    localkube_api, pod, version, message
):
    api = localkube_api.core_v1()
    namespace = labelled_namespace(api, "restricted", version)
    assert refusal(api, namespace, pod) == (
        f'pods "p" is forbidden: violates PodSecurity "restricted:{version or "latest"}": '
        + message
    )


def test_a_baseline_namespace_refuses_only_what_baseline_forbids(localkube_api):
    api = localkube_api.core_v1()
    namespace = labelled_namespace(api, "baseline")
    prefix = 'pods "p" is forbidden: violates PodSecurity "baseline:latest": '
    bare_root = {
        "metadata": {"name": "root"},
        "spec": {
            "containers": [
                {"name": "main", "image": "busybox:1.36", "securityContext": {"runAsUser": 0}}
            ]
        },
    }
    root_namespace = labelled_namespace(api, "baseline")
    assert api.create_namespaced_pod(root_namespace, bare_root).metadata.name == "root"
    privileged = compliant_pod(privileged=True)
    privileged["spec"]["hostNetwork"] = True
    privileged["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    assert refusal(api, namespace, privileged) == prefix + (
        'host namespaces (hostNetwork), hostPort (container "main" uses hostPort 8080), '
        'privileged (container "main" must not set securityContext.privileged=true)'
    )
    hostpath = refusal(api, namespace, compliant_pod(HOST_PATH))
    assert hostpath == prefix + 'hostPath volumes (volume "host")'
    adds = compliant_pod(capabilities={"add": ["SYS_ADMIN", "CHOWN"]})
    assert refusal(api, namespace, adds) == prefix + (
        'non-default capabilities (container "main" must not include "SYS_ADMIN" in '
        "securityContext.capabilities.add)"
    )
    sysctls = compliant_pod()
    sysctls["spec"]["securityContext"]["sysctls"] = [{"name": "kernel.msgmax", "value": "1"}]
    assert refusal(api, namespace, sysctls) == prefix + "forbidden sysctls (kernel.msgmax)"


@pytest.mark.parametrize("level", [None, "privileged"])
def test_unlabelled_and_privileged_namespaces_admit_anything(localkube_api, level):
    api = localkube_api.core_v1()
    namespace = labelled_namespace(api, level)
    pod = compliant_pod(HOST_PATH, run_as_user=0, privileged=True, allowPrivilegeEscalation=None)
    pod["spec"]["hostPID"] = True
    assert api.create_namespaced_pod(namespace, pod).metadata.name == "p"


# ---- the pure parts: profile resolution and the standards' ordering ------------------------
def test_capabilities_resolve_like_containerd():
    every, resolve = set(securitycontext.CAPABILITY_NAMES), securitycontext.resolve_capabilities

    def names(effective: dict) -> set[str]:
        return {securitycontext.CAPABILITY_NAMES[n] for n in resolve(effective)}

    assert hex(sum(1 << n for n in resolve({}))) == hex(int(DEFAULT_CAPS_HEX, 16))
    assert names({"capabilities": {"drop": ["ALL"]}}) == set()
    assert names({"capabilities": {"drop": ["ALL"], "add": ["CAP_NET_BIND_SERVICE"]}}) == {
        "NET_BIND_SERVICE"
    }
    assert names({"capabilities": {"drop": ["NET_RAW", "MKNOD"]}}) == (
        names({}) - {"NET_RAW", "MKNOD"}
    )
    assert names({"capabilities": {"add": ["ALL"], "drop": ["SYS_ADMIN"]}}) == every - {"SYS_ADMIN"}
    assert names({"privileged": True, "capabilities": {"drop": ["ALL"]}}) == every
    with pytest.raises(securitycontext.ContainerConfigError, match="capability 'SYS_MAGIC'"):
        resolve({"capabilities": {"add": ["SYS_MAGIC"]}})


def test_the_container_security_context_overrides_the_pods():
    pod = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {
            "securityContext": {
                "runAsUser": 1000,
                "runAsGroup": 1000,
                "fsGroup": 3000,
                "supplementalGroups": [4000],
                "seccompProfile": {"type": "RuntimeDefault"},
            }
        },
    }
    container = {
        "name": "c",
        "securityContext": {
            "runAsUser": 2000,
            "privileged": False,
            "allowPrivilegeEscalation": False,
        },
    }
    profile = securitycontext.build_security_profile(pod, container)
    assert profile["uid"] == 2000 and profile["gid"] == 1000
    assert profile["groups"] == [1000, 3000, 4000]
    assert profile["noNewPrivs"] is True and profile["seccomp"] == "RuntimeDefault"
    unconfined = securitycontext.build_security_profile(
        pod, {"name": "c", "securityContext": {"seccompProfile": {"type": "Unconfined"}}}
    )
    assert unconfined["seccomp"] is None and unconfined["noNewPrivs"] is False


def test_the_standards_check_every_kind_of_container_in_the_real_order():
    pod = {
        "metadata": {
            "name": "p",
            "annotations": {"container.apparmor.security.beta.kubernetes.io/main": "unconfined"},
        },
        "spec": {
            "hostPID": True,
            "securityContext": {
                "runAsNonRoot": True,
                "seccompProfile": {"type": "RuntimeDefault"},
                "seLinuxOptions": {"type": "spc_t"},
            },
            "containers": [{"name": "main", "securityContext": dict(CONTAINER_SECURITY)}],
            "ephemeralContainers": [
                {"name": "debug", "securityContext": {"privileged": True, "procMount": "Unmasked"}}
            ],
        },
    }
    assert [reason for reason, _ in evaluate_pod(Level.RESTRICTED, pod)] == [
        "forbidden AppArmor profile",
        "host namespaces",
        "privileged",
        "seLinuxOptions",
        "allowPrivilegeEscalation != false",
        "unrestricted capabilities",
        "procMount",
    ]
    assert [reason for reason, _ in evaluate_pod(Level.BASELINE, pod)] == [
        "forbidden AppArmor profile",
        "host namespaces",
        "privileged",
        "procMount",
        "seLinuxOptions",
    ]
    assert evaluate_pod(Level.PRIVILEGED, pod) == []
    details = dict(evaluate_pod(Level.BASELINE, pod))
    assert details["forbidden AppArmor profile"] == (  # joinQuote does not escape, as in Go
        "annotation must not set AppArmor profile type to "
        '"container.apparmor.security.beta.kubernetes.io/main="unconfined""'
    )
    assert details["seLinuxOptions"] == (
        'pod set forbidden securityContext.seLinuxOptions: type "spc_t"'
    )
