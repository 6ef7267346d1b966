"""bench/trace_run.py splits a run into phases from Airflow's REST answers (issue 29).

The fixture is one recorded `digits-ps` run of the bench world (bench_phases.py measure):
its dagRun, the DAG's task graph, task instances and each task's structured log as the REST
API answered them (log events cut to their timestamp, event and parse time), the chief's
exit from the pod status and the TensorFlow import from the pods' logs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import trace_run
from bench.airflow_runs import parse_time
from bench.report_wholerun import section_phases
from bench.trace_run import summarise_runs

FIXTURE = Path(__file__).parent / "fixtures" / "digits_ps_trace.json"


@pytest.fixture(scope="module")
def recorded() -> dict:
    return json.loads(FIXTURE.read_text())


@pytest.fixture(scope="module")
def split(recorded: dict) -> dict:
    return trace_run.split_run(recorded["trace"], recorded["chief_exit"], recorded["tf_import_s"])


def test_every_task_is_split_and_the_deferred_train_has_a_resumed_process(split):
    assert set(split["tasks"]) == {
        "validate",
        "fetch_bundle",
        "launch",
        "clusterspec",
        "train",
        "train (resumed)",
        "archive",
        "teardown",
        "publish",
    }
    for task, phases in split["tasks"].items():
        assert list(phases) == list(trace_run.TASK_PHASES), task
        for phase in ("ti_run_api", "dag_parse", "prepare", "work", "finish"):
            assert phases[phase] is not None and phases[phase] >= 0, (task, phase)


def test_a_task_s_phases_tile_the_time_from_its_upstream_s_end_to_its_own(recorded, split):
    trace = recorded["trace"]
    ends = {ti["task_id"]: parse_time(ti["end_date"]) for ti in trace["task_instances"]}
    upstream = trace_run.upstream_ends(trace["tasks"], ends)
    queued_at = parse_time(trace["dag_run"]["queued_at"])
    for task in ("validate", "fetch_bundle", "launch", "clusterspec", "archive", "publish"):
        woken = upstream[task] if upstream[task] is not None else queued_at
        assert sum(split["tasks"][task].values()) == pytest.approx(ends[task] - woken), task


def test_the_resumed_train_is_woken_from_the_chief_s_exit(recorded, split):
    train = next(ti for ti in recorded["trace"]["task_instances"] if ti["task_id"] == "train")
    resumed = split["tasks"]["train (resumed)"]
    assert resumed["pickup"] == pytest.approx(
        parse_time(train["scheduled_when"]) - recorded["chief_exit"]
    )
    events = [e for e in recorded["trace"]["logs"]["train"] if "timestamp" in e]
    paused = next(i for i, e in enumerate(events) if e["event"].startswith("Pausing task"))
    closed = next(e for e in events[paused:] if e["event"] == "::endgroup::")
    post = next(e for e in events[:paused][::-1] if e["event"] == "::group::Post Execute")
    # the triggerer's lines that follow in the same log are not the deferring process's
    assert split["tasks"]["train"]["finish"] == pytest.approx(
        parse_time(closed["timestamp"]) - parse_time(post["timestamp"])
    )
    first = split["tasks"]["train"]
    # the first process's own scheduled/queued times are gone: one span up to its start
    assert first["pickup"] is None and first["queue"] is None and first["process_start"] > 0


def test_the_headline_figures_come_from_the_run_and_the_pods(recorded, split):
    trace = recorded["trace"]
    queued_at = parse_time(trace["dag_run"]["queued_at"])
    ends = {ti["task_id"]: parse_time(ti["end_date"]) for ti in trace["task_instances"]}
    run_end = parse_time(trace["dag_run"]["end_date"])
    head = split["headline"]
    assert head["submit_to_clusterspec"] == pytest.approx(ends["clusterspec"] - queued_at)
    assert head["chief_exit_to_published"] == pytest.approx(run_end - recorded["chief_exit"])
    assert head["total"] == pytest.approx(run_end - queued_at)
    assert head["besides_import_and_training"] == pytest.approx(
        head["total"] - head["training_loop"] - head["tensorflow_import"]
    )


def test_summed_phases_keep_the_deferral_and_the_wake_up_apart(split):
    sums = trace_run.sum_phases(split["tasks"])
    assert sums["trigger_wake_up"] == pytest.approx(split["tasks"]["train (resumed)"]["pickup"])
    assert sums["deferral"] == pytest.approx(split["tasks"]["train"]["finish"])
    every = sum(v for phases in split["tasks"].values() for v in phases.values() if v is not None)
    assert sum(sums.values()) == pytest.approx(every)


def test_a_process_is_marked_from_its_pre_execute_and_untimed_events_are_skipped():
    events = [
        {"event": "::group::Log message source details", "sources": ["x"]},
        {"timestamp": "2026-12-07T12:00:00Z", "event": "::group::Pre Execute"},
        {"timestamp": "2026-12-07T12:00:01Z", "event": "DAG bundles loaded: dags-folder"},
        {
            "timestamp": "2026-12-07T12:00:03Z",
            "event": "Worker startup parse complete",
            "dag_file_parse_ms": 1900,
        },
        {"timestamp": "2026-12-07T12:00:03.5Z", "event": "::endgroup::"},
        {"timestamp": "2026-12-07T12:00:04Z", "event": "::group::Post Execute"},
        {"timestamp": "2026-12-07T12:00:04.2Z", "event": "Pausing task as DEFERRED. "},
        {"timestamp": "2026-12-07T12:00:04.5Z", "event": "::endgroup::"},
    ]
    (marks,) = trace_run.mark_processes(events)
    assert marks.deferred and marks.parse_ms == 1900.0
    phases = trace_run.split_process(marks, marks.pre_execute - 2, None, None, None)
    assert phases == {
        "pickup": None,
        "queue": None,
        "process_start": pytest.approx(2.0),
        "ti_run_api": pytest.approx(1.0),
        "dag_parse": pytest.approx(2.0),
        "prepare": pytest.approx(0.5),
        "work": pytest.approx(0.5),
        "finish": pytest.approx(0.5),
    }
    assert trace_run.mark_processes(events[:1]) == []


def test_the_report_compares_both_trees_and_says_which_targets_are_met(split):
    slower = json.loads(json.dumps(split))
    for phases in slower["tasks"].values():
        for phase, value in phases.items():
            phases[phase] = None if value is None else value * 2
    slower["headline"] = {k: None if v is None else v * 2 for k, v in split["headline"].items()}
    runs = [split | {"load_average": [9.0, 9.0, 9.0]}] * 2
    old_runs = [slower | {"load_average": [9.5, 9.0, 9.0]}]
    data = {
        "baseline": "71c72db",
        "trees": {
            "71c72db": {"runs": old_runs, "summary": summarise_runs(old_runs)},
            "current": {"runs": runs, "summary": summarise_runs(runs)},
        },
    }
    text = "\n".join(section_phases(data))
    assert text.startswith("## 3b.")
    assert "0.50×" in text  # every phase of this tree takes half the baseline's
    submit = split["headline"]["submit_to_clusterspec"]
    assert f"median {submit:.1f} s: {'met' if submit <= 5 else 'NOT met'}" in text
    assert "+0.0 s" in text  # the first run against the next one
    assert "Per task, 71c72db" in text and "Per task, this tree" in text
    assert "None" not in text and "nan" not in text
    alone = {"baseline": None, "trees": {"current": data["trees"]["current"]}}
    assert "Per task, 71c72db" not in "\n".join(section_phases(alone))
    broken = {"error": "CalledProcessError: world.py airflow-up exited 1"}
    failed = {"baseline": "71c72db", "trees": {**data["trees"], "71c72db": broken}}
    text = "\n".join(section_phases(failed))
    assert "71c72db not measured in this run: CalledProcessError" in text
    assert "Per task, 71c72db" not in text
