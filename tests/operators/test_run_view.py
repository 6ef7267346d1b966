"""The TFJob tab's job view, from a run's XComs (operators.run_view; no Airflow)."""

from operators.run_view import PIPELINE, render_run_page, summarize_run

DESCRIBED = {
    "request": {"name": "digits", "tenant": "team-a", "mode": "distributed",
                "image": "tensorflow/tensorflow:2.21.0",
                "replicas": {"chief": 1, "ps": 1, "worker": 1, "evaluator": 0}},
    "run_id": "manual__1", "dag_id": "tfjob__digits",
    "namespace": "tfjob-team-a", "run_key": "digits-1234abcd",
}
CLUSTER = {"chief": ["10.77.1.2:2222"], "ps": ["10.77.2.2:2222"], "worker": ["10.77.1.3:2222"]}
REPLICAS = [
    {"role": "chief", "index": 0, "pod": "digits-1234abcd-chief-0", "phase": "Succeeded",
     "exit_code": 0, "reason": "Completed"},
    {"role": "worker", "index": 0, "pod": "digits-1234abcd-worker-0", "phase": "Failed",
     "exit_code": 1, "reason": "<script>alert(1)</script>"},
]
RUN = "s3://models/digits/runs/tfjob__digits/manual__1"


def xcoms_of_a_finished_run():
    return {
        ("validate", "return_value"): DESCRIBED,
        ("launch", "return_value"): {"chief-0": "10.77.1.2"},
        ("clusterspec", "return_value"): {"cluster": CLUSTER},
        ("train", "replicas"): REPLICAS,
        ("train", "metrics"): {"accuracy": 0.96},
        ("archive", "return_value"): {"model": {"uri": f"{RUN}/model/", "objects": 2},
                                      "logs": [f"{RUN}/logs/chief-0.log"],
                                      "run_json": f"{RUN}/run.json"},
    }


def test_the_view_gathers_the_job_cluster_spec_replicas_and_outputs_in_pipeline_order():
    states = {task: "success" for task in reversed(PIPELINE)} | {"publish": "upstream_failed"}
    summary = summarize_run("tfjob__digits", "manual__1", "failed", xcoms_of_a_finished_run(),
                            states)
    assert summary["job"]["namespace"] == "tfjob-team-a"
    assert summary["job"]["run_key"] == "digits-1234abcd"
    assert [t["task_id"] for t in summary["tasks"]] == list(PIPELINE)
    assert summary["tasks"][-1] == {"task_id": "publish", "state": "upstream_failed"}
    assert summary["cluster_spec"] == CLUSTER and summary["replicas"] == REPLICAS
    assert summary["metrics"] == {"accuracy": 0.96}
    assert summary["run_json"] == f"{RUN}/run.json" and summary["published"] is None


def test_a_run_whose_validate_pushed_nothing_is_not_a_training_run():
    assert summarize_run("other_dag", "r", "success", {}, {"some_task": "success"}) is None


def test_the_page_escapes_what_pods_and_programs_wrote():
    summary = summarize_run("tfjob__digits", "manual__1", "failed", xcoms_of_a_finished_run(),
                            {"train": "failed"})
    page = render_run_page(summary)
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "10.77.2.2:2222" in page and f"{RUN}/run.json" in page and "<script" not in page


def test_a_launch_failure_is_shown_first():
    xcoms = {("validate", "return_value"): DESCRIBED,
             ("launch", "failure"): {"reason": "Unschedulable", "message": "0/2 nodes"}}
    summary = summarize_run("tfjob__digits", "manual__1", "failed", xcoms, {"launch": "failed"})
    page = render_run_page(summary)
    assert summary["launch_failure"]["reason"] == "Unschedulable"
    assert page.index("Launch failure") < page.index("Tasks")


def test_a_restarted_run_shows_each_attempt_and_the_last_gangs_cluster_spec():
    restarted = {"chief": ["10.77.3.2:2222"], "ps": ["10.77.3.3:2222"],
                 "worker": ["10.77.3.4:2222"]}
    attempts = [{"number": 1, "outcome": "restarted", "failed_replica": "worker-0",
                 "exit_code": 143, "reason": "worker-0 was deleted (exit code 143)"},
                {"number": 2, "outcome": "succeeded", "failed_replica": None,
                 "restored_checkpoint_step": 4321}]
    xcoms = xcoms_of_a_finished_run() | {("train", "attempts"): attempts,
                                         ("train", "cluster"): restarted}
    summary = summarize_run("tfjob__digits", "manual__1", "success", xcoms, {"train": "success"})
    assert summary["attempts"] == attempts and summary["cluster_spec"] == restarted
    page = render_run_page(summary)
    assert "worker-0 was deleted (exit code 143)" in page and "10.77.3.4:2222" in page
    assert "resumed from step" in page and "<td>4321</td>" in page
