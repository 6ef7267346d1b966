"""The world of the concurrent-jobs scale bench: the pipeline world on simulated nodes, 4 tenants.

Why this exists: measurement 7b (bench/bench_concurrent_scale.py) runs 100 jobs of 8 replicas
through Airflow, which 2 cores cannot run as processes. It reuses the shared world of
bench/world.py (S3, localkube, PostgreSQL, a migrated Airflow DB, `airflow standalone` with
LocalExecutor and a triggerer) with two changes: localkube gets a nodes file of only simulated
nodes (localkube/README.md, "Simulated nodes"), and the product reads a tenants file of its own
(`TFJOB_TENANTS_FILE`, inherited by every Airflow process) with 4 tenants sized for the batch:
the world's `test` tenant and three more, each with its namespace (as `tshell tenants apply`
makes it) and its Airflow pool. Production defaults are untouched: the tenants file and the
nodes file are written into the world folder.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent

import yaml  # noqa: E402

from bench.world import (  # noqa: E402
    WORLD_FILE,
    load_airflow,
    load_world,
    start_world,
    start_world_airflow,
)
from harness import pipeline_fixtures  # noqa: E402
from harness.localkube_fixtures import start_localkube  # noqa: E402
from harness.s3_fixtures import BUCKETS  # noqa: E402

TENANTS = ("test", "scale-b", "scale-c", "scale-d")  # `test`: the world's own tenant
NODE_CAPACITY = {"cpu": "64", "memory": "256Gi", "pods": "250"}
POOL_SLOTS = 64  # per tenant, as world.TENANT_POOL_SLOTS: parallelism (16) is the limit


def write_tenants_file(path: Path, bucket: str, jobs_per_tenant: int) -> Path:
    """A tenants file whose quotas and job limits let every job of the batch run at once."""
    base = yaml.safe_load((BENCH.parent / "deploy" / "tenants.yaml").read_text())
    tenants = [
        {
            "name": name,
            "description": "bench/bench_concurrent_scale.py (issue 18)",
            "quota": {
                "cpu": "1000",
                "memory": "4Ti",
                "nvidia.com/gpu": "0",
                "pods": str(16 * jobs_per_tenant),
            },
            "defaults": {"cpu": "10m", "memory": "16Mi"},
            "max_concurrent_jobs": jobs_per_tenant,
            "bundle_prefixes": [f"s3://{bucket}/bundles/"],
            "output_prefixes": [output_prefix(bucket, name)],
            "images": ["python:*"],
        }
        for name in TENANTS
    ]
    path.write_text(yaml.safe_dump({"network": base["network"], "tenants": tenants}))
    return path


def output_prefix(bucket: str, tenant: str) -> str:
    """Where a tenant's jobs publish: the world's `outputs/` for `test` (its requests'
    default), `<tenant>/outputs/` for the others (tenants' output prefixes may not overlap)."""
    return f"s3://{bucket}/outputs/" if tenant == TENANTS[0] else f"s3://{bucket}/{tenant}/outputs/"


def write_nodes_file(path: Path, count: int) -> Path:
    nodes = [
        {"name": f"sim-{i}", "simulated": True, "capacity": NODE_CAPACITY}
        for i in range(1, count + 1)
    ]
    path.write_text(yaml.safe_dump(nodes))
    return path


def start_scale_world(folder: Path, nodes: int, jobs_per_tenant: int) -> dict[str, Any]:
    """S3, localkube of `nodes` simulated nodes, PostgreSQL, Airflow DB, then Airflow; 4 tenants.

    Records world.json and airflow.json in `folder` as bench/world.py does (so
    `world.stop_world(folder)` stops it all)."""
    from tfjob.tenants import build_namespace, load_tenants

    bucket = BUCKETS[0]  # the S3 server's first bucket: the world's (S3Server.bucket)
    tenants_file = write_tenants_file(folder / "tenants.yaml", bucket, jobs_per_tenant)
    nodes_file = write_nodes_file(folder / "nodes.yaml", nodes)
    os.environ["TFJOB_TENANTS_FILE"] = str(tenants_file)  # every process started from here

    def start_simulated(tmp_path: Path, forward_ports: tuple = (), **_: Any) -> Any:
        return start_localkube(tmp_path, forward_ports=forward_ports, nodes_file=str(nodes_file))

    original = pipeline_fixtures.start_localkube
    pipeline_fixtures.start_localkube = start_simulated
    try:
        record = start_world(folder)
    finally:
        pipeline_fixtures.start_localkube = original
    world, _ = load_world(folder)
    if world.bucket != bucket:
        raise RuntimeError(
            f"the world's bucket is {world.bucket!r}, the tenants file names {bucket!r}"
        )
    config = load_tenants(tenants_file)
    # Airflow starts with the recorded environment: this tenants file, and a pods-only
    # presigning connection for each of its tenants (the world made only deploy/'s).
    world.add_pod_identities(config)
    saved = json.loads((folder / WORLD_FILE).read_text())
    saved["env"].update(world.env, TFJOB_TENANTS_FILE=str(tenants_file))
    (folder / WORLD_FILE).write_text(json.dumps(saved, indent=1))
    api = world.kube.core_v1()
    for name in TENANTS[1:]:
        api.create_namespace(build_namespace(config.find(name)))
    start_world_airflow(folder)
    apply_pools(folder)
    return record


def apply_pools(folder: Path) -> None:
    from tenancy.apply import PoolSpec, RestPoolClient, apply_pool
    from tfjob.tenants import pool_name

    client = load_airflow(folder)
    # `test`'s pool is world.start_world_airflow's (64 slots, enough for 25 jobs). Changing it
    # fails: Airflow 3.3 answers the PATCH of tenancy/pools.py with 422 ("pool" field
    # required in the body), a bug left to that module's owner.
    for name in TENANTS[1:]:
        apply_pool(
            RestPoolClient(client.url, client.login), PoolSpec(pool_name(name), POOL_SLOTS, "")
        )


def read_localkube_pids(folder: Path) -> dict[str, Any]:
    """The API server's pid and the simulated kubelet's (localkube.json of the world)."""
    _, record = load_world(folder)
    info = json.loads((Path(record["kube"]["state_dir"]) / "localkube.json").read_text())
    kubelets = info["pids"].get("kubelets") or {}
    return {
        "apiserver": info["pids"]["apiserver"],
        "hollow": next(iter(kubelets.values()), None),
        "port": int(record["kube"]["api_url"].rsplit(":", 1)[1].strip("/")),
    }
