"""A run's curves from its event files in S3 (runview/eventcurves.py) and the /curves route:
every replica's scalars by step, read once and then only what grew, the bytes and runs kept
bounded, event files winning over TFJOB_METRIC lines, and only the run's own prefix read.
moto's S3 in process; the route through FastAPI's TestClient with Airflow's guard and
database replaced (as tests/operators/test_run_files.py does).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from harness.event_files import frame, simple_event, tensor_event
from runview import api as run_view_api
from runview import db as run_view_db
from runview.eventcurves import MAX_EVENT_FILES, EventCurves, name_curve
from runview.files import RunStorage
from runview.run import describe_warm_start
from tfjob.records.run import PartialRunDescription
from tfjob.runlayout import TENSORBOARD_DIR, RunLayout, S3Path

BUCKET = "models"
DAG, RUN = "tfjob_submit__team-a", "manual__2026-12-07T10:00:00+00:00"
PREFIX = f"digits/runs/{DAG}/{RUN}/"
LAYOUT = RunLayout(S3Path(BUCKET, PREFIX))
STORAGE = RunStorage(layout=LAYOUT, aws_conn_id="team_a_s3")
EVENTS = "events.out.tfevents.1765100000.host.1.v2"


class CountingS3:
    """moto's client, counting the object reads and the bytes they asked for."""

    def __init__(self, client: Any) -> None:
        self.client, self.gets = client, []

    def list_objects_v2(self, **params: Any) -> Any:
        return self.client.list_objects_v2(**params)

    def get_object(self, **params: Any) -> Any:
        self.gets.append((params["Key"].rsplit("/", 2)[-2], params["Range"]))
        return self.client.get_object(**params)


@pytest.fixture
def s3() -> Iterator[CountingS3]:
    with mock_aws():
        client = boto3.client(
            "s3", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s"
        )
        client.create_bucket(Bucket=BUCKET)
        yield CountingS3(client)


def put_events(s3: CountingS3, replica: str, data: bytes, name: str = EVENTS) -> None:
    key = LAYOUT.replica_tensorboard(*replica.rsplit("-", 1)).child(name).key
    s3.client.put_object(Bucket=BUCKET, Key=key, Body=data)


def losses(answer: dict[str, Any], curve: str, tag: str = "loss") -> list[tuple[int, float]]:
    return [(p["step"], p[tag]) for p in answer["curves"][curve] if tag in p]


def test_every_replicas_scalars_are_curves_per_tag_by_step(s3):
    put_events(s3, "chief-0", frame(*(simple_event(s, loss=1.0 / (s + 1)) for s in range(3))))
    put_events(s3, "worker-1", frame(tensor_event(5, "loss", 0.5), tensor_event(6, "acc", 0.25)))
    keras = frame(tensor_event(1, "epoch_loss", 0.75))
    put_events(s3, "chief-0", keras, name=f"validation/{EVENTS}")
    answer = EventCurves().read_run("run", s3, STORAGE)
    assert answer["source"] == "events"
    assert sorted(answer["curves"]) == ["chief-0", "chief-0/validation", "worker-1"]
    assert losses(answer, "chief-0") == [(0, 1.0), (1, 0.5), (2, pytest.approx(1 / 3))]
    assert answer["curves"]["worker-1"] == [{"step": 5, "loss": 0.5}, {"step": 6, "acc": 0.25}]
    assert losses(answer, "chief-0/validation", "epoch_loss") == [(1, 0.75)]
    assert answer["event_files"]["files"] == 3 and "note" not in answer


def test_a_second_request_reads_nothing_and_a_grown_file_only_its_new_bytes(s3):
    first = frame(*(simple_event(s, loss=float(s)) for s in range(3)))
    put_events(s3, "chief-0", first)
    put_events(s3, "worker-0", frame(simple_event(0, loss=1.0)))
    curves = EventCurves()
    answer = curves.read_run("run", s3, STORAGE)
    assert len(s3.gets) == 2
    assert curves.read_run("run", s3, STORAGE) is answer and len(s3.gets) == 2
    grown = first + frame(simple_event(3, loss=3.0))[len(frame()) :]
    put_events(s3, "chief-0", grown[:-3])  # a record still being written
    answer = curves.read_run("run", s3, STORAGE)
    assert s3.gets[2:] == [("chief-0", f"bytes={len(first)}-{len(grown) - 4}")]
    assert [s for s, _ in losses(answer, "chief-0")] == [0, 1, 2]
    put_events(s3, "chief-0", grown)
    answer = curves.read_run("run", s3, STORAGE)
    assert s3.gets[3:] == [("chief-0", f"bytes={len(first)}-{len(grown) - 1}")]
    assert [s for s, _ in losses(answer, "chief-0")] == [0, 1, 2, 3]


