"""`tshell status --watch`: frames of tasks, replicas and their latest curve points, live."""

from __future__ import annotations

import io
from typing import Any

from tshell.runs import status as run_status
from tshell.runs.lookup import RunRef

REF = RunRef("tfjob__digits-ps", "manual__1")


def test_the_latest_point_of_each_replica_is_read_from_prefixed_task_log_lines():
    lines = [
        '[chief-0] TFJOB_METRIC {"step": 100, "loss": 0.9}',
        "plain line",
        '[worker-1] TFJOB_METRIC {"step": 40, "loss": 1.5}',
        '[chief-0] TFJOB_METRIC {"step": 200, "loss": 0.5, "accuracy": 0.8}',
        'TFJOB_METRIC {"step": 1}',  # not a replica's line
        '[chief-0] TFJOB_METRICS {"accuracy": 0.96}',
    ]  # the final metrics: not a point
    assert run_status.read_latest_points(lines) == {
        "chief-0": {"step": 200.0, "loss": 0.5, "accuracy": 0.8},
        "worker-1": {"step": 40.0, "loss": 1.5},
    }


def test_a_frame_shows_each_replica_with_step_first_and_replicas_only_in_the_log():
    run = {
        "dag_run_id": "manual__1",
        "dag_id": "tfjob__digits-ps",
        "state": "running",
        "duration": None,
    }
    tasks = [{"task_id": "train", "state": "deferred", "try_number": 1}]
    points = {
        "chief-0": {"loss": 0.51234, "step": 200.0},
        "worker-0": {"step": 180.0, "accuracy": 0.75},
    }
    frame = run_status.render_watch_frame(
        run,
        tasks,
        [("chief-0", "Running", "p-chief-0"), ("ps-0", "Running", "p-ps-0")],
        points,
        None,
        "03:00:00",
    )
    lines = frame.splitlines()
    assert lines[0] == "run manual__1 (tfjob__digits-ps): running   at 03:00:00"
    header = next(line for line in lines if line.startswith("REPLICA"))
    assert header.split() == ["REPLICA", "PHASE", "POD", "STEP", "LOSS", "ACCURACY"]
    rows = {line.split()[0]: line.split() for line in lines[lines.index(header) + 1 :]}
    assert rows["chief-0"] == ["chief-0", "Running", "p-chief-0", "200", "0.5123"]
    assert rows["ps-0"] == ["ps-0", "Running", "p-ps-0"]
    assert rows["worker-0"] == ["worker-0", "180", "0.75"]  # no pod seen: from the log only


class FakeAirflow:
    """Answers a run that trains for two polls, then fails in train."""

    def __init__(self) -> None:
        self.polls = 0

    def get_json(self, path: str, params: dict[str, Any] | None = None) -> Any:
        if path == REF.path:
            self.polls += 1
            state = "running" if self.polls < 4 else "failed"
            return {"dag_run_id": REF.run_id, "dag_id": REF.dag_id, "state": state}
        if path.endswith("/taskInstances"):
            train = "running" if self.polls < 4 else "failed"
            return {"task_instances": [{"task_id": "train", "state": train, "try_number": 1}]}
        if path.endswith("/logs/1") and params == {"full_content": "true"}:
            return {
                "content": [
                    {
                        "event": "Task failed",
                        "error_detail": [
                            {"exc_type": "TrainingFailed", "exc_value": "worker-1 exited 3"}
                        ],
                    }
                ]
            }
        if path.endswith("/logs/1"):
            step = {1: 10, 2: 10, 3: 20}.get(self.polls, 20)
            return {
                "content": [
                    {"timestamp": f"t{step}", "event": f'[chief-0] TFJOB_METRIC {{"step": {step}}}'}
                ],
                "continuation_token": f"tok{step}",
            }
        raise LookupError(path)  # an XCom: this fake has none


class NoPods:
    def list_pods(self) -> None:
        return None


def test_watch_writes_a_frame_when_something_changed_and_ends_with_the_reason(monkeypatch):
    monkeypatch.setattr(run_status, "fetch_attempts", lambda session, ref: None)
    out = io.StringIO()
    run = run_status.watch_run(FakeAirflow(), REF, NoPods(), out, 0.0, redraw=False)
    assert run["state"] == "failed"
    frames = out.getvalue().split("\nrun ")
    # poll 1: step 10; poll 2: unchanged (no frame); poll 3: step 20; poll 4: failed
    assert len(frames) == 3, out.getvalue()
    assert "chief-0" in frames[0] and " 10" in frames[0]
    assert " 20" in frames[1] and ": running" in frames[1]
    assert ": failed" in frames[2]
    assert (
        out.getvalue()
        .rstrip()
        .endswith("failed   train (try 1): TrainingFailed\n  worker-1 exited 3")
    )


def test_watch_on_a_terminal_redraws_in_place(monkeypatch):
    monkeypatch.setattr(run_status, "fetch_attempts", lambda session, ref: None)
    out = io.StringIO()
    run_status.watch_run(FakeAirflow(), REF, NoPods(), out, 0.0, redraw=True)
    assert out.getvalue().count(run_status.CLEAR_SCREEN) == 4  # one per poll
