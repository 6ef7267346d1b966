"""The kubelet's pure parts: pod phase and conditions, environment, argv, images, quantities."""

from __future__ import annotations

import asyncio

import pytest

from localkube.kubelet.cgroups import parse_quantity
from localkube.kubelet.environment import (
    NoCommandError,
    build_argv,
    build_environment,
    expand_references,
)
from localkube.kubelet.images import load_image_rules, resolve_image
from localkube.kubelet.restarts import restart_delay, should_restart
from localkube.kubelet.runrecords import termination_reason
from localkube.kubelet.status import (
    ContainerRecord,
    ContainerState,
    PodPhase,
    PodRuntimeFacts,
    RestartPolicy,
    build_pod_status,
    compute_phase,
)


def make_pod(policy: str = "Never", **spec) -> dict:
    return {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "u-1",
            "labels": {"app": "x"},
            "annotations": {},
        },
        "spec": {
            "restartPolicy": policy,
            "nodeName": "node-1",
            "containers": [{"name": "c", "image": "python:3"}],
            **spec,
        },
        "status": {},
    }


def terminated(name: str, code: int) -> ContainerRecord:
    return ContainerRecord(
        name,
        "python:3",
        state=ContainerState.TERMINATED,
        exit_code=code,
        reason="Completed" if code == 0 else "Error",
    )


def running(name: str) -> ContainerRecord:
    return ContainerRecord(
        name,
        "python:3",
        state=ContainerState.RUNNING,
        started_at="2026-01-01T00:00:00Z",
        ready=True,
    )


@pytest.mark.parametrize(
    "policy, records, phase",
    [
        ("Never", [running("a")], PodPhase.RUNNING),
        ("Never", [terminated("a", 0)], PodPhase.SUCCEEDED),
        ("Never", [terminated("a", 1)], PodPhase.FAILED),
        ("Never", [terminated("a", 0), running("b")], PodPhase.RUNNING),
        ("OnFailure", [terminated("a", 1)], PodPhase.RUNNING),
        ("OnFailure", [terminated("a", 0)], PodPhase.SUCCEEDED),
        ("Always", [terminated("a", 0)], PodPhase.RUNNING),
        ("Never", [ContainerRecord("a", "x")], PodPhase.PENDING),
    ],
)
def test_phase_follows_the_kubelet_rules(policy, records, phase):
    assert compute_phase(make_pod(policy), [], records) is phase


def test_failed_init_container_fails_a_never_pod_and_keeps_others_pending():
    init_failed = [terminated("init", 1)]
    assert (
        compute_phase(make_pod("Never"), init_failed, [ContainerRecord("c", "x")])
        is PodPhase.FAILED
    )
    assert (
        compute_phase(make_pod("OnFailure"), init_failed, [ContainerRecord("c", "x")])
        is PodPhase.PENDING
    )


def test_status_has_ip_conditions_and_reasons():
    pod = make_pod("Never")
    status = build_pod_status(
        pod,
        [],
        [running("c")],
        PodRuntimeFacts(host_ip="10.77.1.1", pod_ip="10.77.1.5", start_time="t"),
    )
    assert status["phase"] == "Running"
    assert status["podIP"] == "10.77.1.5" and status["podIPs"] == [{"ip": "10.77.1.5"}]
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions == {
        "Initialized": "True",
        "Ready": "True",
        "ContainersReady": "True",
        "PodScheduled": "True",
    }
    assert status["containerStatuses"][0]["state"]["running"]["startedAt"] == "2026-01-01T00:00:00Z"
    failed = build_pod_status(
        pod,
        [],
        [terminated("c", 137)],
        PodRuntimeFacts(host_ip="h", failure_reason="DeadlineExceeded"),
    )
    assert failed["phase"] == "Failed" and failed["reason"] == "DeadlineExceeded"
    ready = {c["type"]: c for c in failed["conditions"]}["Ready"]
    assert ready["status"] == "False" and ready["reason"] == "PodCompleted"


def test_unchanged_condition_keeps_its_transition_time():
    pod = make_pod()
    pod["status"]["conditions"] = [
        {"type": "Ready", "status": "True", "lastTransitionTime": "2020-01-01T00:00:00Z"}
    ]
    status = build_pod_status(pod, [], [running("c")], PodRuntimeFacts(host_ip="h"))
    ready = {c["type"]: c for c in status["conditions"]}["Ready"]
    assert ready["lastTransitionTime"] == "2020-01-01T00:00:00Z"


