"""A run's archived files served by Airflow: the path rules, the listing cap, the HTTP answers.

runview/files.py against moto's S3 (in process), and the /tfjob app's
file routes through FastAPI's TestClient with Airflow's guard and database
replaced, so the contract (status, headers, bytes, errors) is checked without
starting Airflow; tests/tshell/test_tshell_run_commands.py goes through a real one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from runview import files as run_files
from runview.files import (
    MAX_PATH_CHARS,
    RunFileNotFoundError,
    RunFilePathError,
    RunNotArchivableError,
    RunStorage,
    build_content_disposition,
    check_run_file_path,
    list_run_files,
    locate_run_storage,
    open_run_file,
)
from tfjob.records.run import PartialRunDescription
from tfjob.runlayout import RunLayout, S3Path

BUCKET = "models"
DAG = "tfjob_submit__team-a"
RUN = "manual__2026-12-03T10:00:00+00:00"
PREFIX = f"digits/runs/{DAG}/{RUN}/"
STORAGE = RunStorage(layout=RunLayout(S3Path(BUCKET, PREFIX)), aws_conn_id="team_a_s3")
DESCRIBED = {
    "dag_id": DAG,
    "run_id": RUN,
    "aws_conn_id": "team_a_s3",
    "run_prefix": f"s3://{BUCKET}/{PREFIX.rstrip('/')}",
}
SECRET = "test-secret-key-never-shown"


@pytest.fixture
def s3() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client(
            "s3", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key=SECRET
        )
        client.create_bucket(Bucket=BUCKET)
        yield client


def put(s3: Any, path: str, body: bytes) -> None:
    s3.put_object(Bucket=BUCKET, Key=PREFIX + path, Body=body)


# --- the path rules -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "run.json",
        "model/saved_model.pb",
        "logs/worker-0.log",
        "model/variables/variables.data-00000-of-00001",
        "a b/ü.txt",
        "x" * MAX_PATH_CHARS,
    ],
)
def test_a_relative_path_inside_the_run_is_accepted(path):
    assert check_run_file_path(path) == path


@pytest.mark.parametrize(
    ("path", "rule"),
    [
        ("", "a file of the run is required"),
        ("/etc/passwd", "an absolute path is not allowed"),
        ("..", "segment '..' is not allowed"),
        ("../other-run/run.json", "segment '..' is not allowed"),
        ("model/../../x", "segment '..' is not allowed"),
        ("./run.json", "segment '.' is not allowed"),
        ("model//saved_model.pb", "segment '' is not allowed"),
        ("model/", "segment '' is not allowed"),
        ("model\\saved_model.pb", "backslashes are not allowed"),
        ("logs/a\nb", "control characters are not allowed"),
        ("x" * (MAX_PATH_CHARS + 1), f"at most {MAX_PATH_CHARS} characters are allowed"),
    ],
)
def test_a_path_that_could_leave_the_run_is_refused_naming_the_path_and_the_rule(path, rule):
    with pytest.raises(RunFilePathError) as refused:
        check_run_file_path(path)
    assert rule in str(refused.value)
    assert repr(path[:60]) in str(refused.value)
    assert refused.value.status == 400


def test_a_directory_is_empty_for_the_whole_run_or_a_path_ending_in_a_slash():
    assert check_run_file_path("", directory=True) == ""
    assert check_run_file_path("model/variables/", directory=True) == "model/variables/"
    with pytest.raises(RunFilePathError, match="ends with '/'"):
        check_run_file_path("model", directory=True)
    with pytest.raises(RunFilePathError, match="segment '..'"):
        check_run_file_path("../", directory=True)


def test_the_length_is_checked_before_anything_else_is_read():
    with pytest.raises(RunFilePathError, match="characters are allowed"):
        check_run_file_path("../" * 1000)


# --- the run description --------------------------------------------------------------------


def test_the_storage_is_the_run_prefix_and_connection_validate_described():
    storage = locate_run_storage(PartialRunDescription.from_payload(DESCRIBED), DAG, RUN)
    assert storage == STORAGE and storage.uri == f"s3://{BUCKET}/{PREFIX}"


@pytest.mark.parametrize(
    "change",
    [
        {"run_prefix": None},
        {"aws_conn_id": ""},
        {"run_prefix": "models/x"},
        {"run_prefix": f"s3://{BUCKET}/digits/runs/{DAG}/other-run"},
        {"run_id": "other-run"},
    ],
)
def test_a_description_without_this_run_s_prefix_or_connection_serves_nothing(change):
    with pytest.raises(RunNotArchivableError) as refused:
        locate_run_storage(PartialRunDescription.from_payload({**DESCRIBED, **change}), DAG, RUN)
    assert refused.value.status == 404 and RUN in str(refused.value)


# --- listing --------------------------------------------------------------------------------


def test_the_listing_holds_paths_relative_to_the_run_with_size_and_time(s3):
    put(s3, "run.json", b"{}")
    put(s3, "model/saved_model.pb", b"model-bytes")
    put(s3, "model/", b"")  # a console's "directory" marker is not a file
    s3.put_object(Bucket=BUCKET, Key=f"digits/runs/{DAG}/{RUN}-2/run.json", Body=b"other")
    listing = list_run_files(s3, STORAGE).as_json()
    assert [(f["path"], f["size"]) for f in listing["files"]] == [
        ("model/saved_model.pb", 11),
        ("run.json", 2),
    ]
    assert listing["files"][0]["last_modified"].startswith("20")
    assert listing["truncated"] is False and "note" not in listing
    assert listing["run_prefix"] == f"s3://{BUCKET}/{PREFIX}"
    model = list_run_files(s3, STORAGE, "model/").as_json()
    assert [f["path"] for f in model["files"]] == ["model/saved_model.pb"]


def test_the_listing_is_cut_at_its_limit_and_says_so(s3, monkeypatch):
    monkeypatch.setattr(run_files, "LIST_PAGE_SIZE", 2)  # several pages
    for index in range(7):
        put(s3, f"logs/worker-{index}.log", b"x")
    cut = list_run_files(s3, STORAGE, limit=5)
    assert [f.path for f in cut.files] == [f"logs/worker-{i}.log" for i in range(5)]
    assert cut.truncated and "listing cut after 5 files" in cut.as_json()["note"]
    whole = list_run_files(s3, STORAGE, limit=7)
    assert len(whole.files) == 7 and not whole.truncated


def test_the_default_limit_is_ten_thousand_entries():
    assert run_files.LIST_LIMIT == 10_000


# --- reading --------------------------------------------------------------------------------


def test_an_object_is_streamed_in_chunks_with_its_size(s3, monkeypatch):
    monkeypatch.setattr(run_files, "CHUNK_BYTES", 4)
    put(s3, "model/saved_model.pb", b"0123456789")
    stream = open_run_file(s3, STORAGE, "model/saved_model.pb")
    assert (stream.size, stream.filename) == (10, "saved_model.pb")
    assert list(stream.iter_chunks()) == [b"0123", b"4567", b"89"]


def test_a_missing_object_is_a_404_naming_the_path(s3):
    with pytest.raises(RunFileNotFoundError) as missing:
        open_run_file(s3, STORAGE, "model/nothing.bin")
    assert "model/nothing.bin" in str(missing.value) and missing.value.status == 404


def test_a_missing_bucket_is_a_404_naming_the_bucket(s3):
    elsewhere = RunStorage(layout=RunLayout(S3Path("no-such-bucket", PREFIX)), aws_conn_id="c")
    with pytest.raises(RunFileNotFoundError, match="bucket 'no-such-bucket'"):
        list_run_files(s3, elsewhere)


def test_the_download_name_is_the_last_segment_quoted_for_any_client():
    assert build_content_disposition("saved_model.pb") == (
        "attachment; filename=\"saved_model.pb\"; filename*=UTF-8''saved_model.pb"
    )
    assert build_content_disposition('ü"x.txt') == (
        "attachment; filename=\"__x.txt\"; filename*=UTF-8''%C3%BC%22x.txt"
    )


# --- the HTTP routes ------------------------------------------------------------------------


@pytest.fixture
def api(s3, monkeypatch) -> Any:
    """The /tfjob app with Airflow's guard and database replaced; S3 is moto's."""
    from airflow.api_fastapi.common.db.common import _get_session
    from fastapi.testclient import TestClient

    from runview import api as run_view_api

    def read_run_storage(_session, dag_id, run_id):
        return locate_run_storage(PartialRunDescription.from_payload(DESCRIBED), dag_id, run_id)

    monkeypatch.setattr(run_view_api, "read_run_storage", read_run_storage)
    monkeypatch.setattr(run_view_api, "connect_run_storage", lambda storage: s3)
    app = run_view_api.build_app()
    app.dependency_overrides[run_view_api.require_xcom_read()[0].dependency] = lambda: None
    app.dependency_overrides[_get_session] = lambda: None
    return TestClient(app)


def files_url(path: str | None = None) -> str:
    base = f"/runs/{DAG}/{RUN}/files"
    return base if path is None else f"{base}/{path}"


def test_the_file_route_streams_bytes_with_length_and_a_download_name(api, s3):
    put(s3, "model/variables/variables.index", b"idx" * 1000)
    answer = api.get(files_url("model/variables/variables.index"))
    assert answer.status_code == 200 and answer.content == b"idx" * 1000
    assert answer.headers["content-length"] == "3000"
    assert answer.headers["content-type"] == "application/octet-stream"
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert 'filename="variables.index"' in answer.headers["content-disposition"]


def test_the_list_route_answers_json_and_refuses_a_bad_directory(api, s3):
    put(s3, "logs/ps-0.log", b"ps")
    answer = api.get(files_url(), params={"under": "logs/"})
    assert answer.status_code == 200
    assert [f["path"] for f in answer.json()["files"]] == ["logs/ps-0.log"]
    refused = api.get(files_url(), params={"under": "../"})
    assert refused.status_code == 400 and "'../'" in refused.json()["detail"]


@pytest.mark.parametrize(
    ("path", "status", "words"),
    [
        ("model/nothing.bin", 404, "model/nothing.bin: no such file"),
        ("", 400, "a file of the run is required"),
        ("model//x", 400, "segment '' is not allowed"),
        ("..%2Fother/run.json", 400, "segment '..' is not allowed"),
        ("model%5Cx", 400, "backslashes are not allowed"),
        ("x" * 1100, 400, "at most 1024 characters"),
    ],
)
def test_the_file_route_answers_400_or_404_naming_the_path(api, path, status, words):
    answer = api.get(files_url(path))
    assert answer.status_code == status, answer.text
    assert words in answer.json()["detail"]


def test_no_answer_carries_a_secret_or_a_presigned_url(api, s3):
    put(s3, "run.json", b"{}")
    texts = [
        api.get(files_url()).text,
        api.get(files_url("run.json")).text,
        json.dumps(dict(api.get(files_url("run.json")).headers)),
        api.get(files_url("nothing")).text,
    ]
    for text in texts:
        for mark in (SECRET, "X-Amz-Signature", "x-amz-signature", "X-Amz-Credential"):
            assert mark not in text
