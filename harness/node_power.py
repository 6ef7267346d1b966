"""Powering a node of a pipeline world's localkube off and on (`python -m localkube
node-stop|node-start`), for tests of lost nodes."""

from __future__ import annotations

import subprocess
import sys


def stop_node(world, node: str) -> None:  # type: ignore[no-untyped-def]
    """Power the node off (localkube node-stop): its kubelet and its pods' processes die."""
    done = subprocess.run(
        [sys.executable, "-m", "localkube", "node-stop", node, "--state-dir", world.kube.state_dir],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def start_node(world, node: str) -> None:  # type: ignore[no-untyped-def]
    """The node back (its kubelet again), for the module's next tests."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "localkube",
            "node-start",
            node,
            "--state-dir",
            world.kube.state_dir,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
