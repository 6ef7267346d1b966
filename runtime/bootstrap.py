"""Main container entry: `python3 -m runtime.bootstrap -- <entrypoint> <args...>`.

Implements the pod protocol of docs/architecture.md: in distributed mode
(TFJOB_WAIT_CLUSTERSPEC=1) it waits for `$TFJOB_CONFIG_DIR/cluster.json`
(written by Airflow once every replica has an IP), exits 64 when it does not
come within TFJOB_CLUSTERSPEC_TIMEOUT seconds of its start (the manifest sets
it to cover the latest possible delivery: startup_timeout for the last replica
to start, plus the time clusterspec may take to be scheduled and to deliver
with retries, at most the pod's active deadline; tfjob/timeline.py). Airflow
may write the same file more than once (a retried delivery): the first one
read is used. It then exports TF_CONFIG and the
legacy PS_HOSTS/WORKER_HOSTS/CHIEF_HOSTS/JOB_NAME/TASK_INDEX variables derived
from it (`clusterenv.py`), sets
DATA_DIR, MODEL_DIR, LOG_DIR, METRICS_FILE, CHECKPOINT_DIR and TENSORBOARD_DIR, expands
`$(NAME)` in the entrypoint and args against that environment (Kubernetes'
rules, `expansion.py`: Kubernetes itself cannot, the cluster variables come
after the pod started), prints the command once, and runs it in `code/`. The
printed command shows only TF-on-K8s' own variables expanded (addresses,
names, paths); a reference to any other variable is printed as written, as
its value may be a token.

SIGTERM and SIGINT are forwarded to the program, so Kubernetes' grace period
reaches TensorFlow. With TFJOB_SYNC_CHECKPOINTS=1, CHECKPOINT_DIR goes to
`<prefix>checkpoints/` every TFJOB_CHECKPOINT_INTERVAL seconds while the
program runs and once more after it exited, whatever its exit, before the
model (`checkpoint_sync.py`); a failed copy is logged, never fatal. With
TFJOB_SYNC_TENSORBOARD=1 (every replica), TENSORBOARD_DIR goes the same way,
at the same interval, to the one folder `$TFJOB_ACCESS_DIR/tensorboard.json`
grants (the replica's `tensorboard/<role>-<index>/`). When the
program exits 0 and TFJOB_UPLOAD_MODEL=1, the files of MODEL_DIR go to
`<prefix>model/<relative path>` and metrics.json to `<prefix>metrics.json`
through the presigned POST policies in `$TFJOB_ACCESS_DIR/upload.json`.
That file is read when each file is uploaded, not at start: Airflow rewrites
the Secret before the grants expire and the kubelet updates the mounted file.
Each upload is retried with back-off for TFJOB_UPLOAD_PATIENCE seconds (S3
down, a grant that expired before its refresh arrived). A line
`TFJOB_METRICS <json>` is printed when the metrics file holds JSON. The exit
code is the program's (128+N when it died of signal N); 64 for a missing
ClusterSpec, 65 for a bad one, 2 for usage errors, 74 when the program
succeeded but its model could not be uploaded.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time

from runtime import checkpoint_sync, checkpoints, transfer
from runtime.clusterenv import LEGACY_VARIABLES, cluster_environment
from runtime.expansion import expand_argv, expand_with
from runtime.protocol import (
    ACCESS_DIR,
    CLUSTERSPEC_FILE,
    CONFIG_DIR,
    ENV_ACCESS_DIR,
    ENV_CHECKPOINT_INTERVAL,
    ENV_CLUSTERSPEC_TIMEOUT,
    ENV_CONFIG_DIR,
    ENV_INDEX,
    ENV_ROLE,
    ENV_SYNC_CHECKPOINTS,
    ENV_SYNC_TENSORBOARD,
    ENV_UPLOAD_MODEL,
    ENV_UPLOAD_PATIENCE,
    ENV_WAIT_CLUSTERSPEC,
    ENV_WORKSPACE,
    EXIT_BAD_CLUSTERSPEC,
    EXIT_NO_CLUSTERSPEC,
    EXIT_UPLOAD_FAILED,
    EXIT_USAGE,
    METRICS_MARKER,
    TENSORBOARD_GRANT_FILE,
    UPLOAD_FILE,
    WORKSPACE_DIR,
)

POLL_INTERVAL_S = 0.2
DEFAULT_CLUSTERSPEC_TIMEOUT_S = 600.0
DEFAULT_UPLOAD_PATIENCE_S = 600.0
DEFAULT_CHECKPOINT_INTERVAL_S = 60.0
# Set by TF-on-K8s and never secret: shown expanded in the printed command.
PRINTABLE_VARIABLES = frozenset(
    {
        "TF_CONFIG",
        *LEGACY_VARIABLES,
        "DATA_DIR",
        "MODEL_DIR",
        "LOG_DIR",
        "METRICS_FILE",
        "CHECKPOINT_DIR",
        "TENSORBOARD_DIR",
        ENV_ROLE,
        ENV_INDEX,
        "POD_IP",
        "POD_NAME",
    }
)
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def log(message: str) -> None:
    print(f"tfjob-bootstrap: {message}", file=sys.stderr, flush=True)


def log_from_handler(message: str) -> None:
    # print() is not reentrant: a signal arriving during another print() would raise.
    os.write(2, f"tfjob-bootstrap: {message}\n".encode())


def split_command(argv: list[str]) -> list[str]:
    """The program to run: everything after `--` (or all arguments when there is no `--`)."""
    return argv[argv.index("--") + 1 :] if "--" in argv else argv


def wait_for_cluster_spec(path: str, timeout_s: float) -> dict[str, object] | None:
    """Poll for the file Airflow writes atomically (temp + rename); None on timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        if os.path.exists(path):
            with open(path, encoding="utf-8") as stream:
                return json.load(stream)
        if time.monotonic() >= deadline:
            return None
        time.sleep(POLL_INTERVAL_S)


