"""Tenants through the whole pipeline: S3 + localkube (kubelets) + Airflow `dag.test()`.

Two tenants applied from a test tenants file: each job lands in its own
tenant's namespace; a gang that does not fit the tenant's quota fails at
`validate`, before any pod exists; an unknown tenant is refused at `validate`;
a tenant's submit DAG refuses a request of another tenant, or one writing
under another tenant's prefix, and nothing is written; a request naming no
resources gets the tenant's LimitRange defaults; and, under a real Airflow
scheduler, the tenant's pool of one slot runs one job at a time, from its
launch to its teardown, for its request-file DAGs and its submit DAG alike.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import urllib.error
from datetime import datetime

import pytest
import yaml

from harness.pipeline_fixtures import NAMESPACE, TENANT, trigger, wait_for
from harness.world_fixtures import start_own_pipeline_world
from operators.cluster_policy import JOB_STEPS
from tenancy.admission import preflight_quota
from tenancy.apply import (
    Clients,
    Outcome,
    apply_pool,
    apply_pools,
    apply_tenants,
)
from tenancy.pools import PoolSpec, RestPoolClient
from tfjob import naming, pipeline_ids
from tfjob.request.model import load_request
from tfjob.tenants import TENANTS_FILE_ENV, load_tenants, pool_name

BUCKET = "tfjob-test"  # the world's (harness/s3_fixtures.py)

pytestmark = [pytest.mark.e2e]


@pytest.fixture(scope="module")
def pipeline_world(tmp_path_factory):
    """A world of this file's own: it applies a tenants file with quotas and another tenant
    to the world's localkube and gives that tenant pod identities in its S3."""
    yield from start_own_pipeline_world(tmp_path_factory)


OTHER = "other"
OTHER_NAMESPACE = naming.tenant_namespace(OTHER)
OTHER_DEFAULTS = {"cpu": "150m", "memory": "96Mi"}


@pytest.fixture(scope="module")
def world(pipeline_world, tmp_path_factory):
    path = tmp_path_factory.mktemp("tenants") / "tenants.yaml"
    # the world's S3 port: localkube enforces the NetworkPolicies' egress to it
    s3_port = load_tenants(pipeline_world.env[TENANTS_FILE_ENV]).network.s3_port
    path.write_text(
        yaml.safe_dump(
            {
                "network": {"s3_port": s3_port},
                "tenants": [
                    {
                        "name": TENANT,
                        "quota": {"cpu": "4", "memory": "4Gi", "nvidia.com/gpu": 8, "pods": 10},
                        "defaults": {"cpu": "100m", "memory": "128Mi"},
                        "max_concurrent_jobs": 2,
                        "bundle_prefixes": [f"s3://{BUCKET}/bundles/"],
                        "output_prefixes": [f"s3://{BUCKET}/outputs/"],
                        "images": ["python:*"],
                    },
                    {
                        "name": OTHER,
                        "quota": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": 0, "pods": 3},
                        "defaults": OTHER_DEFAULTS,
                        "max_concurrent_jobs": 1,
                        "bundle_prefixes": [f"s3://{BUCKET}/bundles/"],  # bundles may be shared
                        "output_prefixes": [f"s3://{BUCKET}/{OTHER}/outputs/"],
                        "images": ["python:*"],
                    },
                ],
            }
        )
    )
    import kubernetes

    clients = Clients.from_api_client(
        kubernetes.config.new_client_from_config(config_file=pipeline_world.kube.kubeconfig)
    )
    apply_tenants(clients, load_tenants(path))
    pipeline_world.env[TENANTS_FILE_ENV] = str(path)
    pipeline_world.add_pod_identities(load_tenants(path))
    pipeline_world.sync_tenant_roles()  # the other tenant's role: its DAGs name it
    return pipeline_world


def other_request(world, name: str, **changes):
    """A stand-in request of the other tenant, writing under its own output prefix."""
    return world.request(
        name, tenant=OTHER, output=f"s3://{BUCKET}/{OTHER}/outputs/{name}", **changes
    )


