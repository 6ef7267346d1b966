"""tshell download and the archived logs of tshell logs, read through Airflow's /tfjob files API.

A fake Airflow (a local HTTP server with canned answers) serves the listing
and the bytes, so these tests check what tshell writes and says: files
streamed in chunks into DIR and renamed into place only when complete, a cut
answer or a missing file reported and nothing half-written kept, a 403 worded
with the user and the run. tests/tshell/test_tshell_run_commands.py does the same
against a real Airflow and S3.
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
from tshell.runs import files as run_files

DAG = "tfjob_submit__team-a"
RUN_ID = "manual__2026-12-03T10:00:00+00:00"
RUN_PATH = f"/api/v2/dags/{DAG}/dagRuns/{RUN_ID}"
FILES = f"/tfjob/runs/{DAG}/{RUN_ID}/files"
RUN_PREFIX = f"s3://models/digits/runs/{DAG}/{RUN_ID}/"


@dataclass
class Answer:
    status: int
    body: bytes
    content_type: str = "application/json"
    length: int | None = None  # a Content-Length that lies: the answer is cut short


@dataclass
class Routes:
    url: str = ""
    answers: dict[tuple[str, str], Answer] = field(default_factory=dict)
    seen: list[tuple[str, dict[str, list[str]]]] = field(default_factory=list)

    def json(self, path: str, body: Any, status: int = 200) -> None:
        self.answers[("GET", path)] = Answer(status, json.dumps(body).encode())

    def file(self, path: str, data: bytes, length: int | None = None) -> None:
        self.answers[("GET", f"{FILES}/{path}")] = Answer(
            200, data, "application/octet-stream", length
        )

    def listing(self, paths: dict[str, bytes], under: str = "", truncated: bool = False) -> None:
        files = [
            {"path": p, "size": len(b), "last_modified": "2026-12-03T10:00:00+00:00"}
            for p, b in paths.items()
        ]
        self.json(
            FILES + f"?under={under}" if under else FILES,
            {
                "run_prefix": RUN_PREFIX,
                "under": under,
                "files": files,
                "truncated": truncated,
                "limit": 10000,
            },
        )
        for path, data in paths.items():
            self.file(path, data)


class FakeAirflow(http.server.BaseHTTPRequestHandler):
    routes = Routes()

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        url = urllib.parse.urlsplit(self.path)
        path = urllib.parse.unquote(url.path)
        query = urllib.parse.parse_qs(url.query)
        self.routes.seen.append((path, query))
        if "under" in query:
            path += f"?under={query['under'][0]}"
        answer = self.routes.answers.get(("GET", path), Answer(404, b'{"detail": "no such route"}'))
        self.send_response(answer.status)
        self.send_header("Content-Type", answer.content_type)
        length = len(answer.body) if answer.length is None else answer.length
        self.send_header("Content-Length", str(length))
        self.end_headers()
        self.wfile.write(answer.body)

    def do_POST(self) -> None:  # noqa: N802 - only the login
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"access_token": "t"}).encode()
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def airflow(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Routes]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeAirflow)
    FakeAirflow.routes = Routes(url=f"http://127.0.0.1:{server.server_port}")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    point_tshell_at(monkeypatch, tmp_path, FakeAirflow.routes.url, "alice", "pw")
    monkeypatch.setattr(run_files, "CHUNK_BYTES", 4)  # many chunks even for small files
    FakeAirflow.routes.json(
        RUN_PATH, {"dag_id": DAG, "dag_run_id": RUN_ID, "state": "success", "conf": {}}
    )
    yield FakeAirflow.routes
    server.shutdown()


def tshell(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = run_tshell_cli(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def download(capsys, target: Path, what: str = "model") -> tuple[int, str, str]:
    return tshell(capsys, "download", RUN_ID, what, str(target), "--dag", DAG)


MODEL = {
    "model/saved_model.pb": b"model-bytes",
    "model/variables/variables.index": b"idx",
    "model/assets/empty": b"",
}


# --- download -------------------------------------------------------------------------------


def test_download_writes_the_model_tree_from_airflow_and_leaves_no_partial_files(
    airflow, capsys, tmp_path
):
    airflow.listing(MODEL, under="model/")
    code, out, err = download(capsys, tmp_path / "m")
    assert code == ExitCode.OK, err
    for path, data in MODEL.items():
        assert (tmp_path / "m" / path.removeprefix("model/")).read_bytes() == data
    assert not list((tmp_path / "m").rglob("*.part"))
    assert out == f"downloaded 3 files (14 B) from {RUN_PREFIX}model/ to {tmp_path / 'm'}\n"
    asked = [path for path, _ in airflow.seen]
    assert f"{FILES}/model/variables/variables.index" in asked
    assert not [p for p in asked if not p.startswith(("/api/v2/", "/tfjob/"))]


def test_download_json_lists_the_files_written(airflow, capsys, tmp_path):
    airflow.listing(MODEL, under="model/")
    code, out, _ = tshell(
        capsys, "download", RUN_ID, "model", str(tmp_path), "--dag", DAG, "--json"
    )
    assert code == 0
    assert sorted(json.loads(out)) == sorted(
        str(tmp_path / p.removeprefix("model/")) for p in MODEL
    )


def test_download_shows_progress_on_stderr_when_asked(airflow, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("TSHELL_PROGRESS", "1")
    airflow.listing(MODEL, under="model/")
    code, _, err = download(capsys, tmp_path)
    assert code == 0 and "download model [" in err and "14 B/14 B" in err


def test_a_403_from_the_files_api_names_the_user_the_run_and_the_dag(airflow, capsys, tmp_path):
    airflow.json(FILES + "?under=model/", {"detail": "Forbidden"}, status=403)
    code, out, err = download(capsys, tmp_path)
    assert code == ExitCode.AIRFLOW_ERROR == 3
    assert err == (
        f"error: user alice may not read run {RUN_ID} of DAG {DAG} "
        f"(Airflow answered 403 for DAG {DAG})\n"
    )
    assert out == "" and list(tmp_path.iterdir()) == []


def test_a_file_missing_when_fetched_is_exit_4_naming_it(airflow, capsys, tmp_path):
    airflow.listing(MODEL, under="model/")
    detail = {"detail": "model/saved_model.pb: no such file under the run's prefix"}
    airflow.json(f"{FILES}/model/saved_model.pb", detail, status=404)
    code, _, err = download(capsys, tmp_path)
    assert code == ExitCode.NOT_FOUND == 4
    assert f"run {RUN_ID} of DAG {DAG} has no file 'model/saved_model.pb'" in err
    assert "no such file under the run's prefix" in err
    assert not list(tmp_path.rglob("*.part"))


def test_a_run_without_archived_files_says_where_it_looked(airflow, capsys, tmp_path):
    airflow.listing({}, under="logs/")
    code, _, err = download(capsys, tmp_path, "logs")
    assert code == 4
    assert f"no files under {RUN_PREFIX}logs/: the run has not archived them (yet)" in err


def test_an_answer_cut_short_keeps_the_old_file_and_no_partial_one(airflow, capsys, tmp_path):
    (tmp_path / "saved_model.pb").write_bytes(b"old")
    airflow.listing({"model/saved_model.pb": b"model-bytes"}, under="model/")
    airflow.file("model/saved_model.pb", b"model", length=11)
    code, _, err = download(capsys, tmp_path)
    assert code == 3
    assert "model/saved_model.pb: Airflow's answer ended after 5 of 11 bytes" in err
    assert (tmp_path / "saved_model.pb").read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["saved_model.pb"]


def test_a_listing_airflow_cut_is_refused_before_anything_is_written(airflow, capsys, tmp_path):
    airflow.listing(MODEL, under="model/", truncated=True)
    code, _, err = download(capsys, tmp_path)
    assert code == 3 and "holds more than 10000 files" in err
    assert list(tmp_path.iterdir()) == []


def test_a_listed_path_that_leaves_dir_is_refused(airflow, capsys, tmp_path):
    airflow.listing({"model/../../escape": b"x"}, under="model/")
    code, _, err = download(capsys, tmp_path / "d")
    assert code == 4 and "refusing a file that leaves" in err
    assert not (tmp_path / "escape").exists()


# --- logs of a finished run -----------------------------------------------------------------


def test_logs_of_one_replica_are_streamed_from_the_archive(airflow, capsys):
    airflow.file("logs/ps-0.log", "ps-0 línea 1\nps-0 line 2".encode())
    code, out, err = tshell(capsys, "logs", RUN_ID, "--dag", DAG, "--role", "ps")
    assert code == 0, err
    assert out == "ps-0 línea 1\nps-0 line 2\n"


def test_logs_of_every_replica_come_with_headers(airflow, capsys):
    airflow.listing({"logs/ps-0.log": b"p\n", "logs/worker-0.log": b"w"}, under="logs/")
    code, out, _ = tshell(capsys, "logs", RUN_ID, "--dag", DAG)
    assert code == 0
    assert out == "==> ps-0.log <==\np\n==> worker-0.log <==\nw\n"


def test_logs_without_an_archive_fall_back_to_the_task_log(airflow, capsys):
    task = {"task_id": "train", "state": "success", "try_number": 1}
    airflow.json(f"{RUN_PATH}/taskInstances", {"task_instances": [task]})
    airflow.json(
        f"{RUN_PATH}/taskInstances/train/logs/1",
        {"content": [{"event": "[worker-0] step 0", "timestamp": "t0"}]},
    )
    code, out, err = tshell(capsys, "logs", RUN_ID, "--dag", DAG, "--role", "worker")
    assert code == 0, err
    assert out == "step 0\n"
    assert "note: no archived log logs/worker-0.log of this run" in err


def test_logs_refused_by_the_files_api_name_the_user(airflow, capsys):
    airflow.json(f"{FILES}/logs/ps-0.log", {"detail": "Forbidden"}, status=403)
    code, _, err = tshell(capsys, "logs", RUN_ID, "--dag", DAG, "--role", "ps")
    assert code == 3
    assert f"user alice may not read run {RUN_ID} of DAG {DAG}" in err
