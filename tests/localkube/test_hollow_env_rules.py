"""A simulated pod's rule from its containers' environment when it has no annotation (issue 18:
a training request can set `env` but not annotations, so the scale bench's jobs end this way)."""

from __future__ import annotations

import pytest

from localkube.hollow import rules


def build_pod(annotations: dict | None = None, env: dict | None = None) -> dict:
    return {
        "metadata": {"annotations": annotations or {}},
        "spec": {
            "containers": [
                {"name": "keeper"},
                {
                    "name": "tensorflow",
                    "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
                },
            ]
        },
    }


def test_the_environment_stands_for_missing_annotations() -> None:
    pod = build_pod(
        env={
            "LOCALKUBE_SIMULATE_RUN_SECONDS": "20",
            "LOCALKUBE_SIMULATE_EXIT_CODE": "3",
            "LOCALKUBE_SIMULATE_START_SECONDS": "1.5",
            "LOCALKUBE_SIMULATE_STOP_SECONDS": "2",
        }
    )
    assert rules.read_rule(pod) == rules.SimulationRule(1.5, 20.0, 3, 2.0)


def test_an_annotation_wins_over_the_environment() -> None:
    pod = build_pod({rules.RUN_SECONDS: "5"}, {"LOCALKUBE_SIMULATE_RUN_SECONDS": "20"})
    assert rules.read_rule(pod).run_seconds == 5.0


def test_without_either_the_pod_runs_until_stopped() -> None:
    assert rules.read_rule(build_pod(env={"OTHER": "1"})) == rules.SimulationRule()


def test_a_bad_environment_value_names_the_annotation_it_stands_for() -> None:
    with pytest.raises(rules.RuleError, match="simulate-run-seconds: '-1' given"):
        rules.read_rule(build_pod(env={"LOCALKUBE_SIMULATE_RUN_SECONDS": "-1"}))


def test_a_run_after_file_comes_from_the_annotation_or_the_environment() -> None:
    pod = build_pod(env={"LOCALKUBE_SIMULATE_RUN_AFTER_FILE": "/tfjob/config/cluster.json"})
    assert rules.read_rule(pod).run_after_file == "/tfjob/config/cluster.json"
    pod = build_pod({rules.RUN_AFTER_FILE: "/ready"}, {"LOCALKUBE_SIMULATE_RUN_AFTER_FILE": "/x"})
    assert rules.read_rule(pod).run_after_file == "/ready"


def test_a_relative_run_after_file_is_refused_naming_what_is_allowed() -> None:
    with pytest.raises(
        rules.RuleError, match="simulate-run-after-file: 'ready' given; an absolute path"
    ):
        rules.read_rule(build_pod({rules.RUN_AFTER_FILE: "ready"}))
