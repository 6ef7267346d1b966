"""Named settings of the pipeline: connection ids, timeouts, limits.

One place, so a timeout is changed once and read by name everywhere.
"""

from __future__ import annotations

# Airflow connections (docs/real-cluster.md).
KUBERNETES_CONN_ID = "kubernetes_default"
AWS_CONN_ID = "aws_default"

# How long the presigned bundle URL and upload policy stay valid, beyond the
# run's active deadline (pods may start late and upload at the very end).
PRESIGN_MARGIN_SECONDS = 600

# Largest bundle (sum of its files) the pipeline accepts.
MAX_BUNDLE_TOTAL_SIZE = 2 * 1024**3

# Teardown: how long to wait for every object of a run to be gone.
TEARDOWN_TIMEOUT_SECONDS = 180
# Grace period given to training processes when a run is torn down.
TEARDOWN_GRACE_SECONDS = 10

# Before a new try creates its objects: wait for an earlier try's leftovers.
LEFTOVER_TIMEOUT_SECONDS = 120

# Tenant admission (operators/launch.py): a launch over its tenant's
# max_concurrent_jobs gives its pool slot back and asks again after
# ADMISSION_DELAY_SECONDS plus up to ADMISSION_JITTER_SECONDS (two launches that
# collided do not collide again), and fails after ADMISSION_MAX_WAIT_SECONDS.
ADMISSION_DELAY_SECONDS = 10
ADMISSION_JITTER_SECONDS = 10
ADMISSION_MAX_WAIT_SECONDS = 6 * 3600

# The train trigger gives up this long after the pods' active deadline.
TRAIN_DEADLINE_MARGIN_SECONDS = 120

# The train trigger never fires sooner than this after the task deferred: Airflow 3.3
# fails a deferred task whose trigger event the scheduler handles before the
# executor's report of the deferring process's exit (apache/airflow#66374, #72716).
DEFER_SETTLE_SECONDS = 5.0

# Lines of a failed replica's log quoted in the task's error.
FAILURE_LOG_LINES = 20

# Task ids of the pipeline (other tasks pull XCom by these).
VALIDATE_TASK = "validate"
FETCH_BUNDLE_TASK = "fetch_bundle"
LAUNCH_TASK = "launch"
CLUSTERSPEC_TASK = "clusterspec"
TRAIN_TASK = "train"
ARCHIVE_TASK = "archive"
TEARDOWN_TASK = "teardown"
PUBLISH_TASK = "publish"
# XCom key of a failed launch's reason (read by archive for run.json, and the TFJob tab).
LAUNCH_FAILURE_KEY = "failure"
