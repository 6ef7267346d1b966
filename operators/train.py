"""The train task: wait (deferred) for the end of training, then report it.

`execute` hands the wait to `TrainingTrigger` in the triggerer, so a long
training holds no worker slot; a training already decided when `train`
starts (a short job, or a new try) is reported at once, without deferring.

Airflow 3.3's scheduler fails a deferred task whose trigger event it handles
before the executor's report of the deferring process's exit (state mismatch,
apache/airflow#66374, #67287, #72716). The trigger never fires within
`DEFER_SETTLE_SECONDS` of the deferral, which makes that rare; when a busy
scheduler is later still, Airflow retries `train` (the DAG gives it retries)
and the new try finds the training decided and reports it. A training that
failed, or passed its deadline, raises `TrainingFailed`, which Airflow never
retries: retries cover only tries lost to Airflow.

When the trigger fires, `finish` resumes in a worker and, whatever the outcome:

- writes into this task's log the lines of every replica's log that the
  trigger did not stream live (each prefixed `[role-index]`; the trigger
  says how many it logged per replica), so every line appears once; of
  each log at most TRAIN_LOG_MAX_BYTES, its lines cut as the trigger cuts
  them (a replica's log is untrusted: operators/logreads.py);
- pushes the replica states (`replicas`) and the metrics from the
  `TFJOB_METRICS` line (`metrics`, also the return value) to XCom;
- on failure raises with the failed replica, its exit code and last log lines.

A failed chief or worker is first judged by the run's restart policy
(`max_restarts`, `restart_on`; tfjob/restart_policy.py). On RESTART, `finish`
stops the failed gang (its pods deleted with their grace period, and gone),
starts a new gang under the same names, delivers it a new ClusterSpec, and
defers again with a fresh trigger (operators/restart.py); on FAIL, or when
the new gang cannot start, it raises naming every attempt's cause. The
attempts travel in the deferral's kwargs and on the restarted gang's pods,
and are pushed to XCom `attempts` (run.json, `tshell status`).

A blinking Kubernetes API (operators/transient.py) does not fail `train`:
the first look at the pods is skipped (the trigger lists them itself), and
reading the logs in `finish` is asked again with back-off.

`on_kill` deletes every object of the run when the task is killed before the
training is decided (Airflow calls it when the task is killed while it runs in
a worker; while deferred, teardown does the job). Killed in `finish`, it leaves
them: the training is over, and a new try or teardown needs the pods' logs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseOperator, Context
from airflow.sdk.exceptions import AirflowFailException
from kubernetes import client as k8s

from operators import kubeobjects, restart
from operators.errors import PipelineError
from operators.logreads import read_log_head, read_newest_lines
from operators.podlogs import decode_log_line, extract_metrics, split_bounded_lines, tail_lines
from operators.replicas import deciding_replicas
from operators.runinfo import RunInfo, pull_run
from operators.runobjects import delete_when_killed
from operators.settings import (
    ARCHIVE_LOG_MAX_BYTES,
    DEFER_SETTLE_SECONDS,
    FAILURE_LOG_LINES,
    KUBERNETES_CONN_ID,
    LOG_END_LINES,
    LOG_TAIL_MAX_BYTES,
    TRAIN_DEADLINE_MARGIN_SECONDS,
    TRAIN_LOG_MAX_BYTES,
)
from operators.transient import call_with_retries, describe_api_error, is_transient
from operators.triggers import TrainingTrigger, decide_training
from runtime.protocol import EXIT_UPLOAD_FAILED, MAIN_CONTAINER
from tfjob.attempts import AttemptOutcome, describe_run_failure
from tfjob.jsontypes import JsonObject
from tfjob.pipeline_ids import (
    ATTEMPTS_KEY,
    FINISHED_AT_KEY,
    GRANTS_KEY,
    LAUNCH_TASK,
    METRICS_KEY,
    READY_AT_KEY,
    RESTARTED_CLUSTER_KEY,
    WARM_START_KEY,
)
from tfjob.records.outcomes import StagedWarmStart
from tfjob.records.replicas import TrainingEvent, TrainingState, replicas_to_payload
from tfjob.records.run import GrantPlan
from tfjob.restart_policy import Decision, RestartPolicy

# Reading the replicas' logs after the training is decided rides out an API blink this long.
LOG_READ_PATIENCE_SECONDS = 120.0


@dataclass(frozen=True)
class LogEnd:
    """What `finish` keeps of a replica's log: its last lines and its metrics line."""

    tail: str
    metrics: JsonObject | None


