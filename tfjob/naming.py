"""One way to name and label every Kubernetes object of a run.

Names are deterministic (a retry of the same Airflow run finds the same pods),
valid DNS-1123 labels and at most 63 characters; when something must be
shortened, the job part is cut and a stable hash keeps names distinct.
The labels here are what operators and tshell select on to find and delete
every object of a run, so they are defined once, in this module. The ids a run
has in Airflow (DAG, tasks, XCom keys) are in `pipeline_ids.py`.
"""

import hashlib
import re

from runtime.protocol import TENSORBOARD_GRANT_KEY
from tfjob.request.model import Role

MAX_DNS_LABEL = 63
# Enough for "-<h16>" so that "<runkey>-evaluator-<index>" fits in 63 characters
# (32 + 1 + 16 + 12 = 61 with a one-digit index; longer indices cut the job part).
MAX_JOB_PART = 32
# Hex digits of the hash a shortened name keeps of what was cut.
RUN_HASH_LENGTH = 8
# Hex digits of sha256(dag_id\nrun_id) in the run key: 64 bits. Users choose run ids
# through the REST API, so the key must not be found by brute force (2^32 hashes are
# an afternoon's work; 2^64 are not).
RUN_KEY_HASH_LENGTH = 16
# Hex digits of the same hash in the `tfjob.io/run-hash` label: 192 bits, which is
# what makes a run's label selector name this run and no other.
RUN_LABEL_HASH_LENGTH = 48
# A shortened name keeps a hash of what was cut; below this there is no room for it.
_MIN_LEN_FOR_HASH = RUN_HASH_LENGTH + 2

MANAGED_BY = "tfjob"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_JOB = "tfjob.io/job"
LABEL_RUN = "tfjob.io/run"
LABEL_RUN_HASH = "tfjob.io/run-hash"
LABEL_TENANT = "tfjob.io/tenant"
LABEL_ROLE = "tfjob.io/role"
LABEL_INDEX = "tfjob.io/index"
ANNOTATION_RUN_ID = "tfjob.io/run-id"
ANNOTATION_DAG_ID = "tfjob.io/dag-id"
# On the pods of a gang that the restart policy started (operators/restart.py): the
# run's attempts so far as JSON, the last one this gang's. A new try of `train` and
# `archive` find the history where the gang is; a run's first gang has none.
ANNOTATION_ATTEMPTS = "tfjob.io/attempts"

NAMESPACE_PREFIX = "tfjob-"
RUNTIME_SUFFIX = "runtime"
ACCESS_SUFFIX = "access"
UPLOAD_SUFFIX = "upload"
TENSORBOARD_SUFFIX = "tensorboard"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_INVALID_DNS_CHARS = re.compile(r"[^a-z0-9-]+")
_DASHES = re.compile(r"-{2,}")
_ROLES = frozenset(role.value for role in Role)
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


def hash_text(text: str, length: int = RUN_HASH_LENGTH) -> str:
    """The first `length` hex digits of sha256(text)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]


def sanitize_dns_label(text: str, max_len: int = MAX_DNS_LABEL) -> str:
    """`text` as a DNS-1123 label of at most `max_len` characters; never empty.

    Lowercases, turns runs of invalid characters into '-', trims '-' at both
    ends. When the result is too long it is cut and, if `max_len` leaves room,
    ends in '-' and a stable hash of the whole original text.
    """
    if not 1 <= max_len <= MAX_DNS_LABEL:
        raise ValueError(f"max_len {max_len} given; allowed: 1 to {MAX_DNS_LABEL}")
    label = _DASHES.sub("-", _INVALID_DNS_CHARS.sub("-", text.lower())).strip("-")
    if not label:
        return hash_text(text, min(RUN_HASH_LENGTH, max_len))
    if len(label) <= max_len:
        return label
    if max_len < _MIN_LEN_FOR_HASH:
        return label[:max_len].rstrip("-") or hash_text(text, max_len)
    head = label[: max_len - RUN_HASH_LENGTH - 1].rstrip("-")
    return f"{head}-{hash_text(text)}" if head else hash_text(text)


def _run_identity(dag_id: str, run_id: str) -> str:
    # Airflow ids never contain a newline, so the hashed text is unambiguous.
    return f"{dag_id}\n{run_id}"


def run_key(job: str, dag_id: str, run_id: str) -> str:
    """`<job>-<first 16 hex of sha256(dag_id + "\\n" + run_id)>`: the name stem of a run's objects.

    A run is identified by its DAG and its run id together: Airflow makes run ids
    unique per DAG only, and one tenant's namespace holds runs of several DAGs
    (its request DAGs and its submit DAG), where `manual__<time>` may repeat.
    64 bits: a run id chosen to give a colleague's key costs ~2^64 hashes. Even
    then the key is only a name: what selects a run's objects for deletion is
    `run_hash` (`run_selector`).
    """
    identity = _run_identity(dag_id, run_id)
    return f"{sanitize_dns_label(job, MAX_JOB_PART)}-{hash_text(identity, RUN_KEY_HASH_LENGTH)}"


def run_hash(dag_id: str, run_id: str) -> str:
    """The `tfjob.io/run-hash` label of a run's objects: 48 hex digits of the run's sha256."""
    return hash_text(_run_identity(dag_id, run_id), RUN_LABEL_HASH_LENGTH)


def _fit_name(run_key: str, suffix: str) -> str:
    """`<run_key>-<suffix>`, with the job part of the key cut when over 63 characters."""
    name = f"{run_key}-{suffix}"
    if len(name) <= MAX_DNS_LABEL:
        return name
    job_part, _, key_hash = run_key.rpartition("-")
    room = MAX_DNS_LABEL - len(suffix) - len(key_hash) - 2
    if room < 1 or not job_part:
        raise ValueError(
            f"run key {run_key!r} with suffix {suffix!r} cannot fit in {MAX_DNS_LABEL} characters"
        )
    return f"{job_part[:room].rstrip('-') or 'x'}-{key_hash}-{suffix}"


def pod_name(run_key: str, role: Role, index: int) -> str:
    """`<runkey>-<role>-<index>`, at most 63 characters."""
    if index < 0:
        raise ValueError(f"replica index {index} given; allowed: 0 or more")
    return _fit_name(run_key, f"{Role(role).value}-{index}")


def parse_pod_name(name: str) -> tuple[Role, int] | None:
    """(role, index) of a replica pod's name `<runkey>-<role>-<index>`; None for any other name.

    The inverse of `pod_name`: shortening cuts the job part only, so the role and
    index at the end are always whole.
    """
    head, _, index = name.rpartition("-")
    run_key, _, role = head.rpartition("-")
    if not run_key or not index.isdigit() or role not in _ROLES:
        return None
    return Role(role), int(index)


def configmap_name(run_key: str) -> str:
    """The run's ConfigMap holding the runtime files: `<runkey>-runtime`."""
    return _fit_name(run_key, RUNTIME_SUFFIX)


