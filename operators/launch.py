"""The launch task: a KubernetesPodOperator that starts a whole gang of replica pods.

The provider's operator runs one pod. A TensorFlow job is a gang: every
replica must run (with an IP) before any can get its ClusterSpec. This
subclass keeps the provider's machinery (`KubernetesHook` for the connection,
`PodManager.create_pod` with its API retries, `read_pod_events`,
`read_pod_logs`) and replaces only `execute`:

1. refuse a run key that another run's objects carry (a run id chosen so that
   its key collides: nothing of the other run is touched), then
   delete whatever an earlier try of the same run left (by label), pods with
   their own grace period, and wait until the pods are really gone: with a
   grace period the API keeps a pod (deletionTimestamp set) until its kubelet
   confirmed the containers ended, whereas `gracePeriodSeconds=0` removes the
   object at once while the old processes may still run (holding GPUs, writing
   into the run's prefix). So two gangs of a run never live at once and
   deterministic names never clash. Then delete an earlier try's `model/` and
   `metrics.json` from S3, so only this try's are archived;
2. admission: create the run's ConfigMap (the runtime files; it is the run's
   ticket), then count the tenant's runs that hold objects, own included. Over
   the tenant's `max_concurrent_jobs`, delete the ticket and reschedule
   (`AirflowRescheduleException`: the pool slot is given back, no retry is
   used). Of any runs alive together, the one whose ticket came last counted
   them all, so at most `max_concurrent_jobs` are admitted, whatever the pool
   does between a job's steps (docs/tenants.md);
3. sign the pods' S3 grants (operators/grants.py) into the run's two Secrets
   (their values never reach a pod spec, a log or XCom; the plan, which holds
   no credential, goes to XCom `grants` for train's refreshes), then create
   every replica pod. With `warm_start`, the access Secret also lists the
   checkpoints the replicas restore (operators/restore.py), looked up before
   step 2 so that a warm start that cannot be had starts nothing. The pods are
   created a few at once (`gang.create_replica_pods`), not one round trip after another;
4. watch the pods until every one runs with an IP (gang start), signing the
   grants anew every `refresh_every` seconds while it waits. A pod the
   infrastructure takes meanwhile (deleted, evicted, its node lost) is judged
   by the run's restart policy as in `train`: on RESTART the gang is stopped
   and created again, its pods carrying the attempts (operators/restart.py).
   A pod that fails otherwise, one taken past `max_restarts`, or a gang still
   incomplete at the request's `startup_timeout`, fails
   the task with the scheduler's / kubelet's reason; the reason also goes to
   XCom (`failure`) for the run manifest. A blinking API server (5xx, 429,
   dropped connections: operators/transient.py) is ridden out with back-off
   and relists until the gang's deadline, as are the creates and the count of
   steps 2 and 3 (`LAUNCH_API_PATIENCE_SECONDS` each). The objects are left in place:
   `archive` (a teardown task of `launch`) keeps the logs of the replicas that
   did start, `teardown` deletes everything, and a retry deletes them first;
5. return the endpoints `{role: ["ip:port", ...]}` (XCom) for `clusterspec`.

Creating the pods, the gang watch and stopping a gang live in
operators/gang.py, shared with `train`, which starts a new gang when the
restart policy restarts the run (operators/restart.py).

`on_kill` deletes the run's objects instead of the provider's single pod.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.sdk import Context
from airflow.sdk.exceptions import (
    AirflowException,
    AirflowFailException,
    AirflowRescheduleException,
)

import runtime
from operators import gang, kubeobjects, restart
from operators.gang import GANG_API_PATIENCE_SECONDS, GangStartError
from operators.grants import plan_grants, sign_grants
from operators.restore import StagedRestore, WarmStartError, stage_warm_start
from operators.runinfo import RunInfo, pull_run
from operators.runobjects import (
    LEFTOVER_GRACE_MARGIN_SECONDS,
    RunObjects,
    delete_when_killed,
    leftover_wait_seconds,
)
from operators.runoutputs import clear_run_outputs
from operators.settings import (
    ADMISSION_DELAY_SECONDS,
    ADMISSION_JITTER_SECONDS,
    ADMISSION_MAX_WAIT_SECONDS,
    KUBERNETES_CONN_ID,
    LEFTOVER_TIMEOUT_SECONDS,
    UPLOAD_PATIENCE_SECONDS,
)
from operators.transient import call_with_retries
from tenancy.apply import create_run_network_policy
from tfjob.attempts import Attempt
from tfjob.checkpoints import RestoreTooLarge
from tfjob.jsontypes import JsonObject
from tfjob.manifests import (
    build_access_secret,
    build_pod_manifests,
    build_runtime_configmap,
    build_tensorboard_secrets,
    build_upload_secret,
)
from tfjob.pipeline_ids import (
    ATTEMPTS_KEY,
    FETCH_BUNDLE_TASK,
    GRANTS_KEY,
    LAUNCH_FAILURE_KEY,
    READY_AT_KEY,
    WARM_START_KEY,
)
from tfjob.records.outcomes import BundleIdentity, LaunchFailure, StagedWarmStart
from tfjob.records.run import GangEndpoints, GrantPlan
from tfjob.restart_policy import Decision, RestartPolicy
from tfjob.tenants import load_tenants, resolve_tenant

# Each create or count of the launch rides out a blinking API server this long.
LAUNCH_API_PATIENCE_SECONDS = GANG_API_PATIENCE_SECONDS

if TYPE_CHECKING:
    from airflow.sdk.types import RuntimeTaskInstanceProtocol
    from kubernetes import client as k8s

T = TypeVar("T")
# Kept importable from here: tests and callers named them before operators/runobjects.py.
__all__ = [
    "GangStartError",
    "LEFTOVER_GRACE_MARGIN_SECONDS",
    "TrainingLaunchOperator",
    "leftover_wait_seconds",
]


def is_admitted(holders: set[str], run_key: str, max_jobs: int) -> bool:
    """Whether a run whose ticket exists may start, given the runs holding objects."""
    return len(holders | {run_key}) <= max_jobs


def read_runtime_files() -> dict[str, str]:
    """The `runtime/*.py` files (the package, `__init__.py` too), as the per-run ConfigMap
    carries them: one key per file name, mounted as the package's folder."""
    folder = Path(runtime.__file__).parent
    return {path.name: path.read_text(encoding="utf-8") for path in sorted(folder.glob("*.py"))}


