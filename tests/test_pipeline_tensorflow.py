"""One real TensorFlow job through the whole pipeline: bundles/digits-ps (chief + ps + 2 workers).

Costs ~650 MB of memory and 3-7 s of import per replica: one run only. The
request is the bundle's own request.yaml with this world's tenant, bucket
and output.
"""

# ruff: noqa: F811  (pytest fixtures imported by name, then requested as parameters)
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from pipeline_fixtures import TENANT, pipeline_world  # noqa: F401  (pytest fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

BUNDLES = Path(__file__).resolve().parent.parent / "bundles"
STATED_ACCURACY = 0.90


def test_digits_ps_trains_with_tensorflow_to_its_stated_accuracy(pipeline_world, tmp_path):
    from runtime.bundle import write_bundle

    world = pipeline_world
    source = BUNDLES / "digits-ps"
    if not (source / "data" / "digits.npz").exists():
        pytest.fail("bundles/digits-ps/data/digits.npz is missing: run scripts/export_digits.py")
    packed = tmp_path / "digits-ps.tar.gz"
    write_bundle(source, packed, "digits-ps")
    world.s3.client().upload_file(str(packed), world.bucket, "bundles/digits-ps.tar.gz")

    request = yaml.safe_load((source / "request.yaml").read_text())
    request.update(
        tenant=TENANT,
        bundle=f"s3://{world.bucket}/bundles/digits-ps.tar.gz",
        output=f"s3://{world.bucket}/outputs/digits-ps",
        startup_timeout=180,
    )
    result = world.run_request(request)
    assert result.state == "success", result
    prefix = f"outputs/digits-ps/runs/{result.run_id}/"
    keys = world.s3_keys(prefix)
    assert any(k.startswith(prefix + "model/") for k in keys), keys
    for replica in ("chief-0", "ps-0", "worker-0", "worker-1"):
        assert prefix + f"logs/{replica}.log" in keys
    manifest = json.loads(world.s3_text(prefix + "run.json"))
    assert manifest["metrics"]["accuracy"] >= STATED_ACCURACY, manifest["metrics"]
    assert sorted(manifest["cluster_spec"]) == ["chief", "ps", "worker"]
    assert world.run_objects("digits-ps") == []
