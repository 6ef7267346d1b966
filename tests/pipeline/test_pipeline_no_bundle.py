"""End to end: a Kubeflow TFJob whose program is in its image runs with no bundle (issue 32).

The TFJob names no bundle (no --bundle, no annotation), so its converted request has
none: fetch_bundle snapshots nothing, the init container fetches nothing and leaves
`code/` and `data/` empty, and the container's command runs as the image has its
program. In localkube an image is the host's interpreter (localkube/images.yaml), so the
image's program here is given inline (`python3 -c`): it reads its TF_CONFIG, and worker 0
writes a model to MODEL_DIR and its metrics, which the run archives and publishes.
"""

from __future__ import annotations

import json

import pytest
import yaml

from harness.pipeline_fixtures import TENANT, run_keys
from tfjob.kubeflow.convert import Destination
from tshell.runs.submit import build_conf

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

JOB = "image-only"
PROGRAM = """
import json, os, pathlib
config = json.loads(os.environ["TF_CONFIG"])
task = config["task"]
print("image program", task["type"], task["index"], "cluster", sorted(config["cluster"]))
print("code", sorted(os.listdir(".")), "data", sorted(os.listdir(os.environ["DATA_DIR"])))
if task == {"type": "worker", "index": 0}:
    model = pathlib.Path(os.environ["MODEL_DIR"])
    model.mkdir(parents=True, exist_ok=True)
    (model / "model.json").write_text(json.dumps({"weights": [1, 2, 3]}))
    pathlib.Path(os.environ["METRICS_FILE"]).write_text(json.dumps({"accuracy": 0.97}))
"""


def image_only_tfjob() -> dict:
    container = {
        "name": "tensorflow",
        "image": "python:3.11",
        "command": ["python3", "-c", PROGRAM],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
    }
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": JOB},
        "spec": {
            "runPolicy": {
                "cleanPodPolicy": "All",
                "activeDeadlineSeconds": 240,
                "schedulingPolicy": {"scheduleTimeoutSeconds": 60},
            },
            "tfReplicaSpecs": {
                "Worker": {
                    "replicas": 2,
                    "restartPolicy": "Never",
                    "template": {"spec": {"containers": [container]}},
                }
            },
        },
    }


def test_a_tfjob_whose_program_is_in_its_image_runs_without_a_bundle(pipeline_world, tmp_path):
    world = pipeline_world
    path = tmp_path / "tfjob.yaml"
    path.write_text(yaml.safe_dump(image_only_tfjob()))
    place = Destination(tenant=TENANT, output=f"s3://{world.bucket}/outputs/{JOB}")
    conf = build_conf(path, [], place)
    assert conf["bundle"] is None and conf["entrypoint"][:2] == ["python3", "-c"]

    result = world.run_submit(conf)
    assert result.state == "success", result
    prefix = run_keys(result, JOB)
    keys = world.s3_keys(prefix)
    assert prefix + "model/model.json" in keys
    assert prefix + "bundle.tar.gz" not in keys  # nothing was snapshotted
    manifest = json.loads(world.s3_text(prefix + "run.json"))
    assert manifest["bundle"] is None and manifest["request"]["bundle"] is None
    assert manifest["metrics"]["accuracy"] == 0.97
    assert sorted(manifest["cluster_spec"]) == ["worker"]
    for index in (0, 1):
        log = world.s3_text(prefix + f"logs/worker-{index}.log")
        assert "no bundle: the program is in the image" in log, log[-3000:]
        assert f"image program worker {index} cluster ['worker']" in log, log[-3000:]
        assert "code [] data []" in log, log[-3000:]
    latest = json.loads(world.s3_text(f"outputs/{JOB}/latest"))
    assert latest["run_id"] == result.run_id
    assert world.run_objects(JOB) == []