class TrainingLaunchOperator(KubernetesPodOperator):
    """Start every replica pod of a run and wait for the gang (see the module docstring)."""

    template_fields = ()

    def __init__(
        self,
        *,
        kubernetes_conn_id: str = KUBERNETES_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            kubernetes_conn_id=kubernetes_conn_id,
            name="tfjob-launch",
            random_name_suffix=False,
            get_logs=False,
            on_finish_action="keep_pod",
            do_xcom_push=True,  # the endpoints: our return value, not the provider's sidecar
            **kwargs,
        )
        self._run: RunInfo | None = None

    def execute(self, context: Context) -> dict[str, list[str]]:
        run = self._run = pull_run(context)
        request = run.request
        self.namespace = run.namespace
        api = self.client

        self.remove_leftovers(run)
        self.clear_outputs(run)

        from airflow.providers.cncf.kubernetes.pod_generator import PodGenerator

        snapshot = None  # a request without a bundle: the program is in the image
        if request.bundle is not None:
            pushed = context["ti"].xcom_pull(task_ids=FETCH_BUNDLE_TASK) or {}
            if not pushed.get("snapshot"):
                raise AirflowException(f"no bundle snapshot in XCom of task {FETCH_BUNDLE_TASK!r}")
            snapshot = BundleIdentity.from_payload(pushed).snapshot
        plan = plan_grants(run, snapshot)  # signed as the tenant's pods identity
        warm = self.stage_warm_start(run, plan.lifetime, context)

        identity = run.identity()
        ticket = build_runtime_configmap(identity, read_runtime_files(), request.tenant)
        self.admit(run, ticket, context)

        grants = sign_grants(plan)
        context["ti"].xcom_push(key=GRANTS_KEY, value=plan.to_payload())
        made = [f"ConfigMap/{ticket['metadata']['name']}"]
        secrets = [
            build_access_secret(
                identity, grants.bundle_url, request.tenant, warm.document if warm else None
            ),
            build_upload_secret(identity, grants.upload, request.tenant),
            *build_tensorboard_secrets(identity, grants.tensorboard, request.tenant),
        ]
        made += self.patiently(
            lambda: kubeobjects.create_objects(api, run.namespace, secrets),
            "creating the run's Secrets",
        )
        self.log.info(
            "S3 grants signed for %ds (SigV4), signed anew every %.0fs while the run lives",
            plan.lifetime,
            plan.refresh_every,
        )
        started = time.time()
        try:
            # Tenancy (docs/tenants.md): the run's pods talk only to each other.
            policy = create_run_network_policy(api.api_client, identity, request.tenant)
            made.extend([policy] if policy else [])
            manager = self.pod_manager  # made once here, not by each create thread
            attempts = restart.first_attempt(time.time(), warm.step if warm else None)
            while True:
                manifests = build_pod_manifests(request, identity, UPLOAD_PATIENCE_SECONDS)
                if len(attempts) > 1:  # a restarted gang's pods carry the run's attempts
                    manifests = [restart.annotate_attempts(m, attempts) for m in manifests]
                pods = gang.create_replica_pods(
                    lambda m: manager.create_pod(PodGenerator.deserialize_model_dict(m)),
                    manifests,
                    self.log,
                )
                self.log.info(
                    "created in namespace %s: %s",
                    run.namespace,
                    ", ".join([*made, *(f"Pod/{name}" for name in pods)]),
                )
                try:
                    endpoints = self.await_gang_start(run, plan).to_payload()
                    break
                except GangStartError as lost:
                    attempts = self.restart_lost_gang(run, attempts, lost, context["ti"])
        except Exception as exc:
            # The objects stay: archive keeps the logs of the replicas that did start,
            # teardown removes everything, and a retry removes them first (remove_leftovers).
            try:
                failure = LaunchFailure.of(exc).to_payload()
                context["ti"].xcom_push(key=LAUNCH_FAILURE_KEY, value=failure)
            except Exception:  # the manifest's detail must not hide the failure itself
                self.log.exception("could not push the launch failure to XCom")
            raise
        self.log.info(
            "all %d replicas running after %.1fs", len(run.pod_names()), time.time() - started
        )
        context["ti"].xcom_push(key=READY_AT_KEY, value=time.time())
        return endpoints

    def admit(self, run: RunInfo, ticket: JsonObject, context: Context) -> None:
        """Create the run's ticket and start only within the tenant's job cap (step 2)."""
        tenant = run.request.tenant
        max_jobs = resolve_tenant(load_tenants(), tenant).max_concurrent_jobs
        api = self.client
        self.patiently(
            lambda: kubeobjects.create_objects(api, run.namespace, [ticket]),
            "creating the run's ticket",
        )
        holders = self.patiently(
            lambda: kubeobjects.list_runs_holding_objects(api, run.namespace, tenant),
            "counting the tenant's runs",
        )
        if is_admitted(holders, run.run_key, max_jobs):
            self.log.info(
                "admitted: %d of tenant %s's %d job places taken (%s)",
                len(holders | {run.run_key}),
                tenant,
                max_jobs,
                ", ".join(sorted(holders | {run.run_key})),
            )
            return
        RunObjects.of(api, run).delete()
        others = ", ".join(sorted(holders - {run.run_key}))
        now = datetime.now(UTC)
        first = context["ti"].get_first_reschedule_date(context) or now
        if now - first > timedelta(seconds=ADMISSION_MAX_WAIT_SECONDS):
            raise AirflowException(
                f"tenant {tenant} runs {max_jobs} job(s) at most and has been full for "
                f"{ADMISSION_MAX_WAIT_SECONDS}s: {others}"
            )
        delay = ADMISSION_DELAY_SECONDS + random.uniform(0, ADMISSION_JITTER_SECONDS)
        self.log.info(
            "tenant %s runs %d job(s) at most and these hold objects: %s; "
            "giving the slot back and asking again in %.0fs (wait #%d)",
            tenant,
            max_jobs,
            others,
            delay,
            context.get("task_reschedule_count", 0) + 1,
        )
        raise AirflowRescheduleException(now + timedelta(seconds=delay))

    def patiently(self, call: Callable[[], T], what: str) -> T:
        """`call()`, asked again while the API server blinks (operators/transient.py)."""
        return call_with_retries(
            call, deadline=time.monotonic() + LAUNCH_API_PATIENCE_SECONDS, what=what, log=self.log
        )

    def create_replica_pod(self, pod: k8s.V1Pod) -> None:
        """Create one replica pod with the provider's pod manager (it retries a few API
        errors itself), asked again while the API server blinks (operators/gang.py)."""
        gang.create_replica_pod(
            lambda: self.pod_manager.create_pod(pod), pod.metadata.name, self.log
        )

    def remove_leftovers(self, run: RunInfo) -> None:
        """Delete objects of an earlier try of this run (pods with their grace period) and
        wait until they are gone: the old containers have ended, not just the objects.

        Objects of another run that carry this run's key (a run id chosen to collide)
        are never deleted: the run fails, naming them (`RunObjects.find_foreign`)."""
        objects = RunObjects.of(self.client, run)
        foreign = call_with_retries(
            lambda: objects.find_foreign(run.dag_id, run.run_id),
            deadline=time.monotonic() + LEFTOVER_TIMEOUT_SECONDS,
            what=f"looking for other runs' objects with key {run.run_key}",
            log=self.log,
        )
        if foreign:
            raise AirflowFailException(str(kubeobjects.ForeignObjectError(run.run_key, foreign)))
        removal = objects.remove(self.log, doing="removing leftovers of an earlier try")
        if removal.left:
            raise AirflowException(
                f"leftovers of an earlier try still exist after {removal.timeout}s: "
                + ", ".join(removal.left)
            )

    def clear_outputs(self, run: RunInfo) -> None:
        """No model or metrics of an earlier try may be archived or published as this one's."""
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook

        cleared = clear_run_outputs(
            S3Hook(aws_conn_id=run.aws_conn_id).get_conn(), run.layout, checkpoints=True
        )
        if cleared:
            self.log.info("cleared the outputs of an earlier try: %s", ", ".join(cleared))

    def stage_warm_start(
        self, run: RunInfo, expires: int, context: Context
    ) -> StagedRestore | None:
        """The checkpoints the first gang restores for `warm_start` (operators/restore.py),
        pushed to XCom `warm_start` (no credential); before anything is created, so a
        warm start that cannot be had fails the run with nothing launched."""
        if run.request.warm_start is None:
            return None
        try:
            staged = stage_warm_start(run, expires)
        except (WarmStartError, RestoreTooLarge) as exc:
            raise AirflowFailException(str(exc)) from None
        if staged is None:
            self.log.warning(
                "warm_start: %r given, but %s has no published run yet: the "
                "first gang starts from scratch",
                run.request.warm_start,
                run.request.output,
            )
            return None
        self.log.info("warm_start %r: %s", run.request.warm_start, staged.describe())
        warm = StagedWarmStart(
            requested=run.request.warm_start,
            source=staged.source,
            step=staged.step,
            files=staged.files,
            bytes=staged.size,
        )
        context["ti"].xcom_push(key=WARM_START_KEY, value=warm.to_payload())
        return staged

    def restart_lost_gang(
        self,
        run: RunInfo,
        attempts: list[Attempt],
        lost: GangStartError,
        ti: RuntimeTaskInstanceProtocol,
    ) -> list[Attempt]:
        """A gang that lost a replica to the infrastructure (deleted, evicted, its node lost)
        before it ran is restarted as `train` restarts one (the same policy, the same count
        of attempts): its pods are stopped and the attempts after it returned. Raises `lost`,
        with the verdict's reason, when the policy says FAIL or nothing was taken. The
        attempts go to XCom `attempts` (run.json's when train never ran)."""
        judged = restart.judge_failed_start(RestartPolicy.of(run.request), attempts, lost.failed)
        if judged is None:
            raise lost
        verdict, history = judged
        ti.xcom_push(key=ATTEMPTS_KEY, value=restart.attempts_to_payload(history))
        if verdict.decision is not Decision.RESTART:
            raise GangStartError(f"{lost}\n{verdict.reason}", lost.failed) from lost
        self.log.warning("gang start: %s", verdict.reason)
        gang.stop_gang(self.client, run, self.log)
        *earlier, opened = history
        return [
            *earlier,
            replace(opened, restored_checkpoint_step=attempts[0].restored_checkpoint_step),
        ]

    def await_gang_start(self, run: RunInfo, plan: GrantPlan) -> GangEndpoints:
        """Watch until every pod runs with an IP; fail with the reasons when not in time."""
        return gang.await_gang_start(self.client, run, plan, self.log)

    def on_kill(self) -> None:
        if self._run is not None:
            delete_when_killed(lambda: self.client, self._run, self.log, "launch killed")