def workspace_environment(workspace: str) -> dict[str, str]:
    env = {
        "DATA_DIR": os.path.join(workspace, "data"),
        "MODEL_DIR": os.path.join(workspace, "model"),
        "LOG_DIR": os.path.join(workspace, "logs"),
        "METRICS_FILE": os.path.join(workspace, "metrics.json"),
        "CHECKPOINT_DIR": checkpoints.locate_checkpoint_dir(workspace),
        "TENSORBOARD_DIR": os.path.join(workspace, "tensorboard"),
    }
    for name in ("MODEL_DIR", "LOG_DIR", "CHECKPOINT_DIR", "TENSORBOARD_DIR"):
        os.makedirs(env[name], exist_ok=True)
    return env


def describe_command(command: list[str], env: dict[str, str]) -> str:
    """The command as run, for the log: only PRINTABLE_VARIABLES expanded, the rest as written."""
    withheld: set[str] = set()

    def printable(name: str) -> str | None:
        if name not in env:
            return None
        if name in PRINTABLE_VARIABLES:
            return env[name]
        withheld.add(name)
        return None

    text = shlex.join(expand_with(item, printable) for item in command)
    if withheld:
        text += f" (shown as written: {', '.join(sorted(withheld))}; only TF-on-K8s' own "
        text += "variables are printed expanded)"
    return text


class SignalForwarder:
    """SIGTERM/SIGINT handling for the whole life of the bootstrap.

    As PID 1 of a container the bootstrap gets no default signal actions, so
    it handles both itself: before the program runs a signal ends the
    bootstrap (128+N); once it runs, the signal goes to the program, whose
    own exit then decides.
    """

    def __init__(self) -> None:
        self.child: subprocess.Popen[bytes] | None = None
        self.starting = False
        self.pending: int | None = None

    def install(self) -> None:
        for signum in FORWARDED_SIGNALS:
            signal.signal(signum, self.handle)

    def handle(self, signum: int, _frame: object) -> None:
        name = signal.Signals(signum).name
        if self.child is None:
            if self.starting:  # between fork and `child` being set: deliver right after
                self.pending = signum
                return
            log_from_handler(f"{name} before the program started; stopping")
            sys.exit(128 + signum)
        log_from_handler(f"forwarding {name} to the program (pid {self.child.pid})")
        try:
            self.child.send_signal(signum)
        except ProcessLookupError:
            pass

    def run(self, command: list[str], cwd: str, env: dict[str, str]) -> int:
        """Run the program; return its status (128+N if killed by signal N)."""
        self.starting = True
        try:
            self.child = subprocess.Popen(command, cwd=cwd, env=env)
        finally:
            self.starting = False
        if self.pending is not None:
            self.handle(self.pending, None)
        returncode = self.child.wait()
        return 128 - returncode if returncode < 0 else returncode


def upload_outputs(access_dir: str, model_dir: str, metrics_file: str, patience_s: float) -> int:
    """Upload every file of MODEL_DIR and the metrics; returns the number of files."""
    policy_path = os.path.join(access_dir, UPLOAD_FILE)
    prefix = transfer.load_upload_policy(policy_path).prefix

    def post(key: str, path: str) -> None:
        transfer.post_file_patiently(
            lambda: transfer.load_upload_policy(policy_path), key, path, patience_s, log
        )

    count = 0
    for dirpath, dirnames, filenames in os.walk(model_dir):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            if not os.path.isfile(path):
                continue
            relative = os.path.relpath(path, model_dir).replace(os.sep, "/")
            post(f"{prefix}model/{relative}", path)
            count += 1
    if os.path.isfile(metrics_file):
        post(f"{prefix}metrics.json", metrics_file)
        count += 1
    return count


def report_metrics(metrics_file: str) -> None:
    if not os.path.isfile(metrics_file):
        return
    try:
        with open(metrics_file, encoding="utf-8") as stream:
            metrics = json.load(stream)
    except (OSError, ValueError) as exc:
        log(f"metrics file {metrics_file} is not JSON ({exc}); not reported")
        return
    print(METRICS_MARKER + json.dumps(metrics, separators=(",", ":"), sort_keys=True), flush=True)


