"""The examples write summaries as TensorFlow users do, into TENSORBOARD_DIR.

Each example program is run by hand here (one process, real TensorFlow, few
steps), with TENSORBOARD_DIR set as the platform sets it for every replica,
and its event files are read back with the `tensorboard` package: Keras'
TensorBoard callback writes `epoch_loss` (digits-single), `tf.summary` writes
`loss` by step (digits-mwms; digits-ps's chief the same way). The distributed
runs in pods are tests/pipeline's.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

from harness.repo_root import REPO_ROOT

pytestmark = pytest.mark.slow

RUN_TIMEOUT_S = 300
# What the pod protocol sets that a by-hand run must not inherit from the test's environment.
CLUSTER_VARIABLES = ("TF_CONFIG", "PS_HOSTS", "WORKER_HOSTS", "CHIEF_HOSTS", "JOB_NAME")


def read_scalar_steps(folder: Path) -> dict[str, list[int]]:
    """tag -> the steps it was written at, over every event file under `folder`."""
    steps: dict[str, list[int]] = {}
    for path in sorted(folder.rglob("*tfevents*")):
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                steps.setdefault(value.tag, []).append(int(event.step))
    return steps


@pytest.mark.parametrize(
    ("bundle", "short", "tag", "last_step"),
    [
        ("digits-single", {"EPOCHS": "2"}, "epoch_loss", 1),  # Keras counts epochs from 0
        ("digits-mwms", {"STEPS": "60"}, "loss", 60),
    ],
)
def test_an_example_run_by_hand_writes_its_loss_by_step_into_tensorboard_dir(
    tmp_path: Path, bundle: str, short: dict[str, str], tag: str, last_step: int
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in CLUSTER_VARIABLES}
    env |= short | {
        "DATA_DIR": str(REPO_ROOT / "bundles" / bundle / "data"),
        "MODEL_DIR": str(tmp_path / "model"),
        "METRICS_FILE": str(tmp_path / "metrics.json"),
        "TENSORBOARD_DIR": str(tmp_path / "tensorboard"),
        "TF_CPP_MIN_LOG_LEVEL": "1",
    }
    result = subprocess.run(
        [sys.executable, "train.py"],
        cwd=REPO_ROOT / "bundles" / bundle / "code",
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "TFJOB_METRIC" in result.stdout  # the platform's own curves stay
    steps = read_scalar_steps(tmp_path / "tensorboard")
    assert tag in steps, steps
    assert max(steps[tag]) == last_step
