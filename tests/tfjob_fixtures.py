"""Shared test data for the tfjob tests: a valid request and a run identity."""

from typing import Any

from tfjob.manifests import RunIdentity


def valid_request_data(**overrides: Any) -> dict[str, Any]:
    """A minimal valid single-mode request as a dict, with `overrides` applied."""
    data: dict[str, Any] = {
        "name": "digits",
        "tenant": "team-a",
        "entrypoint": ["python3", "train.py"],
        "bundle": "s3://tfjob-bundles/digits/bundle.tar.gz",
        "output": "s3://tfjob-output/digits",
    }
    data.update(overrides)
    return data


def distributed_request_data(**overrides: Any) -> dict[str, Any]:
    """A valid parameter-server request with every role, with `overrides` applied."""
    data: dict[str, Any] = {"mode": "distributed",
                            "replicas": {"chief": 1, "ps": 2, "worker": 3, "evaluator": 1}}
    data.update(overrides)
    return valid_request_data(**data)


RUN = RunIdentity(job="digits", run_id="manual__2026-12-02T12:00:00+00:00",
                  dag_id="tfjob_digits", namespace="tfjob-team-a")
