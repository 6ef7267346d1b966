"""The distributed examples resume from the checkpoints in CHECKPOINT_DIR (slow: real TensorFlow).

The platform gives every replica a CHECKPOINT_DIR and, before a restarted gang
starts, restores the model owner's checkpoints into each of them
(docs/architecture.md, "The pod protocol"). Here one directory stands for all
of them: every replica of both runs gets it, as if restored into each, and only
the model owner writes there. The first run is cut short through the knob the
request already has (`STEPS` in its env, `--train_steps` in its args): it starts
from step 0 and leaves checkpoints. The second run is the request as written:
it resumes from the step the first run's `checkpoint` file names (read as the
platform reads it) and still reaches the stated accuracy in the full number of
steps. Each run is a local cluster of processes (harness/local_tf_cluster.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness.local_tf_cluster import LocalReplica, LocalTFCluster
from harness.repo_root import REPO_ROOT
from tfjob.checkpoints import POINTER_NAME, parse_checkpoint_step
from tfjob.request.model import TrainingRequest, load_request

BUNDLES_DIR = REPO_ROOT / "bundles"
# One run: 2-4 TensorFlow processes on 2 shared cores (docs/examples.md, "Time each example takes").
RUN_TIMEOUT_S = 300
START_LINE = re.compile(r"^(resumed from step (?P<step>\d+)|starting from step 0)$", re.MULTILINE)
STATED_ACCURACY = re.compile(r"^# Stated accuracy: >= (0\.\d+)", re.MULTILINE)


@dataclass(frozen=True)
class Example:
    """A bundle's request, and how its first run is cut short."""

    bundle: str
    request_file: str
    short_steps: int
    short_env: dict[str, str] = field(default_factory=dict)
    short_args: tuple[str, ...] = ()
    workers_exit: bool = True  # digits-ps: workers serve until the platform stops them

    @property
    def request(self) -> TrainingRequest:
        return load_request(BUNDLES_DIR / self.bundle / self.request_file)

    @property
    def stated_accuracy(self) -> float:
        text = (BUNDLES_DIR / self.bundle / self.request_file).read_text()
        return float(STATED_ACCURACY.search(text).group(1))


EXAMPLES = [
    Example("digits-mwms", "request.yaml", 100, short_env={"STEPS": "100"}),
    Example("digits-ps", "request.yaml", 100, short_env={"STEPS": "100"}, workers_exit=False),
    Example("digits-tf1", "request.yaml", 200, short_args=("--train_steps", "200")),
    # The TF1 chief as job `chief` (not worker 0), its cluster from expanded flags.
    Example("digits-tf1-flags", "request-chief.yaml", 200, short_args=("--train_steps=200",)),
]


def run_to_the_end(
    request: TrainingRequest, example: Example, workdir: Path, checkpoint_dir: Path
) -> tuple[LocalReplica, dict[str, str]]:
    """Run the request locally until its model owner (and every worker that exits) is done.

    Returns the owner and every replica's log by name.
    """
    # CHECKPOINT_DIR as the platform sets it for every replica (the launcher does not).
    request = request.model_copy(
        update={"env": {**request.env, "CHECKPOINT_DIR": str(checkpoint_dir)}}
    )
    with LocalTFCluster.from_request(BUNDLES_DIR / example.bundle, request, workdir) as job:
        owner = job.wait_for_owner(timeout_s=RUN_TIMEOUT_S)
        if example.workers_exit:
            for replica in job.replicas:
                if replica.role != "ps":
                    job.wait_for_exit(replica, timeout_s=RUN_TIMEOUT_S)
        logs = {r.name: r.log_path.read_text(errors="replace") for r in job.replicas}
    return owner, logs


def start_lines(log: str) -> list[re.Match]:
    return list(START_LINE.finditer(log))


def read_pointer_step(checkpoint_dir: Path) -> int | None:
    """The step of the latest checkpoint, from TensorFlow's `checkpoint` file, as the platform."""
    pointer = checkpoint_dir / POINTER_NAME
    assert pointer.is_file(), f"no {POINTER_NAME} file in {sorted(checkpoint_dir.iterdir())}"
    return parse_checkpoint_step(pointer.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: f"{e.bundle}/{e.request_file}")
def test_example_resumes_from_the_checkpoints_a_cut_short_run_left(example, tmp_path):
    checkpoint_dir = tmp_path / "checkpoints"
    checkpoint_dir.mkdir()
    full = example.request
    short = full.model_copy(
        update={"env": {**full.env, **example.short_env}, "args": [*full.args, *example.short_args]}
    )

    owner, logs = run_to_the_end(short, example, tmp_path / "first", checkpoint_dir)
    lines = start_lines(logs[owner.name])
    assert [m.group(0) for m in lines] == ["starting from step 0"], logs[owner.name][-3000:]
    for name, log in logs.items():
        assert name == owner.name or not start_lines(log), f"{name} printed a start line"
    saved_step = read_pointer_step(checkpoint_dir)
    # TF2 loops save at exactly the last step; TF1's asynchronous workers may overshoot it.
    assert saved_step is not None and saved_step >= example.short_steps, saved_step

    owner, logs = run_to_the_end(full, example, tmp_path / "second", checkpoint_dir)
    lines = start_lines(logs[owner.name])
    assert [m.group(0) for m in lines] == [f"resumed from step {saved_step}"], logs[owner.name][
        -3000:
    ]
    metrics = owner.read_metrics()
    print(f"{example.bundle}: resumed from step {saved_step}; {metrics}")
    full_steps = int(full.env.get("STEPS", "600"))  # the TF1 programs' --train_steps is 600
    assert metrics["steps"] >= full_steps, metrics
    assert metrics["accuracy"] >= example.stated_accuracy, logs[owner.name][-3000:]
    assert any(owner.model_dir.iterdir()), "no model written"
    assert read_pointer_step(checkpoint_dir) >= full_steps
