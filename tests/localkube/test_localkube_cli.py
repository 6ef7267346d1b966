"""`python -m localkube up|status|down`: the files it leaves, idempotence, clean stop, and the
kubeconfig the official client and kubectl accept unchanged."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from harness.localkube_fixtures import start_localkube, stop_localkube


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "localkube", *args], capture_output=True, text=True, timeout=120
    )


def test_up_is_idempotent_and_down_stops_everything(tmp_path):
    handle = start_localkube(tmp_path, kubelets=False, forward_ports=(9000,))
    state_dir = tmp_path / "localkube"
    try:
        info = json.loads((state_dir / "localkube.json").read_text())
        port = int(handle.api_url.rsplit(":", 1)[1])
        assert info["forward_ports"] == sorted({9000, port})
        assert info["nodes"] == ["node-1", "node-2"]
        again = run_cli("up", "--state-dir", str(state_dir), "--port", "0", "--no-kubelets")
        assert again.returncode == 0 and handle.api_url in again.stdout
        status = json.loads(run_cli("status", "--state-dir", str(state_dir)).stdout)
        assert status["up"] and info["pids"]["apiserver"] in status["running_pids"]

        import kubernetes

        client = kubernetes.config.new_client_from_config(config_file=handle.kubeconfig)
        names = [n.metadata.name for n in kubernetes.client.CoreV1Api(client).list_node().items]
        assert names == ["node-1", "node-2"]
        if shutil.which("kubectl"):
            out = subprocess.run(
                ["kubectl", "--kubeconfig", handle.kubeconfig, "get", "nodes", "-o", "name"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert out.stdout.split() == ["node/node-1", "node/node-2"], out.stderr
    finally:
        stop_localkube(handle)
    status = json.loads(run_cli("status", "--state-dir", str(state_dir)).stdout)
    assert status == {
        "state_dir": str(state_dir),
        "api_url": handle.api_url,
        "running_pids": [],
        "up": False,
    }


def test_up_with_a_bad_nodes_file_says_what_is_wrong(tmp_path):
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text("- capacity: {cpu: 1}\n")
    result = run_cli(
        "up",
        "--state-dir",
        str(tmp_path / "lk"),
        "--port",
        "0",
        "--nodes",
        str(nodes),
        "--no-kubelets",
    )
    assert result.returncode == 1
    assert f"nodes file {nodes}: entry 0 needs a 'name'" in result.stderr


@pytest.mark.parametrize("command", ["down", "status"])
def test_down_and_status_without_a_cluster_do_nothing(tmp_path, command):
    result = run_cli(command, "--state-dir", str(tmp_path / "never"))
    assert result.returncode == 0