class TrainingFailed(PipelineError, AirflowFailException):
    """A replica that decides the run failed, or the run passed its deadline: final."""


class TrainingWaitOperator(BaseOperator):
    """Wait for the end of training in the triggerer and report it (see the module docstring)."""

    def __init__(self, *, kubernetes_conn_id: str = KUBERNETES_CONN_ID, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kubernetes_conn_id = kubernetes_conn_id
        self._run: RunInfo | None = None
        self._decided = False

    def _client(self) -> Any:
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

        return KubernetesHook(conn_id=self.kubernetes_conn_id).core_v1_client

    def execute(self, context: Context) -> JsonObject | None:
        run = self._run = pull_run(context)
        request = run.request
        deciding = deciding_replicas(
            request.success_policy, run.replica_ids(), single=not request.is_distributed
        )
        deadline = time.time() + request.active_deadline + TRAIN_DEADLINE_MARGIN_SECONDS
        decided = None
        attempts = None  # unknown until the pods are seen: finish looks then
        try:
            listed = kubeobjects.list_run_pods(self._client(), run.namespace, run.selector)
        except Exception as exc:
            if not is_transient(exc):
                raise
            # The trigger lists again (and rides out the blink): defer without this first look.
            self.log.warning(
                "could not look at the pods before deferring (%s)", describe_api_error(exc)
            )
        else:
            pods = {pod["metadata"]["name"]: pod for pod in listed}
            decided = decide_training(pods, list(deciding), run.pod_names(), deadline)
            attempts = self._recall_attempts(context, listed)
            context["ti"].xcom_push(key=ATTEMPTS_KEY, value=attempts)
        if decided is not None:
            self.log.info("training of run %s was decided before train started", run.run_key)
            return self.finish(context, decided.to_payload(), attempts=attempts)
        self._defer(context, run, attempts)

    def _defer(self, context: Context, run: RunInfo, attempts: list[JsonObject] | None) -> None:
        """Hand the wait for the current gang to a fresh trigger; `finish` gets `attempts`."""
        request = run.request
        deciding = deciding_replicas(
            request.success_policy, run.replica_ids(), single=not request.is_distributed
        )
        wait = request.active_deadline + TRAIN_DEADLINE_MARGIN_SECONDS
        number = restart.attempts_from_payload(attempts)[-1].number if attempts else 1
        self.log.info(
            "waiting for training of run %s (attempt %d of %d): success when %s exit 0 "
            "(ps never count); deadline %ss",
            run.run_key,
            number,
            request.max_restarts + 1,
            ", ".join(deciding),
            wait,
        )
        grants = context["ti"].xcom_pull(task_ids=LAUNCH_TASK, key=GRANTS_KEY)
        self.defer(
            trigger=TrainingTrigger(
                namespace=run.namespace,
                selector=run.selector,
                expected_pods=run.pod_names(),
                deciding=list(deciding),
                deadline=time.time() + wait,
                kubernetes_conn_id=self.kubernetes_conn_id,
                not_before=time.time() + DEFER_SETTLE_SECONDS,
                grants=grants,
            ),
            method_name="finish",
            # In next_kwargs, kept with the task instance: survives the triggerer and workers.
            kwargs={"attempts": attempts},
            timeout=timedelta(seconds=wait + TRAIN_DEADLINE_MARGIN_SECONDS),
        )

    def _recall_attempts(self, context: Context, pods: list[JsonObject]) -> list[JsonObject]:
        """The run's attempts: those a restarted gang's pods carry, else the first gang's."""
        found = restart.recall_attempts(pods)
        if found is None:
            ti = context["ti"]
            warm = ti.xcom_pull(task_ids=LAUNCH_TASK, key=WARM_START_KEY)
            found = restart.first_attempt(
                ti.xcom_pull(task_ids=LAUNCH_TASK, key=READY_AT_KEY),
                restored_step=StagedWarmStart.from_payload(warm).step if warm else None,
            )
        return restart.attempts_to_payload(found)

    def _read_logs(
        self, run: RunInfo, api: k8s.CoreV1Api, event: TrainingEvent
    ) -> dict[str, LogEnd]:
        """Each replica's log end; the lines the trigger did not stream go into this task's log.

        At most TRAIN_LOG_MAX_BYTES of each log is read and copied (lines cut at
        LOG_LINE_MAX_BYTES, as the trigger cut them); of a longer log, the last
        lines are read apart (LOG_TAIL_MAX_BYTES) for the metrics and the failure.
        Only that end of each log is kept while the others are read.
        """
        ends: dict[str, LogEnd] = {}
        streamed = event.streamed
        for replica in event.replicas:
            replica_id = replica.replica_id
            pod = replica.pod
            head = call_with_retries(
                lambda pod=pod: read_log_head(
                    api, run.namespace, pod, MAIN_CONTAINER, TRAIN_LOG_MAX_BYTES
                ),
                deadline=time.monotonic() + LOG_READ_PATIENCE_SECONDS,
                what=f"reading the log of {replica_id}",
                log=self.log,
            )
            # The trigger logged the first `streamed` lines live: only the rest here.
            for line in split_bounded_lines(head.data)[streamed.get(replica_id, 0) :]:
                self.log.info("[%s] %s", replica_id, decode_log_line(line))
            end = head.data.decode("utf-8", errors="replace")
            if head.truncated:
                self.log.info(
                    "[%s] \u2026 [log cut here after %d bytes: the archive keeps up to %d "
                    "(logs/%s.log)]",
                    replica_id,
                    TRAIN_LOG_MAX_BYTES,
                    ARCHIVE_LOG_MAX_BYTES,
                    replica_id,
                )
                end = call_with_retries(
                    lambda pod=pod: read_newest_lines(
                        api, run.namespace, pod, MAIN_CONTAINER, LOG_END_LINES, LOG_TAIL_MAX_BYTES
                    ),
                    deadline=time.monotonic() + LOG_READ_PATIENCE_SECONDS,
                    what=f"reading the last lines of {replica_id}",
                    log=self.log,
                )
            ends[replica_id] = LogEnd(tail_lines(end, FAILURE_LOG_LINES), extract_metrics(end))
        return ends

    def finish(
        self,
        context: Context,
        event: JsonObject,
        attempts: list[JsonObject] | None = None,
    ) -> JsonObject | None:
        """Where the wait ends: `event` is a `TrainingEvent`'s payload (from the triggerer)."""
        result = TrainingEvent.from_payload(event)
        self._decided = True
        run = self._run = pull_run(context)
        api = self._client()
        ti = context["ti"]
        if attempts is None:  # deferred without a first look at the pods: look now
            listed = call_with_retries(
                lambda: kubeobjects.list_run_pods(api, run.namespace, run.selector),
                deadline=time.monotonic() + LOG_READ_PATIENCE_SECONDS,
                what=f"listing the pods of run {run.run_key}",
                log=self.log,
            )
            attempts = self._recall_attempts(context, listed)
        history = restart.attempts_from_payload(attempts)
        ends = self._read_logs(run, api, result)
        failed = result.failed
        verdict = None
        if result.state is TrainingState.FAILED and failed:
            verdict, history = restart.judge_failed_attempt(
                RestartPolicy.of(run.request), history, result
            )
            if verdict.decision is Decision.RESTART:
                return self._restart(context, run, api, history, verdict)
        elif result.state is TrainingState.SUCCEEDED:
            history = restart.close_attempt(history, AttemptOutcome.SUCCEEDED)
        else:
            history = restart.close_attempt(
                history,
                AttemptOutcome.FAILED,
                reason=f"did not finish within active_deadline={run.request.active_deadline}s",
            )
        metrics = next((end.metrics for end in ends.values() if end.metrics is not None), None)
        ti.xcom_push(key="replicas", value=replicas_to_payload(result.replicas))
        ti.xcom_push(key=FINISHED_AT_KEY, value=time.time())
        ti.xcom_push(key=ATTEMPTS_KEY, value=restart.attempts_to_payload(history))
        if metrics is not None:
            ti.xcom_push(key=METRICS_KEY, value=metrics)
            self.log.info("metrics: %s", metrics)

        if result.state is TrainingState.SUCCEEDED:
            self.log.info(
                "training succeeded (%s)%s",
                ", ".join(result.deciding),
                f" at attempt {history[-1].number}" if len(history) > 1 else "",
            )
            for replica in result.replicas:
                if replica.owns_model and replica.exit_code == EXIT_UPLOAD_FAILED:
                    self.log.warning(
                        "%s trained but could not upload its model; archive copies it out "
                        "of pod %s",
                        replica.replica_id,
                        replica.pod,
                    )
            return metrics
        if result.state is TrainingState.FAILED and failed:
            replica_id = failed.replica_id
            detail = (
                f"exit code {failed.exit_code}"
                if failed.exit_code is not None
                else f"{failed.reason or 'failed'}: {failed.message or ''}".rstrip(": ")
            )
            tail = ends[replica_id].tail if replica_id in ends else ""
            quoted = "\n".join(f"  [{replica_id}] {line}" for line in tail.splitlines())
            raise TrainingFailed(
                f"{describe_run_failure(history, verdict)}\n"
                f"replica {replica_id} (pod {failed.pod}) failed with {detail}; "
                f"last {FAILURE_LOG_LINES} log lines:\n{quoted or '  (no log)'}"
            )
        api_error = result.api_error
        raise TrainingFailed(
            f"training of run {run.run_key} did not finish within active_deadline="
            f"{run.request.active_deadline}s (+{TRAIN_DEADLINE_MARGIN_SECONDS}s)"
            + (f"; the Kubernetes API was still failing then ({api_error})" if api_error else "")
            + (f"; {describe_run_failure(history)}" if len(history) > 1 else "")
        )

    def _restart(
        self,
        context: Context,
        run: RunInfo,
        api: k8s.CoreV1Api,
        history: list[object],
        verdict: Any,
    ) -> None:
        """Stop the failed gang, start the next with its ClusterSpec, defer again.

        The next gang is created only once the failed one's pods are gone
        (operators/restart.py). When it cannot start, the run fails naming
        every attempt: a gang that did not start is not restarted again.
        """
        ti = context["ti"]
        self._decided = False  # a new gang is coming: killed now, on_kill deletes the run
        self.log.warning("%s", verdict.reason)
        ti.xcom_push(key=ATTEMPTS_KEY, value=restart.attempts_to_payload(history))
        payload = ti.xcom_pull(task_ids=LAUNCH_TASK, key=GRANTS_KEY)
        plan = GrantPlan.from_payload(payload) if payload else None
        try:
            started = restart.start_new_gang(api, run, history, plan, self.log)
        except Exception as exc:
            self._decided = True
            first_line = (str(exc).splitlines() or [type(exc).__name__])[0]
            history = restart.close_attempt(
                history,
                AttemptOutcome.FAILED,
                reason=f"its gang did not start ({type(exc).__name__}: {first_line})",
            )
            ti.xcom_push(key=ATTEMPTS_KEY, value=restart.attempts_to_payload(history))
            raise TrainingFailed(f"{describe_run_failure(history)}\n{exc}") from exc
        history = started.attempts
        ti.xcom_push(key=ATTEMPTS_KEY, value=restart.attempts_to_payload(history))
        if started.cluster is not None:
            ti.xcom_push(key=RESTARTED_CLUSTER_KEY, value=started.cluster)
        self.log.info(
            "attempt %d of run %s runs with its ClusterSpec", history[-1].number, run.run_key
        )
        self._defer(context, run, restart.attempts_to_payload(history))

    def on_kill(self) -> None:
        if self._run is None:
            return
        if self._decided:
            self.log.info(
                "train killed after training of run %s ended: teardown deletes its objects",
                self._run.run_key,
            )
            return
        delete_when_killed(self._client, self._run, self.log, "train killed")
