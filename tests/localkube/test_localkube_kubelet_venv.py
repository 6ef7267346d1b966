"""Pods see the venv of the image map even when it lives under /tmp, where every pod
has a private /tmp of its own (a clean clone under /tmp must still run TensorFlow),
in every container of the pod, not only the first."""

from __future__ import annotations

import os
import time

import pytest

from harness.localkube_fixtures import start_localkube, stop_localkube

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="the kubelet needs root"),
]


def test_a_venv_under_tmp_is_visible_in_pods(tmp_path, monkeypatch):
    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    tool = venv_bin / "tfjob-venv-probe"
    tool.write_text("#!/bin/sh\necho probe-from-venv\n")
    tool.chmod(0o755)
    assert str(tmp_path).startswith("/tmp/")
    monkeypatch.setenv("LOCALKUBE_VENV", str(tmp_path / "venv"))
    handle = start_localkube(tmp_path)
    try:
        api = handle.core_v1()
        api.create_namespaced_pod(
            "default",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "venv-probe"},
                "spec": {
                    "restartPolicy": "Never",
                    "initContainers": [
                        {"name": "init", "image": "python:3.11", "command": ["tfjob-venv-probe"]}
                    ],
                    "containers": [
                        {"name": "main", "image": "python:3.11", "command": ["tfjob-venv-probe"]}
                    ],
                },
            },
        )
        deadline = time.monotonic() + 60
        while api.read_namespaced_pod("venv-probe", "default").status.phase not in (
            "Succeeded",
            "Failed",
        ):
            assert time.monotonic() < deadline, "the pod did not finish within 60 s"
            time.sleep(0.2)
        assert api.read_namespaced_pod("venv-probe", "default").status.phase == "Succeeded"
        for container in ("init", "main"):
            log = api.read_namespaced_pod_log(
                "venv-probe", "default", container=container, _preload_content=False
            )
            assert log.data.decode().strip() == "probe-from-venv", container
    finally:
        stop_localkube(handle)
