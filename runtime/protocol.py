"""The pod protocol's names: the one home of what a replica pod and Airflow agree on.

A replica pod is built by `tfjob/manifests.py`, judged, exec'd into and read
by `operators/` and `tshell/`, and run by the scripts of this package; all of
them meet on the names below (docs/architecture.md, "The pod protocol"). A
name defined twice drifts, so each is defined here once and imported as
`runtime.protocol`, on the host and in the pod (the runtime is shipped as a
package). Standard library only, and no imports at all.
"""

# --- containers ---------------------------------------------------------------------------
MAIN_CONTAINER = "tensorflow"  # runs bootstrap.py; every verdict judges a replica by it
INIT_CONTAINER = "fetch-bundle"  # runs fetch.py
KEEPER_CONTAINER = "tfjob-keeper"  # runs keeper.py, in the model owner's pod only

# --- mount paths and the files in them ----------------------------------------------------
# The runtime package's import root: every container's working directory, so that
# `python3 -m runtime.<entry>` (and exec's `python3 -m runtime.keeper`) finds the package
# below it, and nothing else is added to the path of the program bootstrap runs.
PACKAGE_ROOT = "/tfjob/python"
RUNTIME_DIR = f"{PACKAGE_ROOT}/runtime"  # the runtime/*.py files (ConfigMap `<runkey>-runtime`)
# The grants (Secrets `<runkey>-access`, `<runkey>-upload`, `<runkey>-tensorboard-<n>`)
ACCESS_DIR = "/tfjob/access"
# emptyDir: code/, data/, model/, logs/, checkpoints/, tensorboard/
WORKSPACE_DIR = "/tfjob/workspace"
CONFIG_DIR = "/tfjob/config"  # emptyDir: cluster.json, written by Airflow
BUNDLE_URL_FILE = "bundle_url"  # in ACCESS_DIR: presigned GET of the bundle snapshot
RESTORE_FILE = "restore.json"  # in ACCESS_DIR: presigned GETs of the checkpoints to restore
UPLOAD_FILE = "upload.json"  # in ACCESS_DIR of the model owner: presigned POST policies
# In ACCESS_DIR of every replica: the POST policy of its own summaries folder, the key
# TENSORBOARD_GRANT_KEY of that replica in its Secret `<runkey>-tensorboard-<n>`.
TENSORBOARD_GRANT_FILE = "tensorboard.json"
TENSORBOARD_GRANT_KEY = "tensorboard-{replica}.json"  # replica: `<role>-<index>`
CLUSTERSPEC_FILE = "cluster.json"  # in CONFIG_DIR

# --- commands of the containers (run in PACKAGE_ROOT) --------------------------------------
FETCH_COMMAND = ("python3", "-m", "runtime.fetch")
BOOTSTRAP_COMMAND = ("python3", "-m", "runtime.bootstrap")  # then `--`, the entrypoint, args
KEEPER_COMMAND = ("python3", "-m", "runtime.keeper")  # then nothing, `list` or `read ...`

# --- environment of the containers --------------------------------------------------------
ENV_ROLE = "TFJOB_ROLE"
ENV_INDEX = "TFJOB_INDEX"
ENV_WAIT_CLUSTERSPEC = "TFJOB_WAIT_CLUSTERSPEC"  # "1": wait for cluster.json (distributed)
ENV_CLUSTERSPEC_TIMEOUT = "TFJOB_CLUSTERSPEC_TIMEOUT"  # seconds
ENV_UPLOAD_MODEL = "TFJOB_UPLOAD_MODEL"  # "1" on the replica that owns the model
ENV_UPLOAD_PATIENCE = "TFJOB_UPLOAD_PATIENCE"  # seconds
ENV_SYNC_CHECKPOINTS = "TFJOB_SYNC_CHECKPOINTS"  # "1" on the model owner
ENV_CHECKPOINT_INTERVAL = "TFJOB_CHECKPOINT_INTERVAL"  # seconds, of both syncs
ENV_SYNC_TENSORBOARD = "TFJOB_SYNC_TENSORBOARD"  # "1" on every replica
# Overrides of the mount paths and limits, for running the scripts outside a pod (tests).
ENV_WORKSPACE = "TFJOB_WORKSPACE"
ENV_CONFIG_DIR = "TFJOB_CONFIG_DIR"
ENV_ACCESS_DIR = "TFJOB_ACCESS_DIR"
ENV_NO_BUNDLE = "TFJOB_NO_BUNDLE"  # "1": the program is in the image; fetch downloads none
ENV_MAX_BUNDLE_BYTES = "TFJOB_MAX_BUNDLE_BYTES"
ENV_MAX_BUNDLE_COMPRESSED_BYTES = "TFJOB_MAX_BUNDLE_COMPRESSED_BYTES"
ENV_MAX_RESTORE_FILES = "TFJOB_MAX_RESTORE_FILES"
ENV_MAX_RESTORE_BYTES = "TFJOB_MAX_RESTORE_BYTES"

# --- lines in the main container's log ----------------------------------------------------
METRICS_MARKER = "TFJOB_METRICS "  # the bootstrap's final metrics, once
METRIC_MARKER = "TFJOB_METRIC "  # a point of the program's training curve (metric_lines.py)

# --- exit codes ---------------------------------------------------------------------------
EXIT_USAGE = 2  # no command, no code/, a bad setting, bad arguments (every script)
EXIT_NO_CLUSTERSPEC = 64  # bootstrap: no cluster.json within TFJOB_CLUSTERSPEC_TIMEOUT
EXIT_BAD_CLUSTERSPEC = 65  # bootstrap: cluster.json unreadable or malformed
# bootstrap: the program exited 0 but its model could not be uploaded: the model owner's
# keeper container still holds it, and `archive` copies it out of the pod.
EXIT_UPLOAD_FAILED = 74
EXIT_FETCH_REFUSED = 65  # fetch: bundle or restore.json refused
EXIT_FETCH_DOWNLOAD_FAILED = 74  # fetch: a download failed
EXIT_KEEPER_NOT_FOUND = 66  # keeper: no such file
EXIT_KEEPER_REFUSED = 77  # keeper: a path it does not serve
