"""End to end with real TensorFlow: `digits-ps` loses a worker mid-training and still trains.

The example's own request (ParameterServerStrategy: chief, ps, 2 workers)
with `max_restarts: 2`, a 10 s checkpoint interval (the least allowed) and
more steps than the example's 400 (`STEPS` in its env, the knob the request
already has), so that training lasts long enough to be cut: the chief saves
a checkpoint every 100 steps (tf.train.CheckpointManager), its bootstrap
copies CHECKPOINT_DIR to S3. Once
a checkpoint is in S3, worker-1's pod is deleted with its grace period (a
drain). The run restarts the gang within the same Airflow run, every replica
of the new gang gets the checkpoints, the new chief prints `resumed from step
N` with N > 0, trains the steps still missing, and the run publishes a model
with the example's stated accuracy; run.json lists the 2 attempts.

`dag.test()` of the request DAG through localkube and the local S3, as in
tests/pipeline/test_pipeline_restarts.py (which covers the same with the stand-in, and
the failure paths).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from harness.gang_actions import abandon, delete_like_a_drain, first_gang_pods
from harness.pipeline_fixtures import TENANT, run_keys, wait_for
from harness.repo_root import REPO_ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1200)]

BUNDLES = REPO_ROOT / "bundles"
JOB = "digits-ps-restart"
# 400 steps train in 3-6 s; this many take about a minute, long enough for the first
# checkpoint to reach S3 (a sync every 10 s) and the worker to be deleted well before the
# chief is done, even when `import tensorflow` of the workers lags on two busy cores.
STEPS = 6000
STATED_ACCURACY = 0.90
# Four `import tensorflow` (bundle fetch, gang start, ClusterSpec) before the first
# checkpoint, on two cores other test files share.
FIRST_CHECKPOINT_TIMEOUT_S = 400
RUN_TIMEOUT_S = 900


def restart_request(world: Any) -> dict[str, Any]:
    request = yaml.safe_load((BUNDLES / "digits-ps" / "request.yaml").read_text())
    request.update(
        name=JOB,
        tenant=TENANT,
        bundle=f"s3://{world.bucket}/bundles/digits-ps.tar.gz",
        output=f"s3://{world.bucket}/outputs/{JOB}",
        startup_timeout=300,
        active_deadline=900,
        max_restarts=2,
        checkpoint_interval=10,
        env={**request.get("env", {}), "STEPS": str(STEPS)},
    )
    return request


def synced_checkpoint(world: Any) -> str | None:
    """The key of the run's `checkpoint` pointer in S3, once the chief's bootstrap sent one."""
    return next(
        (
            key
            for key in world.s3_keys(f"outputs/{JOB}/runs/")
            if key.endswith("/checkpoints/checkpoint")
        ),
        None,
    )


def test_digits_ps_restarts_from_its_s3_checkpoint_after_a_worker_is_deleted_and_publishes(
    pipeline_world,
):
    from runtime.bundle import write_bundle

    world = pipeline_world
    archive = world.home / "digits-ps.tar.gz"
    write_bundle(BUNDLES / "digits-ps", archive, "digits-ps")
    world.s3.client().upload_file(str(archive), world.bucket, "bundles/digits-ps.tar.gz")
    body = restart_request(world)
    world.write_request(body)
    running = world.start_dag(f"tfjob__{JOB}")
    try:

        def checkpoint_in_s3() -> str | None:
            if running.poll() is not None:
                out, err = running.communicate()
                raise AssertionError(
                    f"dag.test() ended before a checkpoint reached S3:\n{(out + err)[-20000:]}"
                )
            return synced_checkpoint(world)

        wait_for(
            checkpoint_in_s3,
            FIRST_CHECKPOINT_TIMEOUT_S,
            "the chief's first checkpoint in S3",
            interval=1.0,
        )
        pods = first_gang_pods(world, JOB)
        delete_like_a_drain(world, pods["worker-1"])
    except BaseException:
        abandon(world, running, JOB)
        raise
    result = world.finish_dag(running, timeout=RUN_TIMEOUT_S)

    assert result.state == "success", result
    assert set(result.tasks.values()) == {"success"}, result
    assert "worker-1 was deleted" in result.log, result
    assert "restarting as attempt 2 of 3" in result.log, result

    prefix = run_keys(result)
    manifest = json.loads(world.s3_text(prefix + "run.json"))
    attempts = manifest["attempts"]
    assert [a["number"] for a in attempts] == [1, 2], attempts
    failed, last = attempts
    assert failed["outcome"] == "restarted" and failed["failed_replica"] == "worker-1", attempts
    assert last["outcome"] == "succeeded", attempts
    restored = last["restored_checkpoint_step"]
    assert isinstance(restored, int) and 0 < restored < STEPS, attempts
    assert restored % 100 == 0, attempts  # the example saves every 100 steps (ckpt-<step>)

    # The new chief restored what the platform said, and trained only what was missing.
    chief_log = world.s3_text(prefix + "logs/chief-0.log")
    assert f"resumed from step {restored}" in chief_log, chief_log[-3000:]
    assert f"resumed from step {restored}" in result.log, result

    metrics = manifest["metrics"]
    assert metrics["steps"] == STEPS, metrics
    assert metrics["accuracy"] >= STATED_ACCURACY, metrics
    assert any(key.startswith(prefix + "model/") for key in world.s3_keys(prefix)), prefix
    assert world.run_objects(JOB) == []