def pods_ever_created(world, namespace: str, job: str) -> list[str]:
    """Pods of `job` the namespace ever had: the scheduler's events outlive the pods."""
    events = world.kube.core_v1().list_namespaced_event(namespace).items
    return sorted(
        {
            e.involved_object.name
            for e in events
            if e.involved_object.kind == "Pod"
            and e.involved_object.name.startswith(
                f"{naming.sanitize_dns_label(job, naming.MAX_JOB_PART)}-"
            )
        }
    )


def test_each_tenants_job_lands_in_its_own_namespace(world):
    mine = world.run_request(world.request("ns-mine"))
    theirs = world.run_request(other_request(world, "ns-theirs"))
    assert mine.state == "success", mine
    assert theirs.state == "success", theirs
    assert pods_ever_created(world, NAMESPACE, "ns-mine")
    assert pods_ever_created(world, OTHER_NAMESPACE, "ns-theirs")
    assert not pods_ever_created(world, OTHER_NAMESPACE, "ns-mine")
    assert not pods_ever_created(world, NAMESPACE, "ns-theirs")


def test_a_gang_over_the_tenants_quota_fails_at_validate_before_any_pod(world):
    body = other_request(
        world,
        "too-wide",
        mode="distributed",
        strategy="multi_worker_mirrored",
        replicas={"chief": 0, "ps": 0, "worker": 4, "evaluator": 0},
    )
    result = world.run_request(body)
    assert result.state == "failed", result
    assert result.tasks["validate"] == "failed", result
    assert result.tasks["launch"] in ("upstream_failed", "skipped"), result
    assert "does not fit in the remaining quota" in result.log
    assert "pods: needed 4, free 3" in result.log
    assert pods_ever_created(world, OTHER_NAMESPACE, "too-wide") == []
    assert world.run_objects("too-wide") == []


def test_an_unknown_tenant_is_refused_at_validate(world):
    result = world.run_request(world.request("lost", tenant="nobody"))
    assert result.state == "failed", result
    assert result.tasks["validate"] == "failed", result
    assert "request.tenant: 'nobody' given; known tenants" in result.log
    assert f"{OTHER}" in result.log


def test_a_submit_dag_refuses_another_tenants_request_and_writes_nothing(world):
    # Airflow itself refuses the conf: the DAG's tenant Param allows only its tenant.
    with pytest.raises(AssertionError) as refused:
        world.run_submit(other_request(world, "cross"), tenant=TENANT)
    assert f"Invalid input for param tenant: '{OTHER}' is not one of ['{TENANT}']" in str(
        refused.value
    )
    # Its own tenant, but writing where the other tenant's models live.
    stolen = world.request("stolen", output=f"s3://{BUCKET}/{OTHER}/outputs/ns-theirs")
    before = world.s3_keys(f"{OTHER}/")
    result = world.run_submit(stolen)
    assert result.state == "failed" and result.tasks["validate"] == "failed", result
    assert result.tasks["fetch_bundle"] == "upstream_failed", result
    assert (
        f"request.output: 's3://{BUCKET}/{OTHER}/outputs/ns-theirs' given; tenant "
        f"{TENANT} may write outputs only under s3://{BUCKET}/outputs/" in result.log
    )
    assert world.s3_keys(f"{OTHER}/") == before
    assert world.run_objects("cross") == [] and world.run_objects("stolen") == []


def test_more_gpus_than_any_node_has_fails_at_gang_start_with_the_schedulers_reason(world):
    body = world.request(
        "gpu-hog",
        startup_timeout=15,
        active_deadline=120,
        resources={"worker": {"cpu": "100m", "memory": "128Mi", "gpu": 5}},
    )
    result = world.run_request(body)
    assert result.state == "failed", result
    assert result.tasks["validate"] == "success", result
    assert result.tasks["launch"] == "failed", result
    assert "0/2 nodes are available: 2 Insufficient nvidia.com/gpu." in result.log
    assert world.run_objects("gpu-hog") == []


