"""A replica waits for its ClusterSpec until the latest moment the clusterspec step may deliver
it (tfjob/timeline.py), not just `startup_timeout` from its own start."""

from __future__ import annotations

import pytest

from harness.tfjob_fixtures import RUN, distributed_request_data
from operators import delivery
from tfjob import timeline
from tfjob.manifests import build_pod_manifest
from tfjob.request.model import Role, load_request


def gives_up_at(started_at: float, wait: float) -> float:
    """When a replica that started at `started_at` (seconds after launch began) exits 64."""
    return started_at + wait


@pytest.mark.parametrize("startup_timeout", [30, 300, 1800])
def test_an_early_replica_waits_past_the_latest_possible_delivery(startup_timeout):
    active_deadline = 24 * 3600
    # The first replica starts the moment launch creates it; the last one may start
    # startup_timeout later; clusterspec is scheduled after launch and delivers with retries.
    first_started = 0.0
    last_started = float(startup_timeout)
    latest_delivery = (
        last_started
        + timeline.CLUSTERSPEC_SCHEDULING_SLACK_SECONDS
        + timeline.DELIVERY_BUDGET_SECONDS
    )
    wait = timeline.clusterspec_wait_seconds(startup_timeout, active_deadline)
    assert gives_up_at(first_started, wait) >= latest_delivery
    assert latest_delivery == timeline.latest_delivery_seconds(startup_timeout)
    # what the first release did: wait startup_timeout from the replica's own start
    assert gives_up_at(first_started, startup_timeout) < latest_delivery


def test_a_replica_never_waits_past_its_pods_active_deadline():
    assert timeline.clusterspec_wait_seconds(300, 400) == 400


def test_the_manifest_sets_the_wait_from_the_timeline():
    request = load_request(distributed_request_data(startup_timeout=120, active_deadline=3600))
    container = build_pod_manifest(request, RUN, Role.WORKER, 0)["spec"]["containers"][0]
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert env["TFJOB_CLUSTERSPEC_TIMEOUT"] == str(
        120 + timeline.CLUSTERSPEC_SCHEDULING_SLACK_SECONDS + timeline.DELIVERY_BUDGET_SECONDS
    )


def test_the_delivery_keeps_within_the_budget_the_replicas_wait_for():
    assert delivery.DELIVERY_BUDGET_SECONDS == timeline.DELIVERY_BUDGET_SECONDS
    # at least one try with its whole exec timeout fits in the budget
    assert delivery.EXEC_TIMEOUT_SECONDS < timeline.DELIVERY_BUDGET_SECONDS
