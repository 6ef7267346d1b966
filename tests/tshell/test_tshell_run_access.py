"""What tshell says when Airflow's authorization refuses a user, and which DAGs it looks in.

A fake Airflow (a local HTTP server with canned answers, no Airflow) stands
in for the FAB auth manager: a user without a role for a DAG gets 403, a
tenant without a submit DAG gets 404, and lists hold only TF-on-K8s DAGs
once tshell has filtered Airflow's over-wide prefix match.
"""

from __future__ import annotations

import http.server
import json
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from harness.tshell_fixtures import point_tshell_at
from tshell.cli import run as run_tshell_cli
from tshell.exitcodes import ExitCode

RUN_ID = "manual__2026-12-03T10:00:00+00:00"
FORBIDDEN = {"detail": "Forbidden"}
REQUEST_YAML = """\
name: digits
tenant: {tenant}
entrypoint: [python3, train.py]
bundle: s3://bundles/digits.tar.gz
output: s3://models/digits
"""


@dataclass
class Answers:
    """Canned answers by (method, path); each request seen as (method, path, query, body)."""

    url: str = ""
    routes: dict[tuple[str, str], tuple[int, Any]] = field(default_factory=dict)
    seen: list[tuple[str, str, dict[str, list[str]], Any]] = field(default_factory=list)

    def answer(self, method: str, path: str, status: int, body: Any) -> None:
        self.routes[(method, path)] = (status, body)

    def paths(self, method: str) -> list[str]:
        return [path for m, path, _, _ in self.seen if m == method]


class FakeAirflow(http.server.BaseHTTPRequestHandler):
    answers = Answers()

    def handle_call(self, method: str) -> None:
        url = urllib.parse.urlsplit(self.path)
        path = urllib.parse.unquote(url.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        self.answers.seen.append((method, path, urllib.parse.parse_qs(url.query), body))
        if path == "/auth/token":
            self.reply(201, {"access_token": "t"})
            return
        self.reply(*self.answers.routes.get((method, path), (404, {"detail": "no route"})))

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self.handle_call("GET")

    def do_POST(self) -> None:  # noqa: N802
        self.handle_call("POST")

    def do_PATCH(self) -> None:  # noqa: N802
        self.handle_call("PATCH")

    def reply(self, code: int, body: Any) -> None:
        payload = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def airflow(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Answers]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeAirflow)
    FakeAirflow.answers = Answers(url=f"http://127.0.0.1:{server.server_port}")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    point_tshell_at(monkeypatch, tmp_path, FakeAirflow.answers.url, "alice", "pw")
    yield FakeAirflow.answers
    server.shutdown()


