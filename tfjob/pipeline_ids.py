"""The ids a request's pipeline has in Airflow: DAG ids, task ids, XCom keys, tags.

Airflow finds a run by its DAG id and run id, other tasks and tshell read a
task's XComs and log by its task id and key, and the TFJob tab reads the same
XComs: every side must spell these alike, so they are defined here once. The
names of the Kubernetes objects of a run are in `naming.py`. Standard library
only, and light: tshell imports this module to print `--help` quickly.
"""

import re
from collections.abc import Iterable

# A tenant's name is a DNS-1123 label (tfjob/tenants/file.py checks it).
_TENANT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

# DAG ids: one submit DAG per tenant (`tfjob_submit__<tenant>`), one DAG per request
# file (`tfjob__<name>`).
SUBMIT_DAG_PREFIX = "tfjob_submit__"
REQUEST_DAG_PREFIX = "tfjob__"
# Every tenant DAG carries the Airflow tag `tenant:<name>`: who it belongs to, for readers
# that see only the DAG (a scheduled run of a request file has no conf).
TENANT_TAG_PREFIX = "tenant:"
# A request's pipeline in Airflow: its task ids, in the order they run
# (operators/dag_factory.py), and the XCom keys read outside the task that pushes
# them (other tasks, the TFJob tab, tshell). The maintenance DAG has its own id.
VALIDATE_TASK = "validate"
FETCH_BUNDLE_TASK = "fetch_bundle"
LAUNCH_TASK = "launch"
CLUSTERSPEC_TASK = "clusterspec"
TRAIN_TASK = "train"
ARCHIVE_TASK = "archive"
TEARDOWN_TASK = "teardown"
PUBLISH_TASK = "publish"
PIPELINE_TASKS = (
    VALIDATE_TASK,
    FETCH_BUNDLE_TASK,
    LAUNCH_TASK,
    CLUSTERSPEC_TASK,
    TRAIN_TASK,
    ARCHIVE_TASK,
    TEARDOWN_TASK,
    PUBLISH_TASK,
)
JANITOR_DAG_ID = "tfjob_janitor"
JANITOR_TASK = "sweep"
# XCom key of a failed launch's reason (read by archive for run.json, and the TFJob tab).
LAUNCH_FAILURE_KEY = "failure"
# XCom key of the run's GrantPlan (operators/grants.py; no credential in it), pushed by launch.
GRANTS_KEY = "grants"
# XCom keys of train: every attempt (gang) of the run so far (operators/restart.py), and
# the ClusterSpec of a gang it restarted (the `clusterspec` task's is the first gang's).
ATTEMPTS_KEY = "attempts"
WARM_START_KEY = "warm_start"  # launch's: what the first gang restored (no credential)
RESTARTED_CLUSTER_KEY = "cluster"
# Bare XCom values: when launch saw the gang ready and train saw it end (time.time()), and
# the metrics of the program's TFJOB_METRICS line (its own JSON, train's).
READY_AT_KEY = "ready_at"
FINISHED_AT_KEY = "finished_at"
METRICS_KEY = "metrics"


def submit_dag_id(tenant: str) -> str:
    """The tenant's own submit DAG: `tfjob_submit__<tenant>` (its roles alone may trigger it)."""
    if not isinstance(tenant, str) or not _TENANT_NAME.match(tenant):
        raise ValueError(
            f"tenant {tenant!r} given; allowed: a DNS-1123 label (lowercase letters, digits, '-')"
        )
    return f"{SUBMIT_DAG_PREFIX}{tenant}"


def tenant_of_submit_dag(dag_id: str) -> str | None:
    """The tenant whose submit DAG `dag_id` is; None for any other DAG."""
    if not dag_id.startswith(SUBMIT_DAG_PREFIX):
        return None
    tenant = dag_id[len(SUBMIT_DAG_PREFIX) :]
    return tenant if _TENANT_NAME.match(tenant) else None


def request_dag_id(name: str) -> str:
    """The DAG of a request file (or of the request named `name`): `tfjob__<name>`."""
    return f"{REQUEST_DAG_PREFIX}{name}"


def request_name_of_dag(dag_id: str) -> str | None:
    """The request a request-file DAG (`tfjob__<name>`) runs; None for any other DAG."""
    if not dag_id.startswith(REQUEST_DAG_PREFIX):
        return None
    return dag_id[len(REQUEST_DAG_PREFIX) :] or None


def tenant_tag(tenant: str) -> str:
    return f"{TENANT_TAG_PREFIX}{tenant}"


def tenant_of_tags(tags: Iterable[str]) -> str | None:
    """The tenant a DAG's tags name (`tenant:<name>`); None when none or several do."""
    named = {tag[len(TENANT_TAG_PREFIX) :] for tag in tags if tag.startswith(TENANT_TAG_PREFIX)}
    return named.pop() if len(named) == 1 else None