def test_a_replaced_file_is_read_again_from_its_start_and_a_removed_one_is_dropped(s3):
    put_events(s3, "chief-0", frame(*(simple_event(s, loss=1.0) for s in range(5))))
    put_events(s3, "worker-0", frame(simple_event(0, loss=1.0)))
    curves = EventCurves()
    curves.read_run("run", s3, STORAGE)
    put_events(s3, "chief-0", frame(simple_event(7, loss=2.0)))
    s3.client.delete_object(Bucket=BUCKET, Key=LAYOUT.replica_tensorboard("worker", 0).key + EVENTS)
    answer = curves.read_run("run", s3, STORAGE)
    assert answer["curves"] == {"chief-0": [{"step": 7, "loss": 2.0}]}
    assert s3.gets[-1][1].startswith("bytes=0-")


def test_the_bytes_read_per_run_are_capped_and_the_answer_says_so(s3):
    data = frame(*(simple_event(s, loss=float(s)) for s in range(100)))
    put_events(s3, "chief-0", data)
    put_events(s3, "worker-0", data)
    curves = EventCurves(max_bytes=len(data) + len(data) // 2)
    answer = curves.read_run("run", s3, STORAGE)
    assert curves.bytes_read == len(data) + len(data) // 2
    assert len(answer["curves"]["chief-0"]) == 100
    assert 0 < len(answer["curves"]["worker-0"]) < 100
    assert "read up to" in answer["note"] and "TensorBoard" in answer["note"]
    put_events(s3, "worker-0", data + data[len(frame()) :])
    curves.read_run("run", s3, STORAGE)
    assert curves.bytes_read == len(data) + len(data) // 2


def test_the_objects_listed_are_capped(s3, monkeypatch):
    monkeypatch.setattr("runview.eventcurves.MAX_EVENT_FILES", 3)
    for index in range(5):
        put_events(s3, f"worker-{index}", frame(simple_event(0, loss=1.0)))
    answer = EventCurves().read_run("run", s3, STORAGE)
    assert len(answer["curves"]) == 3 and "first 3 event files" in answer["note"]
    assert MAX_EVENT_FILES == 1000


def test_only_event_files_in_a_replicas_folder_are_read(s3):
    put_events(s3, "chief-0", b"not events", name="plugins/profile/trace.json")
    s3.client.put_object(Bucket=BUCKET, Key=LAYOUT.tensorboard.key + EVENTS, Body=b"x")
    s3.client.put_object(Bucket=BUCKET, Key=LAYOUT.tensorboard.key + f"nobody/{EVENTS}", Body=b"x")
    answer = EventCurves().read_run("run", s3, STORAGE)
    assert answer["curves"] == {} and s3.gets == []
    assert name_curve(f"worker-0/{EVENTS}") == "worker-0"
    assert name_curve(f"../worker-0/{EVENTS}") is None


def test_the_least_recently_asked_run_is_dropped_beyond_the_cached_runs(s3):
    put_events(s3, "chief-0", frame(simple_event(0, loss=1.0)))
    curves = EventCurves(max_runs=2)
    for run in ("a", "b", "a", "c"):
        curves.read_run(run, s3, STORAGE)
    assert len(s3.gets) == 3  # a, b, c; the second "a" was cached
    curves.read_run("a", s3, STORAGE)
    curves.read_run("b", s3, STORAGE)
    assert len(s3.gets) == 4  # "b" was dropped when "c" came, "a" was not


# --- the route ------------------------------------------------------------------------------

SUMMARY = {
    "dag_id": DAG,
    "run_id": RUN,
    "active": False,
    "job": {},
    "logs": [f"s3://{BUCKET}/{PREFIX}logs/chief-0.log"],
    "tasks": [],
}
DESCRIBED = {
    "dag_id": DAG,
    "run_id": RUN,
    "aws_conn_id": "team_a_s3",
    "run_prefix": f"s3://{BUCKET}/{PREFIX.rstrip('/')}",
}


@pytest.fixture
def api(s3, monkeypatch) -> Any:
    from airflow.api_fastapi.common.db.common import _get_session
    from fastapi.testclient import TestClient

    described = PartialRunDescription.from_payload(DESCRIBED)
    monkeypatch.setattr(run_view_api, "read_run_summary", lambda *a: dict(SUMMARY))
    monkeypatch.setattr(run_view_db, "find_tenant_run", lambda *a: (None, described))
    monkeypatch.setattr(run_view_api, "connect_run_storage", lambda storage: s3)
    monkeypatch.setattr(
        run_view_api, "read_run_file_tail", lambda *a: 'TFJOB_METRIC {"step": 4, "loss": 9}\n'
    )
    app = run_view_api.build_app()
    app.dependency_overrides[run_view_api.require_xcom_read()[0].dependency] = lambda: None
    app.dependency_overrides[_get_session] = lambda: None
    return TestClient(app)


def test_the_route_answers_the_event_files_curves_when_any_exist(api, s3):
    put_events(s3, "chief-0", frame(simple_event(1, loss=0.5)))
    answer = api.get(f"/runs/{DAG}/{RUN}/curves").json()
    assert answer["source"] == "events"
    assert answer["curves"] == {"chief-0": [{"step": 1, "loss": 0.5}]}
    assert answer["tensorboard"] == {
        "folder": LAYOUT.tensorboard.uri,
        "under": TENSORBOARD_DIR,
        "command": f"tshell tensorboard {RUN}",
        "warm_start_from": None,
    }


def test_a_warm_started_runs_tensorboard_names_the_run_it_restored_from(api, s3, monkeypatch):
    source = RunLayout.for_run(f"s3://{BUCKET}/digits", DAG, "manual__first")
    warm = {"requested": "latest", "source": source.checkpoints.uri, "step": 30}
    summary = dict(SUMMARY, warm_start=describe_warm_start(warm))
    monkeypatch.setattr(run_view_api, "read_run_summary", lambda *a: summary)
    put_events(s3, "chief-0", frame(simple_event(1, loss=0.5)))
    answer = api.get(f"/runs/{DAG}/{RUN}/curves").json()
    assert answer["tensorboard"]["warm_start_from"] == {
        "dag_id": DAG,
        "run_id": "manual__first",
        "tensorboard": source.tensorboard.uri,
    }


def test_the_route_answers_tfjob_metric_curves_when_no_event_file_holds_a_scalar(api, s3):
    put_events(s3, "chief-0", frame())
    answer = api.get(f"/runs/{DAG}/{RUN}/curves").json()
    assert answer["source"] == "archive"
    assert answer["curves"] == {"chief-0": [{"step": 4, "loss": 9}]}
    assert answer["event_files"]["files"] == 1
    assert answer["tensorboard"]["command"] == f"tshell tensorboard {RUN}"


def test_a_description_naming_another_runs_prefix_reads_no_event_file(api, s3, monkeypatch):
    other = dict(DESCRIBED, run_prefix=f"s3://{BUCKET}/digits/runs/{DAG}/manual__other")
    described = PartialRunDescription.from_payload(other)
    monkeypatch.setattr(run_view_db, "find_tenant_run", lambda *a: (None, described))
    put_events(s3, "chief-0", frame(simple_event(1, loss=0.5)))
    answer = api.get(f"/runs/{DAG}/{RUN}/curves")
    # The archived logs' curves refuse it as the run's files do; no event file was read.
    assert answer.status_code == 404 and "its files are not served" in answer.json()["detail"]
    assert s3.gets == []


def test_a_runs_folder_is_listed_at_most_once_per_ttl_for_every_tab(s3):
    put_events(s3, "chief-0", frame(simple_event(0, loss=1.0)))
    now = [100.0]
    curves = EventCurves(ttl_s=2.0, clock=lambda: now[0])
    assert curves.find_recent_answer("run") is None
    answer = curves.read_run("run", s3, STORAGE)
    now[0] += 1.9
    assert curves.find_recent_answer("run") is answer
    now[0] += 0.1
    assert curves.find_recent_answer("run") is None