def tshell(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = run_tshell_cli(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def request_file(tmp_path: Path, tenant: str) -> str:
    path = tmp_path / "request.yaml"
    path.write_text(REQUEST_YAML.format(tenant=tenant))
    return str(path)


def run_path(dag_id: str, run_id: str = RUN_ID) -> str:
    return f"/api/v2/dags/{dag_id}/dagRuns/{run_id}"


def a_run(dag_id: str, state: str = "running", run_id: str = RUN_ID) -> dict[str, Any]:
    """A DAG run as the REST API answers it (what the generated client requires, too)."""
    return {
        "dag_id": dag_id,
        "dag_run_id": run_id,
        "dag_display_name": dag_id,
        "state": state,
        "conf": {},
        "run_type": "manual",
        "run_after": "2026-12-03T10:00:00Z",
        "dag_versions": [],
    }


# --- submit ---------------------------------------------------------------------------------


def test_submit_triggers_the_submit_dag_of_the_request_s_tenant(airflow, capsys, tmp_path):
    airflow.answer(
        "POST", "/api/v2/dags/tfjob_submit__team-a/dagRuns", 200, a_run("tfjob_submit__team-a")
    )
    code, out, err = tshell(capsys, "submit", request_file(tmp_path, "team-a"), "--json")
    assert code == ExitCode.OK, err
    assert json.loads(out)["dag_id"] == "tfjob_submit__team-a"


def test_submit_refused_by_airflow_names_the_user_the_tenant_and_the_dag(airflow, capsys, tmp_path):
    airflow.answer("POST", "/api/v2/dags/tfjob_submit__team-b/dagRuns", 403, FORBIDDEN)
    code, out, err = tshell(capsys, "submit", request_file(tmp_path, "team-b"))
    assert code == 3
    assert err == (
        "error: user alice may not submit for tenant team-b "
        "(Airflow answered 403 for DAG tfjob_submit__team-b)\n"
    )
    assert out == ""


def test_submit_for_a_tenant_without_a_submit_dag_says_where_tenants_are_listed(
    airflow, capsys, tmp_path
):
    airflow.answer("POST", "/api/v2/dags/tfjob_submit__team-z/dagRuns", 404, {"detail": "no"})
    code, _, err = tshell(capsys, "submit", request_file(tmp_path, "team-z"))
    assert code == ExitCode.NOT_FOUND == 4
    assert err.startswith(
        f"error: tenant 'team-z' has no submit DAG on {airflow.url} "
        "(Airflow answered 404 for DAG tfjob_submit__team-z): check the tenant's name with "
        "`tshell tenants list` and deploy/tenants.yaml"
    )


# --- reading and cancelling runs --------------------------------------------------------------


def test_status_of_a_run_of_a_dag_the_user_may_not_read_names_user_run_and_dag(airflow, capsys):
    airflow.answer("GET", run_path("tfjob__nightly"), 403, FORBIDDEN)
    code, _, err = tshell(capsys, "status", RUN_ID, "--dag", "tfjob__nightly")
    assert code == 3
    assert err == (
        f"error: user alice may not read run {RUN_ID} of DAG tfjob__nightly "
        "(Airflow answered 403 for DAG tfjob__nightly)\n"
    )


@pytest.mark.parametrize(
    "argv",
    [["status", RUN_ID], ["logs", RUN_ID, "--task", "train"], ["logs", RUN_ID]],
    ids=["status", "logs --task", "logs"],
)
def test_a_403_after_the_run_was_found_names_user_run_and_dag(airflow, capsys, argv):
    airflow.answer("GET", "/api/v2/dags/~/dagRuns", 200, {"dag_runs": [a_run("tfjob__nightly")]})
    airflow.answer("GET", f"{run_path('tfjob__nightly')}/taskInstances", 403, FORBIDDEN)
    code, _, err = tshell(capsys, *argv)
    assert code == 3
    assert err.endswith(
        f"error: user alice may not read run {RUN_ID} of DAG tfjob__nightly "
        "(Airflow answered 403 for DAG tfjob__nightly)\n"
    )


def test_cancel_refused_by_airflow_names_user_run_and_dag(airflow, capsys):
    dag = "tfjob_submit__team-a"
    airflow.answer("GET", run_path(dag), 200, a_run(dag))
    airflow.answer("GET", f"/api/v2/dags/{dag}/tasks", 200, {"tasks": []})
    task = {"task_id": "train", "state": "running", "map_index": -1, "try_number": 1}
    airflow.answer("GET", f"{run_path(dag)}/taskInstances", 200, {"task_instances": [task]})
    airflow.answer("PATCH", f"{run_path(dag)}/taskInstances/train", 403, FORBIDDEN)
    code, _, err = tshell(capsys, "cancel", RUN_ID, "--dag", dag)
    assert code == 3
    assert err == (
        f"error: user alice may not cancel run {RUN_ID} of DAG {dag} "
        f"(Airflow answered 403 for DAG {dag})\n"
    )


def test_download_of_a_run_the_user_may_not_read_names_user_run_and_dag(airflow, capsys, tmp_path):
    airflow.answer("GET", run_path("tfjob_submit__team-b"), 403, FORBIDDEN)
    code, _, err = tshell(
        capsys, "download", RUN_ID, "model", str(tmp_path), "--dag", "tfjob_submit__team-b"
    )
    assert code == 3
    assert f"user alice may not read run {RUN_ID} of DAG tfjob_submit__team-b" in err


def test_a_run_is_looked_up_only_among_tf_on_k8s_dags(airflow, capsys):
    # Airflow's prefix filter drops trailing '_': `tfjob__` also matches tfjob_janitor.
    runs = [a_run("tfjob_janitor"), a_run("tfjob_submit"), a_run("tfjob_submit__team-a")]
    airflow.answer("GET", "/api/v2/dags/~/dagRuns", 200, {"dag_runs": runs})
    airflow.answer(
        "GET", f"{run_path('tfjob_submit__team-a')}/taskInstances", 200, {"task_instances": []}
    )
    code, out, err = tshell(capsys, "status", RUN_ID, "--json")
    assert code == ExitCode.OK, err
    assert json.loads(out)["dag_id"] == "tfjob_submit__team-a"
    _, _, query, _ = next(s for s in airflow.seen if s[1] == "/api/v2/dags/~/dagRuns")
    assert query["dag_id_prefix_pattern"] == ["tfjob_submit__|tfjob__"]


def test_a_user_who_may_read_no_runs_at_all_is_told_so(airflow, capsys):
    airflow.answer("GET", "/api/v2/dags/~/dagRuns", 403, FORBIDDEN)
    code, _, err = tshell(capsys, "status", RUN_ID)
    assert code == 3
    assert err == (
        f"error: user alice may not read runs on {airflow.url} "
        "(Airflow answered 403 for the runs of every DAG)\n"
    )


def test_a_run_no_readable_dag_has_is_unknown_and_the_message_names_the_user(airflow, capsys):
    airflow.answer("GET", "/api/v2/dags/~/dagRuns", 200, {"dag_runs": [a_run("tfjob_janitor")]})
    code, _, err = tshell(capsys, "status", RUN_ID)
    assert code == ExitCode.NOT_FOUND
    assert f"unknown run {RUN_ID!r}: no TF-on-K8s DAG that user 'alice' may read" in err


# --- list -----------------------------------------------------------------------------------


def test_list_reads_the_runs_of_every_tf_on_k8s_dag_the_user_may_read(airflow, capsys):
    dags = ["tfjob__nightly", "tfjob_janitor", "tfjob_submit", "tfjob_submit__team-a"]
    airflow.answer(
        "GET",
        "/api/v2/dags",
        200,
        {"dags": [{"dag_id": d} for d in dags], "total_entries": len(dags)},
    )
    runs = [a_run("tfjob_submit__team-a", "success"), a_run("tfjob__nightly", "success")]
    airflow.answer("POST", "/api/v2/dags/~/dagRuns/list", 200, {"dag_runs": runs})
    code, out, err = tshell(capsys, "list", "--state", "success", "--limit", "7", "--json")
    assert code == ExitCode.OK, err
    assert [r["dag_id"] for r in json.loads(out)] == ["tfjob_submit__team-a", "tfjob__nightly"]
    body = next(s[3] for s in airflow.seen if s[1] == "/api/v2/dags/~/dagRuns/list")
    assert body == {
        "dag_ids": ["tfjob__nightly", "tfjob_submit__team-a"],
        "order_by": "-run_after",
        "page_limit": 7,
        "states": ["success"],
    }


def test_list_names_the_request_and_tenant_of_runs_without_conf(airflow, capsys):
    # A scheduled run of a request file has no conf: the name is the DAG's, the tenant its tag.
    dags = [
        {"dag_id": "tfjob__nightly", "tags": [{"name": "tfjob"}, {"name": "tenant:team-a"}]},
        {"dag_id": "tfjob_submit__team-b", "tags": [{"name": "tfjob"}]},
    ]
    airflow.answer("GET", "/api/v2/dags", 200, {"dags": dags, "total_entries": 2})
    submitted = a_run("tfjob_submit__team-b", "success", run_id="manual__2")
    submitted["conf"] = {"name": "digits", "tenant": "team-b"}
    scheduled = a_run("tfjob__nightly", "success", run_id="scheduled__1")
    airflow.answer("POST", "/api/v2/dags/~/dagRuns/list", 200, {"dag_runs": [scheduled, submitted]})
    code, out, err = tshell(capsys, "list", "--json")
    assert code == ExitCode.OK, err
    assert [(r["run_id"], r["name"], r["tenant"]) for r in json.loads(out)] == [
        ("scheduled__1", "nightly", "team-a"),
        ("manual__2", "digits", "team-b"),
    ]
    code, out, err = tshell(capsys, "list")
    assert code == ExitCode.OK, err
    line = next(line for line in out.splitlines() if line.startswith("scheduled__1"))
    assert line.split()[3:5] == ["nightly", "team-a"]


def test_list_of_one_request_dag_reads_its_tenant_from_the_dag(airflow, capsys):
    airflow.answer(
        "GET",
        "/api/v2/dags/tfjob__nightly/dagRuns",
        200,
        {"dag_runs": [a_run("tfjob__nightly", "success", run_id="scheduled__1")]},
    )
    airflow.answer(
        "GET",
        "/api/v2/dags/tfjob__nightly",
        200,
        {"dag_id": "tfjob__nightly", "tags": [{"name": "tenant:team-a"}]},
    )
    code, out, err = tshell(capsys, "list", "--dag", "tfjob__nightly", "--json")
    assert code == ExitCode.OK, err
    (run,) = json.loads(out)
    assert (run["name"], run["tenant"]) == ("nightly", "team-a")


def test_list_of_one_dag_whose_details_cannot_be_read_still_lists_its_runs(airflow, capsys):
    airflow.answer(
        "GET",
        "/api/v2/dags/tfjob__nightly/dagRuns",
        200,
        {"dag_runs": [a_run("tfjob__nightly", "success", run_id="scheduled__1")]},
    )
    code, out, err = tshell(capsys, "list", "--dag", "tfjob__nightly", "--json")  # no DAG route
    assert code == ExitCode.OK, err
    (run,) = json.loads(out)
    assert (run["name"], run["tenant"]) == ("nightly", None)


def test_list_without_readable_tf_on_k8s_dags_shows_no_runs(airflow, capsys):
    airflow.answer("GET", "/api/v2/dags", 200, {"dags": [], "total_entries": 0})
    code, out, _ = tshell(capsys, "list", "--json")
    assert (code, json.loads(out)) == (ExitCode.OK, [])
    assert airflow.paths("POST") == ["/auth/token"]


def test_list_refused_by_airflow_names_the_user(airflow, capsys):
    airflow.answer("GET", "/api/v2/dags", 403, FORBIDDEN)
    code, _, err = tshell(capsys, "list")
    assert code == 3
    assert err == (
        f"error: user alice may not list DAGs on {airflow.url} "
        "(Airflow answered 403 for the list of DAGs)\n"
    )


def test_list_of_one_dag_the_user_may_not_read_names_user_and_dag(airflow, capsys):
    airflow.answer("GET", "/api/v2/dags/tfjob_submit__team-b/dagRuns", 403, FORBIDDEN)
    code, _, err = tshell(capsys, "list", "--dag", "tfjob_submit__team-b")
    assert code == 3
    assert err == (
        "error: user alice may not list the runs of DAG tfjob_submit__team-b "
        "(Airflow answered 403 for DAG tfjob_submit__team-b)\n"
    )
