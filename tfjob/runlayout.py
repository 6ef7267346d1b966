"""A run's S3 layout: where each object a run leaves in S3 lies, named in one place.

Why this exists: Airflow's tasks, the TFJob tab, tshell and the pods' grants all
address the same objects under a run's prefix `<output>/runs/<dag_id>/<run_id>/`
(docs/architecture.md, "S3 layout"). Spelled in each module, the names drifted
and the prefix was parsed again from strings wherever it was used. Here the
prefix is an `S3Path` (bucket and key, rendered to `s3://` once) and a
`RunLayout` names everything under it: the bundle snapshot, `model/`,
`checkpoints/`, `logs/<role>-<index>.log`, `tensorboard/<role>-<index>/`,
`metrics.json` and `run.json`;
`locate_output_latest` names the output's `latest` beside the runs. Standard
library only. The pod side (runtime/) receives its keys in its grants.
"""

from __future__ import annotations

from dataclasses import dataclass

from tfjob.s3url import S3_SCHEME, parse_s3_url

RUNS_DIR = "runs"
BUNDLE_SNAPSHOT_FILE = "bundle.tar.gz"
MODEL_DIR = "model/"
CHECKPOINTS_DIR = "checkpoints/"
LOGS_DIR = "logs/"
TENSORBOARD_DIR = "tensorboard/"
METRICS_FILE = "metrics.json"
RUN_MANIFEST_FILE = "run.json"
LATEST_NAME = "latest"
REPLICA_LOG_SUFFIX = ".log"


@dataclass(frozen=True)
class S3Path:
    """An object or a folder in S3: its bucket and key (a folder's key ends in '/')."""

    bucket: str
    key: str = ""

    @classmethod
    def parse(cls, url: str, field: str = "S3 URL") -> S3Path:
        """The path an `s3://bucket/key` URL names; S3UrlError naming `field` when it is none."""
        bucket, key = parse_s3_url(url, field)
        return cls(bucket, key)

    @property
    def uri(self) -> str:
        return f"{S3_SCHEME}{self.bucket}/{self.key}"

    @property
    def prefix(self) -> S3Path:
        """This path as a folder: its key ends in one '/' (the bucket's root stays '')."""
        key = self.key.rstrip("/")
        return S3Path(self.bucket, f"{key}/" if key else "")

    def child(self, name: str) -> S3Path:
        """`name` (a file, or a folder ending in '/') inside this path taken as a folder."""
        return S3Path(self.bucket, self.prefix.key + name)

    def __str__(self) -> str:
        return self.uri


def run_output_prefix(output_uri: str, dag_id: str, run_id: str) -> tuple[str, str]:
    """(bucket, key prefix ending in '/') of a run's outputs: `<output>/runs/<dag_id>/<run_id>/`.

    The DAG is part of it: two DAGs writing to one output (a request file's DAG
    and its tenant's submit DAG) may have runs with equal run_ids
    (`scheduled__<date>`, `manual__<time>`), and those must never share objects.
    """
    for field, value in (("dag_id", dag_id), ("run_id", run_id)):
        if not isinstance(value, str) or not value or "/" in value:
            raise ValueError(f"{field}: {value!r} given; a non-empty id without '/' is required")
    bucket, key = parse_s3_url(output_uri)
    base = key.strip("/")
    prefix = name_run_folder(dag_id, run_id)
    return bucket, f"{base}/{prefix}" if base else prefix


