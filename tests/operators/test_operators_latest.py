"""`<output>/latest` moves only forward: a run never replaces a pointer to a newer run.

The rule is pure (`decide_latest`); the conditional write runs against the real S3
server (moto behind scripts/s3_server.py), including a publish that loses its race.
"""

from __future__ import annotations

import datetime as dt
import json
from types import SimpleNamespace
from typing import Any

import pytest
from botocore.exceptions import ClientError

from harness.tfjob_fixtures import valid_request_data
from operators import latest, steps
from operators.latest import (
    LatestAction,
    LatestRaceLost,
    build_pointer,
    choose_run_order,
    decide_latest,
    publish_latest,
)
from operators.runinfo import describe_run
from tfjob.pipeline_ids import ARCHIVE_TASK, VALIDATE_TASK
from tfjob.request.model import load_request
from tfjob.runlayout import RunLayout, S3Path

UTC = dt.UTC


def pointer(run_id: str, when: str, dag_id: str = "tfjob__job") -> dict[str, Any]:
    return build_pointer(
        dag_id=dag_id,
        run_id=run_id,
        run_key=f"job-{run_id}",
        layout=RunLayout.parse(f"s3://b/o/runs/{run_id}"),
        model=f"s3://b/o/runs/{run_id}/model/",
        metrics=None,
        run_after=when,
        ordered_by="run_after",
        published_at=0.0,
    )


OLD = "2026-06-01T00:00:00+00:00"
NEW = "2026-06-02T00:00:00+00:00"


def test_a_newer_run_moves_latest_and_an_older_one_leaves_it():
    assert decide_latest(pointer("new", NEW), pointer("old", OLD)).action is LatestAction.MOVE
    kept = decide_latest(pointer("old", OLD), pointer("new", NEW))
    assert kept.action is LatestAction.KEEP
    assert kept.reason == f"run new of tfjob__job (run_after {NEW}) is newer than this run"


def test_the_first_pointer_a_republished_run_and_a_pointer_without_order_all_move():
    assert decide_latest(pointer("old", OLD), None).action is LatestAction.MOVE
    # a cleared run publishing again replaces its own pointer (its new model)
    assert decide_latest(pointer("old", OLD), pointer("old", OLD)).action is LatestAction.MOVE
    legacy = {"run_id": "manual__1", "dag_id": "tfjob__job", "model": "s3://b/m/"}
    assert decide_latest(pointer("old", OLD), legacy).action is LatestAction.MOVE
    assert decide_latest(pointer("old", OLD), "not json").action is LatestAction.MOVE


def test_times_compare_as_instants_and_exact_ties_are_broken_by_the_ids():
    same_instant = "2026-06-02T02:00:00+02:00"  # == NEW
    assert decide_latest(pointer("a", same_instant), pointer("b", NEW)).action is LatestAction.KEEP
    assert decide_latest(pointer("b", NEW), pointer("a", same_instant)).action is LatestAction.MOVE
    # another DAG publishing to the same output at the same instant: one order for all
    other = pointer("a", NEW, dag_id="tfjob_submit__test")
    assert decide_latest(other, pointer("a", NEW)).action is LatestAction.MOVE
    assert decide_latest(pointer("a", NEW), other).action is LatestAction.KEEP


def test_the_run_order_is_run_after_then_the_logical_date_then_the_start():
    when = dt.datetime(2026, 6, 1, 12, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    later = dt.datetime(2026, 6, 3, tzinfo=UTC)
    assert choose_run_order(
        SimpleNamespace(run_after=when, logical_date=later, start_date=later)
    ) == ("2026-06-01T10:00:00+00:00", "run_after")
    assert (
        choose_run_order(SimpleNamespace(run_after=None, logical_date=when, start_date=later))[1]
        == "logical_date"
    )
    assert choose_run_order(SimpleNamespace(logical_date=None, start_date=later)) == (
        "2026-06-03T00:00:00+00:00",
        "start_date",
    )
    with pytest.raises(ValueError, match="none of run_after, logical_date, start_date is set"):
        choose_run_order(SimpleNamespace(run_id="r", logical_date=None, start_date=None))


def read_pointer(s3: Any, bucket: str, key: str) -> dict[str, Any]:
    return json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())


def test_an_older_run_finishing_after_a_newer_one_leaves_latest_on_the_newer(s3_server):
    s3, bucket = s3_server.client(), s3_server.bucket
    uri = S3Path(bucket, "outputs/order/latest")
    first = publish_latest(s3, uri, pointer("new", NEW))
    assert first.moved and first.reason == "no pointer yet"
    second = publish_latest(s3, uri, pointer("old", OLD))
    assert not second.moved and second.current["run_id"] == "new"
    assert read_pointer(s3, bucket, "outputs/order/latest")["run_id"] == "new"
    newest = publish_latest(s3, uri, pointer("newest", "2026-06-03T00:00:00+00:00"))
    assert newest.moved
    assert read_pointer(s3, bucket, "outputs/order/latest")["run_id"] == "newest"


def test_the_s3_server_refuses_conditional_writes_whose_condition_no_longer_holds(s3_server):
    """What publish_latest relies on (moto 5.2.5 honours both headers on put_object)."""
    s3, bucket = s3_server.client(), s3_server.bucket
    key = "outputs/conditions/latest"
    s3.put_object(Bucket=bucket, Key=key, Body=b"1", IfNoneMatch="*")
    with pytest.raises(ClientError) as exists:
        s3.put_object(Bucket=bucket, Key=key, Body=b"2", IfNoneMatch="*")
    assert exists.value.response["Error"]["Code"] == "PreconditionFailed"
    etag = s3.head_object(Bucket=bucket, Key=key)["ETag"]
    s3.put_object(Bucket=bucket, Key=key, Body=b"3", IfMatch=etag)
    with pytest.raises(ClientError) as changed:
        s3.put_object(Bucket=bucket, Key=key, Body=b"4", IfMatch=etag)
    assert changed.value.response["Error"]["Code"] == "PreconditionFailed"
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == b"3"


