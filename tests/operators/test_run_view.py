"""The TFJob tab's job view, from a run's XComs and task times (runview.run; no Airflow).

The page that draws it is checked in a real browser (tests/test_run_view_browser.py).
"""

from runview.run import (
    RunTimes,
    TaskTimes,
    count_gang_restarts,
    fill_recorded_replicas,
    list_cluster_rows,
    order_replicas,
    summarize_run,
)
from tfjob.pipeline_ids import PIPELINE_TASKS

DESCRIBED = {
    "request": {
        "name": "digits",
        "tenant": "team-a",
        "mode": "distributed",
        "image": "tensorflow/tensorflow:2.21.0",
        "replicas": {"chief": 1, "ps": 1, "worker": 1, "evaluator": 0},
    },
    "run_id": "manual__1",
    "dag_id": "tfjob__digits",
    "namespace": "tfjob-team-a",
    "run_key": "digits-1234abcd",
}
CLUSTER = {"chief": ["10.77.1.2:2222"], "ps": ["10.77.2.2:2222"], "worker": ["10.77.1.3:2222"]}
REPLICAS = [
    {
        "role": "chief",
        "index": 0,
        "pod": "digits-1234abcd-chief-0",
        "phase": "Succeeded",
        "exit_code": 0,
        "reason": "Completed",
    },
    {
        "role": "worker",
        "index": 0,
        "pod": "digits-1234abcd-worker-0",
        "phase": "Failed",
        "exit_code": 1,
        "reason": "<script>alert(1)</script>",
    },
]
RUN = "s3://models/digits/runs/tfjob__digits/manual__1"


def xcoms_of_a_finished_run():
    return {
        ("validate", "return_value"): DESCRIBED,
        ("launch", "return_value"): {"chief-0": "10.77.1.2"},
        ("clusterspec", "return_value"): {"cluster": CLUSTER},
        ("train", "replicas"): REPLICAS,
        ("train", "metrics"): {"accuracy": 0.96},
        ("archive", "return_value"): {
            "model": {"uri": f"{RUN}/model/", "objects": 2},
            "logs": [f"{RUN}/logs/chief-0.log"],
            "run_json": f"{RUN}/run.json",
        },
    }


def times(states):
    return {
        task: TaskTimes(state, "2026-12-04T10:00:00+00:00", "2026-12-04T10:00:05+00:00", 1)
        for task, state in states.items()
    }


def test_the_view_gathers_the_job_cluster_spec_replicas_and_outputs_in_pipeline_order():
    states = {task: "success" for task in reversed(PIPELINE_TASKS)} | {"publish": "upstream_failed"}
    summary = summarize_run(
        "tfjob__digits",
        "manual__1",
        RunTimes("failed", "2026-12-04T10:00"),
        xcoms_of_a_finished_run(),
        times(states),
    )
    assert summary["job"]["namespace"] == "tfjob-team-a"
    assert summary["job"]["run_key"] == "digits-1234abcd"
    assert [t["task_id"] for t in summary["tasks"]] == list(PIPELINE_TASKS)
    assert summary["tasks"][-1] == {
        "task_id": "publish",
        "state": "upstream_failed",
        "start": "2026-12-04T10:00:00+00:00",
        "end": "2026-12-04T10:00:05+00:00",
        "try_number": 1,
    }
    assert summary["cluster_spec"] == CLUSTER
    assert summary["metrics"] == {"accuracy": 0.96} and summary["active"] is False
    assert summary["run_json"] == f"{RUN}/run.json" and summary["published"] is None
    assert summary["start"] == "2026-12-04T10:00" and summary["replicas_from"] == "xcom"


def test_failed_replicas_come_first_then_by_role_and_index():
    summary = summarize_run(
        "tfjob__digits",
        "manual__1",
        RunTimes("failed"),
        xcoms_of_a_finished_run(),
        times({"train": "failed"}),
    )
    assert [r["pod"] for r in summary["replicas"]] == [
        "digits-1234abcd-worker-0",
        "digits-1234abcd-chief-0",
    ]
    replicas = [
        {"role": "worker", "index": 1, "phase": "Running", "exit_code": None},
        {"role": "worker", "index": 0, "phase": "Running", "exit_code": None},
        {"role": "chief", "index": 0, "phase": "Succeeded", "exit_code": 137},
        {"role": "ps", "index": 0, "phase": "Unknown", "exit_code": None},
    ]
    assert [(r["role"], r["index"]) for r in order_replicas(replicas)] == [
        ("chief", 0),
        ("ps", 0),
        ("worker", 0),
        ("worker", 1),
    ]


def test_the_cluster_spec_is_a_table_of_role_index_and_address():
    assert list_cluster_rows(CLUSTER) == [
        {"role": "chief", "index": 0, "address": "10.77.1.2:2222"},
        {"role": "ps", "index": 0, "address": "10.77.2.2:2222"},
        {"role": "worker", "index": 0, "address": "10.77.1.3:2222"},
    ]
    assert list_cluster_rows(None) == []


def test_a_run_whose_validate_pushed_nothing_is_not_a_training_run():
    assert (
        summarize_run("other_dag", "r", RunTimes("success"), {}, times({"some_task": "success"}))
        is None
    )