def test_a_request_without_resources_gets_the_tenants_limitrange_defaults(world):
    body = other_request(
        world, "bare", resources={}, env={"STANDIN_BEHAVIOUR": json.dumps({"*": {"sleep": 4}})}
    )
    seen: dict[str, dict] = {}
    outcome: dict[str, object] = {}
    runner = threading.Thread(target=lambda: outcome.update(result=world.run_request(body)))
    runner.start()
    api = world.kube.core_v1()
    selector = f"{naming.LABEL_JOB}=bare"
    try:
        while runner.is_alive() and not seen:
            for pod in api.list_namespaced_pod(OTHER_NAMESPACE, label_selector=selector).items:
                for container in pod.spec.init_containers + pod.spec.containers:
                    seen[container.name] = container.resources.requests
            time.sleep(0.2)
    finally:
        runner.join()
    result = outcome["result"]
    assert result.state == "success", result
    # the request named none: the namespace's LimitRange filled them at pod creation
    # (the single replica owns the model: its keeper container names its own tiny requests)
    assert seen == {
        "fetch-bundle": OTHER_DEFAULTS,
        "tensorflow": OTHER_DEFAULTS,
        "tfjob-keeper": {"cpu": "10m", "memory": "32Mi"},
    }, seen

    # The preflight counts such replicas with the namespace's LimitRange, not a guess:
    # even a tenants-file entry saying otherwise does not change what it counts.
    tenant = load_tenants(world.env[TENANTS_FILE_ENV]).find(OTHER)
    stale = dataclasses.replace(tenant, defaults={"cpu": "900m", "memory": "900Mi"})
    check = preflight_quota(api, load_request(body), stale)
    assert "cpu: needed 0.16," in check.message, check.message  # 150m + the keeper's 10m
    assert "memory: needed 128Mi," in check.message, check.message  # 96Mi + 32Mi


POOL_RUN_TIMEOUT_S = 600
TERMINAL = ("success", "failed")
SUBMIT_DAG = pipeline_ids.submit_dag_id(OTHER)


def airflow_extra_env(world) -> dict[str, str]:
    keep = ("AIRFLOW_CONN_", "TFJOB_", "PYTHONPATH")
    env = {k: v for k, v in world.env.items() if k.startswith(keep)}
    # Only the DAGs under test run (the janitor would add load on 2 cores).
    env["AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION"] = "True"
    # Task supervisors gave up on a busy execution API after the default timeout.
    env["AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT"] = "60"
    return env


def fetch_or_none(airflow, path: str):
    try:
        return airflow.request("GET", path)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise


def parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


class PodSampler(threading.Thread):
    """Which runs have pods in a namespace, sampled every `interval` seconds until stopped."""

    def __init__(self, api, namespace: str, interval: float = 0.3):
        super().__init__(daemon=True)
        self.api, self.namespace, self.interval = api, namespace, interval
        self.samples: list[set[str]] = []
        self.halt = threading.Event()

    def run(self):
        while not self.halt.is_set():
            pods = self.api.list_namespaced_pod(self.namespace).items
            self.samples.append({p.metadata.labels.get(naming.LABEL_RUN) for p in pods})
            self.halt.wait(self.interval)


