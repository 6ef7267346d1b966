"""The pipeline tests' stand-in program (harness/standin.py) on its own: it checkpoints the
way TensorFlow does and resumes from what it finds, so a failing pipeline test is about
the pipeline, not the stand-in."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from harness.standin import STANDIN_PROGRAM


def run_standin(tmp_path: Path, behaviour: dict) -> subprocess.CompletedProcess[str]:
    (tmp_path / "data").mkdir(exist_ok=True)
    (tmp_path / "data" / "numbers.txt").write_text("1\n2\n")
    (tmp_path / "ckpt").mkdir(exist_ok=True)
    program = tmp_path / "train.py"
    program.write_text(STANDIN_PROGRAM)
    env = {
        **os.environ,
        "TFJOB_ROLE": "chief",
        "TFJOB_INDEX": "0",
        "STANDIN_BEHAVIOUR": json.dumps({"chief-0": behaviour}),
        "CHECKPOINT_DIR": str(tmp_path / "ckpt"),
        "DATA_DIR": str(tmp_path / "data"),
        "MODEL_DIR": str(tmp_path / "model"),
        "METRICS_FILE": str(tmp_path / "m.json"),
    }
    return subprocess.run(
        [sys.executable, str(program)], env=env, capture_output=True, text=True, timeout=60
    )


def test_the_standin_checkpoints_each_step_and_resumes_from_the_pointer(tmp_path: Path):
    first = run_standin(tmp_path, {"steps": 3, "checkpoint_every": 0.01})
    assert first.returncode == 0, first.stderr
    assert "resumed" not in first.stdout
    pointer = (tmp_path / "ckpt" / "checkpoint").read_text()
    assert pointer == 'model_checkpoint_path: "ckpt-3"\n'
    # Whole as TensorFlow writes it: the pod's sync sends the pointer only then.
    assert (tmp_path / "ckpt" / "ckpt-3.data-00000-of-00001").exists()
    assert (tmp_path / "ckpt" / "ckpt-3.index").exists()
    second = run_standin(tmp_path, {"steps": 5, "checkpoint_every": 0.01})
    assert "standin chief-0 resumed from step 3" in second.stdout, second.stderr
    assert (tmp_path / "ckpt" / "checkpoint").read_text() == 'model_checkpoint_path: "ckpt-5"\n'
    assert not (tmp_path / "ckpt" / "ckpt-6.index").exists()


def test_the_standin_prints_a_curve_point_and_a_timed_tick_every_metric_every_seconds(
    tmp_path: Path,
):
    from runtime.metric_lines import collect_metric_points

    done = run_standin(tmp_path, {"sleep": 1.6, "metric_every": 0.5})
    assert done.returncode == 0, done.stderr
    points = collect_metric_points(done.stdout.splitlines())
    assert [p["step"] for p in points] == [10.0, 20.0, 30.0]
    assert points[0]["loss"] > points[-1]["loss"] and "accuracy" in points[-1]
    assert "standin chief-0 tick 3 at " in done.stdout