def test_an_active_run_before_validate_shows_its_conf_as_the_job():
    conf = {"name": "digits", "tenant": "team-a", "mode": "single"}
    summary = summarize_run(
        "tfjob_submit__team-a",
        "r",
        RunTimes("queued", conf=conf),
        {},
        times({"validate": "queued"}),
    )
    assert summary["job"]["name"] == "digits" and summary["job"]["namespace"] is None
    assert summary["active"] is True and summary["replicas"] == []


def test_an_active_run_says_so_and_a_launch_failure_is_kept():
    xcoms = {
        ("validate", "return_value"): DESCRIBED,
        ("launch", "failure"): {"reason": "Unschedulable", "message": "0/2 nodes"},
    }
    summary = summarize_run(
        "tfjob__digits", "manual__1", RunTimes("running"), xcoms, times({"launch": "running"})
    )
    assert summary["active"] is True
    assert summary["launch_failure"]["reason"] == "Unschedulable"
    assert summary["replicas"] == [] and summary["cluster_rows"] == []


def test_a_restarted_run_shows_each_attempt_and_the_last_gangs_cluster_spec():
    restarted = {
        "chief": ["10.77.3.2:2222"],
        "ps": ["10.77.3.3:2222"],
        "worker": ["10.77.3.4:2222"],
    }
    attempts = [
        {
            "number": 1,
            "outcome": "restarted",
            "failed_replica": "worker-0",
            "exit_code": 143,
            "reason": "worker-0 was deleted (exit code 143)",
        },
        {
            "number": 2,
            "outcome": "succeeded",
            "failed_replica": None,
            "restored_checkpoint_step": 4321,
        },
    ]
    xcoms = xcoms_of_a_finished_run() | {
        ("train", "attempts"): attempts,
        ("train", "cluster"): restarted,
    }
    summary = summarize_run(
        "tfjob__digits", "manual__1", RunTimes("success"), xcoms, times({"train": "success"})
    )
    assert summary["attempts"] == attempts and summary["cluster_spec"] == restarted
    assert {"role": "worker", "index": 0, "address": "10.77.3.4:2222"} in summary["cluster_rows"]


def test_after_the_run_each_replica_shows_its_gpus_from_the_request_and_its_gang_restarts():
    xcoms = xcoms_of_a_finished_run()
    xcoms[("validate", "return_value")] = dict(
        DESCRIBED,
        request=dict(
            DESCRIBED["request"],
            resources={"chief": {"cpu": "1", "gpu": 0}, "worker": {"cpu": "2", "gpu": 2}},
        ),
    )
    xcoms[("train", "attempts")] = [
        {"number": 1, "outcome": "restarted", "failed_replica": "worker-0"},
        {"number": 2, "outcome": "restarted", "failed_replica": "worker-0"},
        {"number": 3, "outcome": "failed", "failed_replica": "worker-0"},
    ]
    summary = summarize_run(
        "tfjob__digits", "manual__1", RunTimes("failed"), xcoms, times({"train": "failed"})
    )
    rows = {f"{r['role']}-{r['index']}": (r["gpus"], r["restarts"]) for r in summary["replicas"]}
    assert rows == {"worker-0": (2, 2), "chief-0": (0, 2)}


def test_a_recorded_row_keeps_its_own_counts_and_a_role_the_request_leaves_out_has_none():
    rows = fill_recorded_replicas(
        [{"role": "ps", "index": 0}, {"role": "worker", "index": 0, "gpus": 4, "restarts": 1}],
        {"resources": {"worker": {"gpu": 1}}},
        [],
    )
    assert [(r["gpus"], r["restarts"]) for r in rows] == [(0, 0), (4, 1)]
    assert count_gang_restarts([{"outcome": "restarted"}, "junk", {"outcome": "running"}]) == 1


def test_a_warm_started_run_names_the_run_it_restored_from_and_a_cold_one_names_none():
    source = "s3://models/digits/runs/tfjob_submit__team-a/manual__0/checkpoints/"
    warm = {"requested": "latest", "source": source, "step": 300, "files": 3, "bytes": 9}
    xcoms = {("validate", "return_value"): DESCRIBED, ("launch", "warm_start"): warm}
    view = summarize_run("tfjob__digits", "manual__1", RunTimes("running"), xcoms, {})
    assert view["warm_start"] == {
        **warm,
        "from_run": {
            "dag_id": "tfjob_submit__team-a",
            "run_id": "manual__0",
            "tensorboard": "s3://models/digits/runs/tfjob_submit__team-a/manual__0/tensorboard/",
        },
    }
    odd = dict(warm, source="s3://models/elsewhere/")  # not a run's folder: shown, not linked
    xcoms[("launch", "warm_start")] = odd
    view = summarize_run("tfjob__digits", "manual__1", RunTimes("running"), xcoms, {})
    assert view["warm_start"] == odd
    del xcoms[("launch", "warm_start")]
    view = summarize_run("tfjob__digits", "manual__1", RunTimes("running"), xcoms, {})
    assert view["warm_start"] is None
