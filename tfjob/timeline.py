"""When the steps of a run may happen at the latest, so that whoever waits, waits long enough.

A distributed replica cannot start its program before its `cluster.json`
arrives, and it gives up (exit 64) after `TFJOB_CLUSTERSPEC_TIMEOUT` seconds,
counted from its own start. The file comes late in the run:

    launch creates the pods ─┬─ first replica starts
                             ├─ ... the last replica may start up to startup_timeout later
                             └─ launch ends (gang running) at most startup_timeout after it began
    clusterspec is scheduled ── up to CLUSTERSPEC_SCHEDULING_SLACK_SECONDS later
    clusterspec delivers ────── within DELIVERY_BUDGET_SECONDS (retries included)

So the latest delivery comes `startup_timeout + slack + budget` after launch
began, and a replica that started at once must wait that long. Waiting only
`startup_timeout` (the first release did) lets the earliest replicas give up
before the exec can land. A replica starts after launch began, so counting
the same wait from its own start always covers the latest delivery. There is
no point waiting past the pod's `activeDeadlineSeconds`: the kubelet stops
it then.

Pure arithmetic: the manifest (tfjob/manifests.py) sets the timeout, the
delivery (operators/delivery.py) keeps within its budget.
"""

from __future__ import annotations

# Between launch's success and clusterspec starting: the scheduler noticing, the
# executor starting the task, a busy tenant pool.
CLUSTERSPEC_SCHEDULING_SLACK_SECONDS = 300
# How long the clusterspec task may keep delivering (every replica, retries included).
DELIVERY_BUDGET_SECONDS = 120


def delivery_margin_seconds() -> int:
    """How long after the gang is running every replica has its `cluster.json`, at the latest."""
    return CLUSTERSPEC_SCHEDULING_SLACK_SECONDS + DELIVERY_BUDGET_SECONDS


def latest_delivery_seconds(startup_timeout: int) -> int:
    """Seconds after launch began by which every replica has its `cluster.json`, at the latest."""
    return startup_timeout + delivery_margin_seconds()


def clusterspec_wait_seconds(startup_timeout: int, active_deadline: int) -> int:
    """TFJOB_CLUSTERSPEC_TIMEOUT: how long a replica waits for `cluster.json` from its start.

    Covers the latest delivery even for a replica that started the moment
    launch created it; never longer than the pod may live.
    """
    return min(latest_delivery_seconds(startup_timeout), active_deadline)