def test_a_publish_that_loses_the_race_to_a_newer_one_reads_again_and_keeps_it(
    s3_server, monkeypatch
):
    s3, bucket = s3_server.client(), s3_server.bucket
    uri = S3Path(bucket, "outputs/race/latest")
    publish_latest(s3, uri, pointer("old", OLD))
    real_read = latest.read_latest
    reads = []

    def read_then_a_newer_run_writes(s3: Any, uri: S3Path) -> Any:
        found = real_read(s3, uri)
        reads.append(found[0]["run_id"])
        if len(reads) == 1:  # between this publish's read and its write
            body = json.dumps(pointer("newer", NEW)).encode()
            s3.put_object(Bucket=bucket, Key="outputs/race/latest", Body=body)
        return found

    monkeypatch.setattr(latest, "read_latest", read_then_a_newer_run_writes)
    outcome = publish_latest(s3, uri, pointer("middle", "2026-06-01T12:00:00+00:00"))
    assert reads == ["old", "newer"]
    assert not outcome.moved and outcome.current["run_id"] == "newer"
    assert read_pointer(s3, bucket, "outputs/race/latest")["run_id"] == "newer"


def test_a_publish_that_keeps_losing_its_race_fails_naming_the_pointer(s3_server, monkeypatch):
    s3, bucket = s3_server.client(), s3_server.bucket
    uri = S3Path(bucket, "outputs/busy/latest")
    publish_latest(s3, uri, pointer("old", OLD))
    real_read = latest.read_latest
    writes = []

    def read_then_someone_writes(s3: Any, uri: S3Path) -> Any:
        found = real_read(s3, uri)
        writes.append(1)  # each write differs: same bytes would keep the ETag
        other = {**pointer("old", OLD), "published_at": float(len(writes))}
        s3.put_object(Bucket=bucket, Key="outputs/busy/latest", Body=json.dumps(other).encode())
        return found

    monkeypatch.setattr(latest, "read_latest", read_then_someone_writes)
    with pytest.raises(LatestRaceLost, match=f"{uri}: other publishes changed it 3 times"):
        publish_latest(s3, uri, pointer("new", NEW), attempts=3)


# --- the publish task ---------------------------------------------------------------------


class FakeTaskInstance:
    def __init__(self, xcoms: dict[str, Any]) -> None:
        self.xcoms = xcoms

    def xcom_pull(self, task_ids: str, key: str = "return_value") -> Any:
        return self.xcoms.get(task_ids) if key == "return_value" else None


class OutletEvents(dict):
    def __missing__(self, outlet: Any) -> Any:
        added: list[tuple[Any, dict[str, Any]]] = []
        self[outlet] = SimpleNamespace(
            added=added, add=lambda asset, extra: added.append((asset, extra))
        )
        return self[outlet]


def publish_run(s3: Any, bucket: str, run_id: str, run_after: dt.datetime) -> tuple[dict, list]:
    from airflow.sdk import AssetAlias

    request = load_request(valid_request_data(name="pub", output=f"s3://{bucket}/outputs/pub"))
    described = describe_run(request, run_id, "tfjob__pub", "aws_default")
    model = {"uri": f"{described['run_prefix']}/model/", "objects": 1}
    alias = AssetAlias(name="tfjob__pub__model")
    events = OutletEvents()
    context = {
        "ti": FakeTaskInstance({VALIDATE_TASK: described, ARCHIVE_TASK: {"model": model}}),
        "task": SimpleNamespace(outlets=[alias]),
        "dag_run": SimpleNamespace(
            run_id=run_id, run_after=run_after, logical_date=None, start_date=dt.datetime.now(UTC)
        ),
        "outlet_events": events,
    }
    steps_context = pytest.MonkeyPatch()
    steps_context.setattr(steps, "get_current_context", lambda: context)
    steps_context.setattr(steps, "_s3", lambda run: s3)
    try:
        answer = steps.publish()
    finally:
        steps_context.undo()
    return answer, events[alias].added


def test_publish_fires_the_asset_event_only_when_latest_moved(s3_server):
    s3, bucket = s3_server.client(), s3_server.bucket
    newer, fired = publish_run(s3, bucket, "manual__new", dt.datetime(2026, 6, 2, tzinfo=UTC))
    assert newer["moved"] is True and newer["current"] is None
    assert [(asset.uri, extra["run_id"]) for asset, extra in fired] == [
        (f"s3://{bucket}/outputs/pub/latest", "manual__new")
    ]
    older, fired = publish_run(s3, bucket, "manual__old", dt.datetime(2026, 6, 1, tzinfo=UTC))
    assert older["moved"] is False and fired == []
    assert older["current"]["run_id"] == "manual__new"
    assert "is newer than this run" in older["reason"]
    stored = read_pointer(s3, bucket, "outputs/pub/latest")
    assert stored["run_id"] == "manual__new" and stored["dag_id"] == "tfjob__pub"
    assert stored["run_after"] == "2026-06-02T00:00:00+00:00"
    assert stored["ordered_by"] == "run_after" and stored["version"] == 2
    assert stored["run"] == f"s3://{bucket}/outputs/pub/runs/tfjob__pub/manual__new/"