def secret_name(run_key: str) -> str:
    """The run's Secret holding the bundle's presigned GET URL: `<runkey>-access`."""
    return _fit_name(run_key, ACCESS_SUFFIX)


def upload_secret_name(run_key: str) -> str:
    """The run's Secret holding the model owner's upload grants: `<runkey>-upload`."""
    return _fit_name(run_key, UPLOAD_SUFFIX)


def tensorboard_secret_name(run_key: str, shard: int) -> str:
    """The run's Secret holding shard `shard` of its replicas' summaries grants:
    `<runkey>-tensorboard-<shard>`."""
    return _fit_name(run_key, f"{TENSORBOARD_SUFFIX}-{shard}")


def name_replica(role: Role | str, index: int) -> str:
    """`<role>-<index>`: a replica as logs, S3 folders and grants name it."""
    return f"{Role(role).value}-{index}"


def tensorboard_grant_key(replica: str) -> str:
    """The key of the Secret holding `replica`'s summaries grant (`<role>-<index>`)."""
    return TENSORBOARD_GRANT_KEY.format(replica=replica)


def label_value(text: str) -> str:
    """`text` unchanged when it is a valid label value, else sanitized to one."""
    if len(text) <= MAX_DNS_LABEL and _LABEL_VALUE.match(text):
        return text
    return sanitize_dns_label(text)


def run_labels(job: str, run_key: str, tenant: str, run_hash: str) -> dict[str, str]:
    """The labels every object of a run carries (`run_hash`: `run_hash(dag_id, run_id)`)."""
    return {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_JOB: label_value(job),
        LABEL_RUN: run_key,
        LABEL_RUN_HASH: run_hash,
        LABEL_TENANT: label_value(tenant),
    }


def replica_labels(
    job: str, run_key: str, tenant: str, run_hash: str, role: Role, index: int
) -> dict[str, str]:
    """The labels of one replica pod: the run's labels plus role and index."""
    return {
        **run_labels(job, run_key, tenant, run_hash),
        LABEL_ROLE: Role(role).value,
        LABEL_INDEX: str(index),
    }


def run_selector(run_key: str, run_hash: str | None = None) -> str:
    """Label selector matching every object of one run.

    With `run_hash` (what every delete and wait of a run uses) it matches this run's
    objects only, even those of another run whose key is the same; without it, every
    object labelled with the key (reads, and the search for such a collision).
    """
    selector = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_RUN}={run_key}"
    return f"{selector},{LABEL_RUN_HASH}={run_hash}" if run_hash else selector


def job_selector(job: str) -> str:
    """Label selector matching every object of every run of one job."""
    return f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_JOB}={label_value(job)}"


def replica_selector(run_key: str, role: Role, index: int, run_hash: str | None = None) -> str:
    """Label selector matching the one pod of a replica."""
    base = run_selector(run_key, run_hash)
    return f"{base},{LABEL_ROLE}={Role(role).value},{LABEL_INDEX}={index}"


def tenant_namespace(tenant: str) -> str:
    """The namespace of a tenant's runs: `tfjob-<tenant>`."""
    return f"{NAMESPACE_PREFIX}{tenant}"
