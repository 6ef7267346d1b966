"""Restarting a run's gang within the same Airflow run, as its restart policy decides.

Why this module: `train` (operators/train.py) waits in the triggerer and
resumes in `finish` when the trigger reports a decision. When a replica
failed, the pure verdict (tfjob/restart_policy.py) says RESTART or FAIL; this
module holds the rest of a restart, so that `train` stays about waiting and
reporting:

- the bookkeeping of attempts (one per gang, `tfjob.attempts.Attempt`):
  closing the current one with its verdict, opening the next;
- `start_new_gang`, the imperative part, in this order:
  1. stop the failed gang: every pod deleted with its own grace period, and
     wait until the API server removed them (`operators.gang.stop_gang`).
     The new gang is created only after the old pods are confirmed gone: no
     run ever has two gangs' pods alive at once;
  2. clear the failed attempt's `model/` and `metrics.json` from S3: they are
     a try's outputs (an owner that exited 0 just before a worker failed may
     have uploaded them), as for a new try of `launch`;
  3. create the new gang under the same pod names (below), each pod carrying
     the attempts so far;
  4. wait until every pod runs with an IP (`operators.gang.await_gang_start`,
     the launch's own verdict and reasons, refreshing the S3 grants);
  5. deliver the new ClusterSpec (`operators.delivery`, retried per replica).

Pod names: a new gang reuses `<runkey>-<role>-<index>`. Every reader of a
run derives its pod names from the run key alone (`RunInfo.pod_names`: the
trigger, the delivery, archive and its model recovery, tshell, the janitor),
so the same names keep all of them right without knowing about attempts, and
the names are free because step 1 waited for the old pods to be gone (a
create that still finds one is an error, never a silent reuse). The price:
the failed gang's pod logs go with its pods, so `train` writes them into its
task log before it restarts.

Where the attempts live, so that each place that needs them survives what
may happen to Airflow:

- the deferral's kwargs (`next_kwargs`, kept with the task instance in
  Airflow's database): `finish` gets them after a triggerer restart and in
  whatever worker it resumes;
- the annotation `tfjob.io/attempts` on every pod of a restarted gang: a new
  try of `train` (Airflow can lose a try; its XComs are cleared and it has no
  `next_kwargs`) re-attaches to the gang and reads the history there; so does
  `archive` when `train` was killed;
- `train`'s XCom `attempts`, pushed at each restart and at the end: run.json
  (archive), `tshell status` and the TFJob view read it.

Checkpoints: between steps 2 and 3 the run's `checkpoints/` (which the
model owner's bootstrap fills, one last time within its grace period in
step 1) are handed to the new gang in `restore.json` (operators/restore.py);
its replicas' init containers restore them into `CHECKPOINT_DIR`, and the
attempt records `restored_checkpoint_step`. A run without checkpoints
restarts its programs from scratch.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from kubernetes import client as k8s

from operators import gang
from operators.delivery import deliver_run_cluster_spec
from operators.grants import plan_grants
from operators.restore import stage_run_checkpoints, write_restore
from operators.runinfo import RunInfo
from operators.runoutputs import clear_run_outputs
from operators.settings import UPLOAD_PATIENCE_SECONDS
from tfjob.attempts import Attempt, AttemptOutcome
from tfjob.jsontypes import JsonObject
from tfjob.manifests import build_pod_manifests
from tfjob.naming import ANNOTATION_ATTEMPTS
from tfjob.records.replicas import ReplicaStatus, TrainingEvent
from tfjob.records.run import GrantPlan
from tfjob.restart_policy import (
    INFRASTRUCTURE_KINDS,
    Decision,
    ReplicaFailure,
    RestartPolicy,
    RestartVerdict,
    judge_restart,
)


def now() -> datetime:
    return datetime.now(UTC)


# --- the attempts: pure -------------------------------------------------------------------


def first_attempt(started_at: float | None, restored_step: int | None = None) -> list[Attempt]:
    """The history of a run whose first gang still runs (`started_at`: launch's `ready_at`;
    `restored_step`: the step of its warm start)."""
    started = datetime.fromtimestamp(started_at, UTC) if started_at is not None else None
    return [Attempt(1, started=started, restored_checkpoint_step=restored_step)]


def attempts_to_payload(attempts: Sequence[Attempt]) -> list[JsonObject]:
    """JSON-ready, for XCom, next_kwargs, the pods' annotation and run.json."""
    return [attempt.to_payload() for attempt in attempts]


