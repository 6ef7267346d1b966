"""Shared test data for the tfjob tests: a valid request, a run identity, tenant storage."""

from typing import Any

from tfjob.manifests import RunIdentity
from tfjob.tenants.model import PodUser

# Who team-a's pods are in these tests (the tenants file gives each tenant its own).
TEAM_A_USER = PodUser(uid=12345, gid=12346)


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
    data: dict[str, Any] = {
        "mode": "distributed",
        "replicas": {"chief": 1, "ps": 2, "worker": 3, "evaluator": 1},
    }
    data.update(overrides)
    return valid_request_data(**data)


RUN = RunIdentity(
    job="digits",
    run_id="manual__2026-12-02T12:00:00+00:00",
    dag_id="tfjob__digits",
    namespace="tfjob-team-a",
    run_as=TEAM_A_USER,
)

BUNDLE_BUCKET = "tfjob-bundles"
OUTPUT_BUCKET = "tfjob-output"


def tenant_storage(name: str) -> dict[str, list[str]]:
    """The required prefixes of a test tenant, its own under the fixture buckets.

    Tenants of one file must not share output prefixes, hence one per tenant. Only
    `check_request_policy` looks at them: a request it judges against such a tenant
    needs a bundle and an output under them (the fixture request's are not).
    """
    return {
        "bundle_prefixes": [f"s3://{BUNDLE_BUCKET}/{name}/"],
        "output_prefixes": [f"s3://{OUTPUT_BUCKET}/{name}/"],
    }