@dataclass(frozen=True)
class RunLayout:
    """Every S3 object of one run, under its prefix `root` (a folder)."""

    root: S3Path

    @classmethod
    def for_run(cls, output_uri: str, dag_id: str, run_id: str) -> RunLayout:
        return cls(S3Path(*run_output_prefix(output_uri, dag_id, run_id)))

    @classmethod
    def parse(cls, run_prefix: str, field: str = "S3 URL") -> RunLayout:
        """The layout under a run prefix URI, with or without its final '/'."""
        return cls(S3Path.parse(run_prefix, field).prefix)

    @classmethod
    def of_checkpoints(cls, checkpoints_uri: str, field: str = "S3 URL") -> RunLayout:
        """The layout of the run whose `checkpoints/` folder the URI names (a warm start's
        source); ValueError when it names no run's checkpoints folder."""
        path = S3Path.parse(checkpoints_uri, field).prefix
        root = path.key[: -len(CHECKPOINTS_DIR)] if path.key.endswith(CHECKPOINTS_DIR) else ""
        parts = root.split("/")
        if len(parts) < 4 or parts[-4] != RUNS_DIR or not parts[-3] or not parts[-2]:
            raise ValueError(
                f"{field}: {checkpoints_uri[:200]!r} given; a run's checkpoints folder "
                f"`.../{RUNS_DIR}/<dag_id>/<run_id>/{CHECKPOINTS_DIR}` is required"
            )
        return cls(S3Path(path.bucket, root))

    @property
    def run_ids(self) -> tuple[str, str]:
        """(dag_id, run_id) of the run this prefix belongs to (`.../runs/<dag_id>/<run_id>/`)."""
        *_, runs, dag_id, run_id, _ = self.root.key.split("/")
        if runs != RUNS_DIR:
            raise ValueError(f"{self.uri!r} is not a run prefix `.../{RUNS_DIR}/<dag>/<run>`")
        return dag_id, run_id

    @property
    def uri(self) -> str:
        """The run prefix as the run description holds it: `s3://bucket/<key>`, no final '/'."""
        return f"{S3_SCHEME}{self.root.bucket}/{self.root.key.rstrip('/')}"

    @property
    def bucket(self) -> str:
        return self.root.bucket

    @property
    def bundle_snapshot(self) -> S3Path:
        return self.root.child(BUNDLE_SNAPSHOT_FILE)

    @property
    def model(self) -> S3Path:
        return self.root.child(MODEL_DIR)

    @property
    def checkpoints(self) -> S3Path:
        return self.root.child(CHECKPOINTS_DIR)

    @property
    def logs(self) -> S3Path:
        return self.root.child(LOGS_DIR)

    @property
    def metrics(self) -> S3Path:
        return self.root.child(METRICS_FILE)

    @property
    def manifest(self) -> S3Path:
        """run.json, the run manifest archive writes."""
        return self.root.child(RUN_MANIFEST_FILE)

    def replica_log(self, role: str, index: int) -> S3Path:
        return self.root.child(replica_log_path(f"{role}-{index}"))

    @property
    def tensorboard(self) -> S3Path:
        """`tensorboard/`: one folder per replica of the event files its TENSORBOARD_DIR held."""
        return self.root.child(TENSORBOARD_DIR)

    def replica_tensorboard(self, role: str, index: int) -> S3Path:
        """`tensorboard/<role>-<index>/`, the only summaries folder that replica may write."""
        return self.root.child(replica_tensorboard_path(f"{role}-{index}"))

    def file(self, path: str) -> S3Path:
        """A file of the run by its path relative to the prefix (`model/x`, `run.json`)."""
        return self.root.child(path)

    def path_of(self, key: str) -> str:
        """The path relative to the prefix of a key under it."""
        return key[len(self.root.key) :]

    def belongs_to(self, dag_id: str, run_id: str) -> bool:
        """Is this the prefix of run `run_id` of DAG `dag_id` (under any output)?"""
        return self.root.key.endswith(name_run_folder(dag_id, run_id))


def replica_log_path(replica: str) -> str:
    """`logs/<replica>.log` (replica: `<role>-<index>`), relative to the run prefix."""
    return f"{LOGS_DIR}{replica}{REPLICA_LOG_SUFFIX}"


def replica_tensorboard_path(replica: str) -> str:
    """`tensorboard/<replica>/` (replica: `<role>-<index>`), relative to the run prefix."""
    return f"{TENSORBOARD_DIR}{replica}/"


def locate_output_runs(output_uri: str) -> S3Path:
    """`<output>/runs/`, the folder of the output's run prefixes."""
    return S3Path.parse(output_uri, "output").child(f"{RUNS_DIR}/")


def locate_output_latest(output_uri: str) -> S3Path:
    """`<output>/latest`, the pointer to the output's newest published run."""
    return S3Path.parse(output_uri, "output").child(LATEST_NAME)


def name_run_folder(dag_id: str, run_id: str) -> str:
    """`runs/<dag_id>/<run_id>/`, how a run's prefix ends under its output."""
    return f"{RUNS_DIR}/{dag_id}/{run_id}/"