def attempts_from_payload(payload: Iterable[Mapping[str, object]]) -> list[Attempt]:
    return [Attempt.from_payload(item) for item in payload]


def recall_attempts(pods: Iterable[Mapping[str, object]]) -> list[Attempt] | None:
    """The history a restarted gang's pods carry; None for a first gang (no annotation).

    Every pod of a gang carries the same history; the longest is taken, so a
    pod of an older gang still terminating cannot shorten it.
    """
    best: list[Attempt] | None = None
    for pod in pods:
        text = ((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_ATTEMPTS)
        if not text:
            continue
        try:
            found = attempts_from_payload(json.loads(text))
        except (TypeError, ValueError):
            continue  # not ours to judge: the history is then the default one
        if found and (best is None or len(found) > len(best)):
            best = found
    return best


def annotate_attempts(manifest: JsonObject, attempts: Sequence[Attempt]) -> JsonObject:
    """`manifest` (a pod) with the run's attempts so far in its annotations."""
    metadata = manifest.setdefault("metadata", {})
    annotations = metadata.setdefault("annotations", {})
    annotations[ANNOTATION_ATTEMPTS] = json.dumps(attempts_to_payload(attempts), sort_keys=True)
    return manifest


def close_attempt(
    attempts: Sequence[Attempt],
    outcome: AttemptOutcome,
    *,
    reason: str | None = None,
    when: datetime | None = None,
) -> list[Attempt]:
    """The history with the current (last) attempt ended by `outcome`."""
    *earlier, current = attempts
    ended = replace(
        current,
        outcome=outcome,
        ended=when or now(),
        reason=reason if reason is not None else current.reason,
    )
    return [*earlier, ended]


def choose_failure(event: TrainingEvent) -> ReplicaFailure:
    """The failure the verdict judges: a replica the infrastructure took (deleted, evicted,
    its node lost; ps included) when the event shows one, else the replica that ended
    the wait (`event.failed`).

    A chief that exits 1 because its worker vanished is a consequence, not the
    cause: a pod being deleted keeps running through its grace period (its
    deletionTimestamp set, no exit yet) while the others may already fail on
    the lost connection, and `judge_training` names the first failed replica
    in role order.
    """
    for replica in event.replicas:
        failure = ReplicaFailure.from_replica(replica)
        if failure.kind in INFRASTRUCTURE_KINDS:
            return failure
    return ReplicaFailure.from_replica(event.failed)


def judge_failure(
    policy: RestartPolicy,
    attempts: Sequence[Attempt],
    failure: ReplicaFailure,
    *,
    when: datetime | None = None,
) -> tuple[RestartVerdict, list[Attempt]]:
    """The verdict on the current attempt, ended by `failure`, and the history after it:
    the current attempt ended (restarted or failed) and, on RESTART, the next one opened
    (running, started `when`)."""
    when = when or now()
    current = attempts[-1]
    verdict = judge_restart(policy, current.number, failure)
    ended = Attempt.ended_by(
        current.number,
        verdict,
        failure,
        started=current.started,
        ended=when,
        restored_checkpoint_step=current.restored_checkpoint_step,
    )
    history = [*attempts[:-1], ended]
    if verdict.decision is Decision.RESTART:
        history.append(Attempt(verdict.next_attempt or current.number + 1, started=when))
    return verdict, history


def judge_failed_attempt(
    policy: RestartPolicy,
    attempts: Sequence[Attempt],
    event: TrainingEvent,
    *,
    when: datetime | None = None,
) -> tuple[RestartVerdict, list[Attempt]]:
    """The verdict on the current attempt, which the trigger's `event` says failed, and
    the history after it (`judge_failure`)."""
    return judge_failure(policy, attempts, choose_failure(event), when=when)


def judge_failed_start(
    policy: RestartPolicy,
    attempts: Sequence[Attempt],
    failed: Iterable[ReplicaStatus],
    *,
    when: datetime | None = None,
) -> tuple[RestartVerdict, list[Attempt]] | None:
    """The verdict on a gang that did not start because the infrastructure took one of its
    replicas (deleted, evicted, its node lost): judged as in training. None when none was
    taken (an image, a program or a scheduler's verdict): such a gang would fail again."""
    losses = [ReplicaFailure.from_replica(replica) for replica in failed]
    taken = [failure for failure in losses if failure.kind in INFRASTRUCTURE_KINDS]
    return judge_failure(policy, attempts, taken[0], when=when) if taken else None


# --- the new gang: I/O ----------------------------------------------------------------------


def clear_attempt_outputs(run: RunInfo) -> list[str]:
    """Delete the run prefix's `model/` and `metrics.json` (the run's tenant's S3 connection)."""
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook

    return clear_run_outputs(S3Hook(aws_conn_id=run.aws_conn_id).get_conn(), run.layout)


def create_gang(
    api: k8s.CoreV1Api, run: RunInfo, attempts: Sequence[Attempt], log: logging.Logger
) -> list[str]:
    """Create every replica pod of `run`, annotated with `attempts`; return the pod names."""
    bodies = [
        annotate_attempts(manifest, attempts)
        for manifest in build_pod_manifests(run.request, run.identity(), UPLOAD_PATIENCE_SECONDS)
    ]
    return gang.create_replica_pods(
        lambda body: api.create_namespaced_pod(run.namespace, body), bodies, log
    )


@dataclass(frozen=True)
class NewGang:
    """A started gang: the run's attempts (the last one saying what it restored) and
    its ClusterSpec (None in single mode)."""

    attempts: list[Attempt]
    cluster: JsonObject | None


def stage_restore(
    api: k8s.CoreV1Api, run: RunInfo, attempts: Sequence[Attempt], expires: int, log: logging.Logger
) -> list[Attempt]:
    """Hand the next gang the run's checkpoints (operators/restore.py); the attempts with
    the step restored on the last one."""
    staged = stage_run_checkpoints(run, run.layout.checkpoints, expires)
    write_restore(api, run, staged)
    log.info("attempt %d: %s", attempts[-1].number, staged.describe())
    *earlier, current = attempts
    return [*earlier, replace(current, restored_checkpoint_step=staged.step)]


def start_new_gang(
    api: k8s.CoreV1Api,
    run: RunInfo,
    attempts: Sequence[Attempt],
    plan: GrantPlan | None,
    log: logging.Logger,
) -> NewGang:
    """Stop the failed gang, start the next (the last of `attempts`) from the run's
    checkpoints, give it its ClusterSpec (see the module docstring).

    Raises what failed: `gang.GangStopError` (the old pods would not go: nothing new
    was created), `gang.GangStartError`, `delivery.DeliveryError`, `RestoreTooLarge`,
    or an API error.
    """
    number = attempts[-1].number
    gang.stop_gang(api, run, log)  # the owner's last checkpoint sync runs in its grace period
    cleared = clear_attempt_outputs(run)
    if cleared:
        log.info("cleared the failed attempt's outputs: %s", ", ".join(cleared))
    expires = plan.lifetime if plan is not None else plan_grants(run, "").lifetime
    attempts = stage_restore(api, run, attempts, expires, log)
    made = create_gang(api, run, attempts, log)
    log.info("attempt %d: created %s", number, ", ".join(made))
    endpoints = gang.await_gang_start(api, run, plan, log)
    log.info("attempt %d: every replica runs: %s", number, endpoints.to_payload())
    if not run.request.is_distributed:
        return NewGang(attempts, None)
    return NewGang(attempts, deliver_run_cluster_spec(api, run, endpoints))


__all__ = [
    "annotate_attempts",
    "attempts_from_payload",
    "attempts_to_payload",
    "choose_failure",
    "NewGang",
    "clear_attempt_outputs",
    "close_attempt",
    "create_gang",
    "first_attempt",
    "judge_failed_attempt",
    "judge_failed_start",
    "judge_failure",
    "recall_attempts",
    "stage_restore",
    "start_new_gang",
]
