"""Request files cannot take another tenant's DAG, and a run's data stays its recorded tenant's.

Through a real Airflow (standalone), localkube and S3 (issue 27, item 1): tenant
`research` drops `aaa.yaml` declaring the name of tenant `test`'s request
`owned-job`. The DAG `tfjob__owned-job` stays `test`'s (its tag, who may read
and trigger it) and runs `test`'s file; `aaa.yaml` is an INVALID DAG of its own
saying why. A run's files are served only to the DAG's tenant, and only while
the DAG still belongs to the tenant the run was recorded for: when the request
file changes hands, research gets a 403, not test's model and logs.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import pytest
import yaml

from harness.airflow_fixtures import airflow_server
from harness.pipeline_fixtures import (
    explain_run,
    task_states,
    trigger,
    wait_for,
)
from harness.world_fixtures import run_world_airflow
from tfjob.pipeline_ids import request_dag_id

# Starting S3, localkube and Airflow, and one run, take the first test past 600 s on a busy
# 2-core machine (CI load 15 saw it); the run itself is awaited with its own deadline.
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1200)]

NAME = "owned-job"
DAG = request_dag_id(NAME)
INTRUDER_DAG = request_dag_id("aaa")
REPARSE_S = 180  # the DAG processor looks at the folder every 5 s, a file every 10 s; 2 cores
RUN_TIMEOUT_S = 540
SNAPSHOT = "bundle.tar.gz"  # fetch_bundle's copy of the bundle under the run's prefix


def research_request(world: Any, name: str) -> dict[str, Any]:
    return world.request(
        name,
        tenant="research",
        bundle=f"s3://{world.bucket}/research/bundles/b.tar.gz",
        output=f"s3://{world.bucket}/research/outputs/{name}",
    )


@pytest.fixture(scope="module")
def airflow(pipeline_world, tmp_path_factory):
    pipeline_world.write_request(pipeline_world.request(NAME))
    # research's file, sorted before test's, declaring test's request name
    (pipeline_world.requests_dir / "aaa.yaml").write_text(
        yaml.safe_dump(research_request(pipeline_world, NAME))
    )
    with run_world_airflow(pipeline_world, tmp_path_factory.mktemp("airflow-ownership")) as handle:
        yield handle


def user_of(airflow: Any, tenant: str) -> Any:
    users = airflow_server.read_users(airflow.home)
    return airflow.for_user(next(name for name in users if name.startswith(f"{tenant}-")))


def status_of(handle: Any, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """(HTTP status, decoded answer) of one call, a refusal included."""
    try:
        return 200, handle.request(method, path, body, retry=False)
    except urllib.error.HTTPError as error:
        text = error.read().decode(errors="replace")
        try:
            return error.code, json.loads(text)
        except ValueError:
            return error.code, text


def download_status(handle: Any, path: str) -> tuple[int, bytes]:
    """(HTTP status, body) of a file download: bytes, not JSON."""
    request = urllib.request.Request(
        handle.url + path, headers={"Authorization": f"Bearer {handle.token()}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=90) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def dag_of(airflow: Any, dag_id: str) -> dict[str, Any] | None:
    code, answer = status_of(airflow, "GET", f"/api/v2/dags/{dag_id}/details")
    return answer if code == 200 else None


def tags_of(dag: dict[str, Any]) -> set[str]:
    return {tag["name"] for tag in dag.get("tags") or []}


def files_path(run_id: str, path: str = "") -> str:
    quoted = urllib.parse.quote(run_id, safe="")
    return f"/tfjob/runs/{DAG}/{quoted}/files" + (f"/{path}" if path else "")


@pytest.fixture(scope="module")
def fetched(airflow) -> dict[str, Any]:
    """A run of test's DAG, triggered by test's own user, past validate and fetch_bundle: its
    description is recorded and its bundle snapshot lies under its prefix (what the rest of
    the run adds there is served, or refused, by the same routes)."""
    wait_for(lambda: dag_of(airflow, DAG), REPARSE_S, f"DAG {DAG} parsed", interval=1.0)
    run = trigger(user_of(airflow, "test"), DAG, {})
    run_id = run["dag_run_id"]

    def snapshot_taken() -> bool | None:
        states = task_states(airflow, DAG, run_id)
        if "failed" in states.values() or "upstream_failed" in states.values():
            raise AssertionError(explain_run(airflow, DAG, run_id))
        return states.get("fetch_bundle") == "success" or None

    try:
        wait_for(snapshot_taken, RUN_TIMEOUT_S, f"fetch_bundle of {run_id}", interval=2.0)
    except AssertionError as error:
        raise AssertionError(f"{error}\n{explain_run(airflow, DAG, run_id)}") from None
    return run


def test_a_file_declaring_another_tenants_request_name_does_not_take_its_dag(airflow, fetched):
    dag = dag_of(airflow, DAG)
    assert "tenant:test" in tags_of(dag) and "tenant:research" not in tags_of(dag)
    assert f"from {NAME}.yaml" in dag["description"]
    intruder = wait_for(
        lambda: dag_of(airflow, INTRUDER_DAG), REPARSE_S, "aaa.yaml's DAG", interval=1.0
    )
    assert "invalid" in tags_of(intruder)
    assert not [t for t in tags_of(intruder) if t.startswith("tenant:")]
    assert "INVALID request file aaa.yaml" in intruder["description"]
    assert f"request.name '{NAME}' given; allowed: 'aaa'" in intruder["description"]
    research = user_of(airflow, "research")
    assert status_of(research, "GET", f"/api/v2/dags/{DAG}")[0] == 403
    assert status_of(research, "GET", f"/api/v2/dags/{INTRUDER_DAG}")[0] == 403
    refused, _ = status_of(
        research, "POST", f"/api/v2/dags/{DAG}/dagRuns", {"logical_date": None, "conf": {}}
    )
    assert refused == 403
    # The run ran test's file, in test's namespace, under test's prefix.
    run_id = fetched["dag_run_id"]
    own = user_of(airflow, "test")
    code, listing = status_of(own, "GET", files_path(run_id))
    assert code == 200, listing
    assert listing["run_prefix"].endswith(f"/outputs/{NAME}/runs/{DAG}/{run_id}/")
    assert "/research/" not in listing["run_prefix"]
    assert SNAPSHOT in {f["path"] for f in listing["files"]}
    code, body = download_status(own, files_path(run_id, SNAPSHOT))
    assert code == 200 and body[:2] == b"\x1f\x8b", (code, body[:200])  # the gzip it is
    assert status_of(research, "GET", files_path(run_id))[0] == 403
    assert download_status(research, files_path(run_id, SNAPSHOT))[0] == 403


def test_a_run_is_refused_to_the_tenant_its_dag_changes_hands_to(pipeline_world, airflow, fetched):
    run_id = fetched["dag_run_id"]
    # test's request file now says research: the DAG becomes research's when parsed again
    (pipeline_world.requests_dir / f"{NAME}.yaml").write_text(
        yaml.safe_dump(research_request(pipeline_world, NAME))
    )
    wait_for(
        lambda: "tenant:research" in tags_of(dag_of(airflow, DAG) or {}),
        REPARSE_S,
        f"{DAG} parsed again as research's",
        interval=1.0,
    )
    research = user_of(airflow, "research")
    quoted = urllib.parse.quote(run_id, safe="")
    for path in (
        files_path(run_id),
        files_path(run_id, SNAPSHOT),
        f"/tfjob/runs/{DAG}/{quoted}",
        f"/tfjob/runs/{DAG}/{quoted}/logs/worker-0",
        f"/tfjob/runs/{DAG}/{quoted}/curves",
    ):
        # Airflow refuses research (403) until its roles hold the reparsed DAG's rights;
        # then the TFJob routes answer, and refuse the run recorded for test.
        code, answer = wait_for(
            lambda p=path: (
                (got := status_of(research, "GET", p))
                and "recorded for tenant 'test'" in json.dumps(got[1])
                and got
            ),
            REPARSE_S,
            f"the run refused for its recorded tenant ({path})",
            interval=2.0,
        )
        assert code == 403, (path, answer)
    # test's user lost the DAG with the file: Airflow itself refuses it now
    assert status_of(user_of(airflow, "test"), "GET", files_path(run_id))[0] == 403