@pytest.mark.slow
def test_the_tenants_pool_runs_one_job_step_at_a_time_for_request_dags_and_submit_runs(
    world, tmp_path
):
    """A pool of 1 slot: a request file's run and a run of the same tenant's submit DAG,
    triggered together, both put every job step (launch..teardown) in the tenant's pool,
    the pool runs one of those steps at a time (a deferred train holding its slot), and
    the tenant's job cap keeps the two jobs' pods apart."""
    from harness.airflow_fixtures import start_airflow

    # Training outlasts the train task's deferral: a trigger firing before the scheduler has
    # seen the deferring process exit makes Airflow 3.3 fail the resumed task
    # (apache/airflow#72716).
    behaviour = json.dumps({"*": {"sleep": 10}})
    world.write_request(other_request(world, "pool-a", env={"STANDIN_BEHAVIOUR": behaviour}))
    submitted = other_request(world, "pool-b", env={"STANDIN_BEHAVIOUR": behaviour})
    airflow = start_airflow(tmp_path / "airflow", extra_env=airflow_extra_env(world))
    sampler = PodSampler(world.kube.core_v1(), OTHER_NAMESPACE)
    try:
        pools = RestPoolClient(airflow.url, airflow.token)
        results = {
            r.name: r.outcome for r in apply_pools(pools, load_tenants(world.env[TENANTS_FILE_ENV]))
        }
        assert results[pool_name(OTHER)] is Outcome.CREATED
        assert airflow.request("GET", f"/api/v2/pools/{pool_name(OTHER)}")["slots"] == 1
        # Applying again changes nothing.
        again = apply_pools(pools, load_tenants(world.env[TENANTS_FILE_ENV]))
        assert {r.outcome for r in again} == {Outcome.UNCHANGED}
        # A changed max_concurrent_jobs changes the live pool, and changing it back restores it.
        wider = apply_pool(pools, PoolSpec(pool_name(OTHER), 3, "wider for a moment"))
        assert wider.outcome is Outcome.CHANGED, wider
        assert airflow.request("GET", f"/api/v2/pools/{pool_name(OTHER)}")["slots"] == 3
        back = {
            r.name: r.outcome for r in apply_pools(pools, load_tenants(world.env[TENANTS_FILE_ENV]))
        }
        assert back[pool_name(OTHER)] is Outcome.CHANGED
        assert airflow.request("GET", f"/api/v2/pools/{pool_name(OTHER)}")["slots"] == 1

        triggers = {"tfjob__pool-a": {}, SUBMIT_DAG: submitted}
        for dag_id in triggers:
            wait_for(
                lambda d=dag_id: fetch_or_none(airflow, f"/api/v2/dags/{d}"),
                120,
                f"{dag_id} to be parsed",
                interval=1.0,
            )
            airflow.request("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
        sampler.start()
        runs = {
            dag_id: trigger(airflow, dag_id, conf)["dag_run_id"]
            for dag_id, conf in triggers.items()
        }

        def states():
            found = {
                d: airflow.request("GET", f"/api/v2/dags/{d}/dagRuns/{r}")["state"]
                for d, r in runs.items()
            }
            return found if all(s in TERMINAL for s in found.values()) else None

        final = wait_for(states, POOL_RUN_TIMEOUT_S, "both runs to end", interval=1.0)
        held_slots, steps = [], {}
        for dag_id, run_id in runs.items():
            tis = {
                ti["task_id"]: ti
                for ti in airflow.request(
                    "GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances"
                )["task_instances"]
            }
            steps[dag_id] = {
                t: (ti["state"], ti["start_date"], ti["end_date"]) for t, ti in tis.items()
            }
            for step in JOB_STEPS:
                # both DAGs name the tenant's pool when they are built
                assert tis[step]["pool"] == pool_name(OTHER), tis[step]
                assert tis[step]["start_date"], tis[step]
                held_slots.append(
                    (
                        parse_time(tis[step]["start_date"]),
                        parse_time(tis[step]["end_date"]),
                        f"{dag_id}.{step}",
                    )
                )
        assert final == {d: "success" for d in runs}, (final, steps)
    finally:
        sampler.halt.set()
        airflow.stop()
    # The pool: its one slot is held by one job step at a time, a deferred train included.
    held = sorted(held_slots)
    for (_, end, step), (next_start, _, next_step) in zip(held, held[1:], strict=False):
        assert end <= next_start, f"{step} held the slot until {end}, {next_step} from {next_start}"
    sampler.join()
    assert len({run for sample in sampler.samples for run in sample}) == 2, sampler.samples
    # The job cap (launch's admission): the two jobs' pods never coexist, even when the
    # other job's launch takes the slot between two steps of the first.
    assert all(len(sample) <= 1 for sample in sampler.samples), [
        s for s in sampler.samples if len(s) > 1
    ]
