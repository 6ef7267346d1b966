"""Named settings of the pipeline: connection ids, timeouts, limits.

One place, so a timeout is changed once and read by name everywhere.
"""

from __future__ import annotations

import os

from tfjob.grants import MAX_GRANT_SECONDS
from tfjob.manifests import UPLOAD_PATIENCE_SECONDS as UPLOAD_PATIENCE_DEFAULT_SECONDS

# Airflow connections (docs/real-cluster.md). S3 goes through each run's tenant's
# connection: `Tenant.s3_conn_id` (the tenants file's aws_conn_id, else aws_default).
KUBERNETES_CONN_ID = "kubernetes_default"

# The pods' S3 grants (operators/grants.py): the longest lifetime Airflow's
# credentials can sign for (temporary credentials: set it to their lifetime,
# e.g. 3600), and the longest time between two refreshes of a live run's grants.
GRANT_LIFETIME_SECONDS = int(os.environ.get("TFJOB_GRANT_LIFETIME_SECONDS", MAX_GRANT_SECONDS))
GRANT_REFRESH_SECONDS = 1800
# A refresh of the grants that failed (a blinking API server, S3 signing) is tried again
# this soon, or at the next refresh when that comes first.
GRANT_RETRY_SECONDS = 15.0
# How long the model owner's bootstrap retries its upload (S3 down, a grant that
# expired before its refresh arrived) before it exits 74 and archive copies the
# model out of the pod instead.
UPLOAD_PATIENCE_SECONDS = int(
    os.environ.get("TFJOB_UPLOAD_PATIENCE_SECONDS", UPLOAD_PATIENCE_DEFAULT_SECONDS)
)

# Largest bundle (sum of its files) the pipeline accepts.
MAX_BUNDLE_TOTAL_SIZE = 2 * 1024**3
# Largest archive (.tar.gz) fetch_bundle downloads, checked from S3's HEAD before
# any byte: incompressible data grows a little in tar and gzip, hence the 1/16.
MAX_BUNDLE_COMPRESSED_SIZE = MAX_BUNDLE_TOTAL_SIZE + MAX_BUNDLE_TOTAL_SIZE // 16

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

# Replica logs are untrusted and may be huge (docs/pipeline.md, "Bounded log reads").
# A log line longer than this is cut (operators/podlogs.py): the trigger's live
# log, train's copy of the logs and the tab's log pane show its first bytes.
LOG_LINE_MAX_BYTES = 64 * 1024
# The trigger stops following a replica's log after this many bytes (train and
# the archive have the rest): the triggerer's work and disk per replica is bounded.
LIVE_LOG_MAX_BYTES = 16 * 1024**2
# train copies at most this much of each replica's log into its task log.
TRAIN_LOG_MAX_BYTES = 8 * 1024**2
# archive keeps at most this much of each replica's main container log (and
# ARCHIVE_INIT_LOG_MAX_BYTES of its init container's), then a line saying so.
ARCHIVE_LOG_MAX_BYTES = 64 * 1024**2
ARCHIVE_INIT_LOG_MAX_BYTES = 1024**2
# A read of a log's last lines (the failure's quote, the metrics line, the tab's
# live tail) asks for at most this many bytes of them; of a log longer than train
# or archive keep, its last LOG_END_LINES lines are read apart.
LOG_TAIL_MAX_BYTES = 1024**2
LOG_END_LINES = 200

# archive (and publish) retry S3 with exponential back-off, from the first delay
# doubling up to the largest, for at most S3_RETRY_BUDGET_SECONDS in all: a short
# S3 outage must not lose a run's logs or model before teardown deletes its pods.
S3_RETRY_BUDGET_SECONDS = 120.0
S3_RETRY_FIRST_DELAY_SECONDS = 1.0
S3_RETRY_MAX_DELAY_SECONDS = 20.0

# Model recovery from the owner pod's keeper container (operators/modelrecovery.py):
# bytes read per exec (base64 on the wire: 4/3 of it), and how long one exec may take.
MODEL_RECOVERY_CHUNK_BYTES = 4 * 1024**2
MODEL_RECOVERY_EXEC_TIMEOUT_SECONDS = 120
