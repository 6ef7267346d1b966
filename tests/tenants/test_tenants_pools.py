"""Airflow pools of the tenants, set through Airflow's own model (a migrated database).

The REST path (`RestPoolClient`) is exercised against a running Airflow in
tests/tenants/test_tenants_pipeline.py; this one covers the start-up path.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from harness.postgres_fixtures import airflow_database_url
from harness.repo_root import REPO_ROOT
from tenancy.apply import build_pool_specs
from tfjob.tenants import validate_tenants

pytestmark = [pytest.mark.e2e]

REPO = REPO_ROOT
TENANTS = {
    "tenants": [
        {
            "name": "pool-a",
            "quota": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": 0, "pods": 2},
            "defaults": {"cpu": "100m", "memory": "128Mi"},
            "max_concurrent_jobs": 3,
            "bundle_prefixes": ["s3://pool-a/bundles/"],
            "output_prefixes": ["s3://pool-a/outputs/"],
        },
        {
            "name": "pool-b",
            "quota": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": 0, "pods": 2},
            "defaults": {"cpu": "100m", "memory": "128Mi"},
            "bundle_prefixes": ["s3://pool-b/bundles/"],
            "output_prefixes": ["s3://pool-b/outputs/"],
        },
    ]
}

APPLY = textwrap.dedent("""
    import json, sys
    from tenancy.pools import DatabasePoolClient
    from tenancy.apply import apply_pools
    from tfjob.tenants import load_tenants
    results = apply_pools(DatabasePoolClient(), load_tenants(sys.argv[1]))
    print("POOLS " + json.dumps({r.name: [r.outcome.value, r.note] for r in results}))
""")


def apply_in_airflow(env: dict[str, str], tenants_file: Path) -> dict[str, list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", APPLY, str(tenants_file)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    for line in done.stdout.splitlines():
        if line.startswith("POOLS "):
            return json.loads(line[len("POOLS ") :])
    raise AssertionError(f"no result (rc {done.returncode}): {done.stderr[-4000:]}")


def test_pool_specs_follow_max_concurrent_jobs():
    specs = build_pool_specs(validate_tenants(TENANTS))
    assert [(s.name, s.slots) for s in specs] == [
        ("tfjob-tenant-pool-a", 3),
        ("tfjob-tenant-pool-b", 1),
    ]
    assert "at most 3 concurrent job(s)" in specs[0].description


def test_pools_are_created_once_then_left_or_resized(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(
        AIRFLOW_HOME=str(tmp_path / "airflow"),
        AIRFLOW_CONFIG=str(REPO / "airflow.cfg"),
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=airflow_database_url(tmp_path / "airflow"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        PYTHONPATH=str(REPO),
    )
    (tmp_path / "airflow").mkdir()
    migrated = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert migrated.returncode == 0, migrated.stderr[-3000:]
    path = tmp_path / "tenants.yaml"
    path.write_text(yaml.safe_dump(TENANTS))
    assert apply_in_airflow(env, path) == {
        "tfjob-tenant-pool-a": ["created", "3 slot(s)"],
        "tfjob-tenant-pool-b": ["created", "1 slot(s)"],
    }
    assert apply_in_airflow(env, path) == {
        "tfjob-tenant-pool-a": ["unchanged", ""],
        "tfjob-tenant-pool-b": ["unchanged", ""],
    }
    resized = copy.deepcopy(TENANTS)
    resized["tenants"][1]["max_concurrent_jobs"] = 2
    path.write_text(yaml.safe_dump(resized))
    assert apply_in_airflow(env, path)["tfjob-tenant-pool-b"] == ["changed", "slots 1 -> 2"]