def parse_seconds(name: str, default: float) -> float:
    """A positive number of seconds from the environment variable `name`."""
    text = os.environ.get(name, str(default))
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{name}: {text!r} given; a number of seconds is required") from None
    if value <= 0:
        raise ValueError(f"{name}: {text!r} given; it must be positive")
    return value


# Which folder of the environment each sync copies, its grant file, and its switch.
SYNCS = (
    (checkpoint_sync.CHECKPOINTS, "CHECKPOINT_DIR", UPLOAD_FILE, ENV_SYNC_CHECKPOINTS),
    (checkpoint_sync.SUMMARIES, "TENSORBOARD_DIR", TENSORBOARD_GRANT_FILE, ENV_SYNC_TENSORBOARD),
)


def prepare_syncs(env: dict[str, str], access_dir: str) -> list[checkpoint_sync.FolderSync]:
    """The syncs switched on ("1"), checkpoints first; ValueError for a bad interval or
    patience."""
    return [
        checkpoint_sync.FolderSync(
            target,
            env[folder],
            os.path.join(access_dir, grant_file),
            parse_seconds(ENV_CHECKPOINT_INTERVAL, DEFAULT_CHECKPOINT_INTERVAL_S),
            parse_seconds(ENV_UPLOAD_PATIENCE, DEFAULT_UPLOAD_PATIENCE_S),
            log,
        )
        for target, folder, grant_file, switch in SYNCS
        if os.environ.get(switch) == "1"
    ]


def main(argv: list[str] | None = None) -> int:
    command = split_command(sys.argv[1:] if argv is None else argv)
    if not command:
        log("usage: bootstrap.py -- <entrypoint> [args...]")
        return EXIT_USAGE
    workspace = os.environ.get(ENV_WORKSPACE, WORKSPACE_DIR)
    config_dir = os.environ.get(ENV_CONFIG_DIR, CONFIG_DIR)
    access_dir = os.environ.get(ENV_ACCESS_DIR, ACCESS_DIR)
    env = dict(os.environ)
    forwarder = SignalForwarder()
    forwarder.install()

    if os.environ.get(ENV_WAIT_CLUSTERSPEC, "0") == "1":
        try:
            timeout_s = parse_seconds(ENV_CLUSTERSPEC_TIMEOUT, DEFAULT_CLUSTERSPEC_TIMEOUT_S)
        except ValueError as exc:
            log(str(exc))
            return EXIT_USAGE
        path = os.path.join(config_dir, CLUSTERSPEC_FILE)
        log(f"waiting up to {timeout_s:g}s for the ClusterSpec at {path}")
        try:
            spec = wait_for_cluster_spec(path, timeout_s)
            if spec is None:
                log(
                    f"no ClusterSpec at {path} after {timeout_s:g}s (TFJOB_CLUSTERSPEC_TIMEOUT); "
                    "the other replicas did not all start in time, or Airflow could not "
                    "deliver it (see the run's clusterspec task)"
                )
                return EXIT_NO_CLUSTERSPEC
            env.update(cluster_environment(spec))
        except (OSError, ValueError) as exc:
            log(f"bad ClusterSpec at {path}: {exc}")
            return EXIT_BAD_CLUSTERSPEC

    env.update(workspace_environment(workspace))
    code_dir = os.path.join(workspace, "code")
    if not os.path.isdir(code_dir):
        log(f"{code_dir} does not exist; the fetch-bundle init container should have created it")
        return EXIT_USAGE
    try:
        syncs = prepare_syncs(env, access_dir)
    except ValueError as exc:
        log(str(exc))
        return EXIT_USAGE
    log(f"running {describe_command(command, env)}")
    command = expand_argv(command, env)
    for sync in syncs:
        sync.start()
    try:
        returncode = forwarder.run(command, code_dir, env)
    except OSError as exc:
        log(f"cannot start {command[0]!r}: {exc.strerror}")
        return 127 if isinstance(exc, FileNotFoundError) else 126
    else:
        log(f"program exited with {returncode}")
    finally:
        for sync in syncs:
            sync.finish()  # before the model: the grace period may not cover both

    if returncode == 0 and os.environ.get(ENV_UPLOAD_MODEL) == "1":
        try:
            patience_s = parse_seconds(ENV_UPLOAD_PATIENCE, DEFAULT_UPLOAD_PATIENCE_S)
            count = upload_outputs(access_dir, env["MODEL_DIR"], env["METRICS_FILE"], patience_s)
        except (OSError, ValueError, transfer.TransferError) as exc:
            log(f"model upload failed: {exc}")
            report_metrics(env["METRICS_FILE"])
            return EXIT_UPLOAD_FAILED
        log(f"uploaded {count} files of the model and metrics")
    report_metrics(env["METRICS_FILE"])
    return returncode


if __name__ == "__main__":
    sys.exit(main())