def test_restart_policy_and_backoff():
    assert should_restart(RestartPolicy.ALWAYS, 0) and should_restart(RestartPolicy.ON_FAILURE, 2)
    assert not should_restart(RestartPolicy.ON_FAILURE, 0) and not should_restart(
        RestartPolicy.NEVER, 1
    )
    assert [restart_delay(n) for n in range(7)] == [0, 10, 20, 40, 80, 160, 300]
    assert termination_reason({"exitCode": 137, "oomKilled": True}) == "OOMKilled"
    assert termination_reason({"exitCode": 0}) == "Completed"
    assert termination_reason({"exitCode": 2}) == "Error"


def test_references_expand_like_kubernetes():
    env = {"A": "1", "B": "two"}
    assert expand_references("$(A)-$(B)-$(C)-$$(A)", env) == "1-two-$(C)-$(A)"


def test_environment_resolves_field_refs_secrets_configmaps_and_gpus():
    pod = make_pod()
    pod["metadata"]["annotations"]["localkube.io/gpu-ids"] = "0,1"
    container = {
        "name": "c",
        "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}],
        "env": [
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "PASS", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            {
                "name": "MISSING",
                "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k", "optional": True}},
            },
            {"name": "MIXED", "value": "$(NAME)@$(POD_IP)"},
        ],
    }
    objects = {
        ("configmaps", "cm"): {"data": {"X": "y"}},
        ("secrets", "s"): {"data": {"k": "c2VjcmV0"}},
    }

    async def get(kind, namespace, name):
        return objects.get((kind, name))

    image = resolve_image("python:3.11", load_image_rules())
    env = asyncio.run(
        build_environment(pod, container, image, ("10.77.1.9", "10.77.1.1"), 6443, get)
    )
    assert env["POD_IP"] == "10.77.1.9" and env["NAME"] == "p" and env["APP"] == "x"
    assert env["PASS"] == "secret" and "MISSING" not in env and env["CM_X"] == "y"
    assert env["MIXED"] == "p@10.77.1.9"
    assert env["NVIDIA_VISIBLE_DEVICES"] == "0,1"
    assert env["KUBERNETES_SERVICE_PORT"] == "6443"


def test_no_gpu_annotation_means_void_devices():
    async def get(kind, namespace, name):
        return None

    image = resolve_image("busybox:1.36", load_image_rules())
    env = asyncio.run(build_environment(make_pod(), {"name": "c"}, image, (None, "h"), None, get))
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"


def test_argv_uses_command_then_args_then_image_cmd():
    image = resolve_image("python:3.11", load_image_rules())
    env = {"X": "1"}
    assert build_argv({"name": "c", "command": ["echo"], "args": ["$(X)"]}, image, env) == [
        "echo",
        "1",
    ]
    assert build_argv({"name": "c", "args": ["python3", "-V"]}, image, env) == ["python3", "-V"]
    assert build_argv({"name": "c"}, image, env) == ["python3"]
    bare = image.__class__(image="x", kind=image.kind, cmd=[], path=image.path)
    with pytest.raises(NoCommandError, match="no command specified"):
        build_argv({"name": "c"}, bare, env)


def test_image_map_accepts_defaults_and_refuses_unknown():
    rules = load_image_rules()
    for image in (
        "tensorflow/tensorflow:2.21.0",
        "python:3.11-slim",
        "tfjob/runner:1",
        "alpine:3.24.2",
        "busybox:1.36",
    ):
        assert resolve_image(image, rules) is not None, image
    assert resolve_image("nginx:latest", rules) is None
    assert resolve_image("python:3.11", rules).path.split(":")[0].endswith("/bin")


@pytest.mark.parametrize(
    "text, value",
    [("512Mi", 512 * 2**20), ("1G", 10**9), ("250m", 0.25), ("2", 2), ("1.5Gi", 1.5 * 2**30)],
)
def test_quantities_parse(text, value):
    assert parse_quantity(text, "f") == value


def test_bad_quantity_names_the_field():
    with pytest.raises(ValueError, match="limits.memory: 'lots'"):
        parse_quantity("lots", "limits.memory")


def test_log_lines_are_written_in_cri_format(tmp_path):
    import re

    from localkube.kubelet.logwriter import PARTIAL_LINE_LIMIT, LogWriter

    path = tmp_path / "0.log"
    writer = LogWriter(str(path))
    writer.feed("stdout", b"one\ntw")
    writer.feed("stderr", b"err\n")
    writer.feed("stdout", b"o\n" + b"x" * (PARTIAL_LINE_LIMIT + 5))
    writer.flush_stream("stdout")
    lines = path.read_bytes().decode().splitlines()
    pattern = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z (stdout|stderr) ([FP]) (.*)$")
    parsed = [pattern.match(line).groups() for line in lines]
    assert parsed == [
        ("stdout", "F", "one"),
        ("stderr", "F", "err"),
        ("stdout", "F", "two"),
        ("stdout", "P", "x" * PARTIAL_LINE_LIMIT),
        ("stdout", "F", "xxxxx"),
    ]
