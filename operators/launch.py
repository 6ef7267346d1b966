"""The launch task: a KubernetesPodOperator that starts a whole gang of replica pods.

The provider's operator runs one pod. A TensorFlow job is a gang: every
replica must run (with an IP) before any can get its ClusterSpec. This
subclass keeps the provider's machinery (`KubernetesHook` for the connection,
`PodManager.create_pod` with its API retries, `read_pod_events`,
`read_pod_logs`) and replaces only `execute`:

1. delete whatever an earlier try of the same run left (by label) and wait
   until it is gone, so deterministic names never clash; delete an earlier
   try's `model/` and `metrics.json` from S3, so only this try's are archived;
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
   every replica pod;
4. watch the pods until every one runs with an IP (gang start), signing the
   grants anew every `refresh_every` seconds while it waits. A pod that
   fails, or a gang still incomplete at the request's `startup_timeout`, fails
   the task with the scheduler's / kubelet's reason; the reason also goes to
   XCom (`failure`) for the run manifest. The objects are left in place:
   `archive` (a teardown task of `launch`) keeps the logs of the replicas that
   did start, `teardown` deletes everything, and a retry deletes them first;
5. return the endpoints `{role: ["ip:port", ...]}` (XCom) for `clusterspec`.

`on_kill` deletes the run's objects instead of the provider's single pod.
"""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.sdk.exceptions import AirflowException

from operators import kubeobjects
from operators.replicas import (
    INIT_CONTAINER,
    GangState,
    describe_startup_failure,
    judge_gang_start,
)
from operators.runinfo import RunInfo, pull_run
from operators.settings import (
    ADMISSION_DELAY_SECONDS,
    ADMISSION_JITTER_SECONDS,
    ADMISSION_MAX_WAIT_SECONDS,
    FETCH_BUNDLE_TASK,
    GRANTS_KEY,
    KUBERNETES_CONN_ID,
    LAUNCH_FAILURE_KEY,
    LEFTOVER_TIMEOUT_SECONDS,
    TEARDOWN_GRACE_SECONDS,
    UPLOAD_PATIENCE_SECONDS,
)

INIT_LOG_LINES = 20


def is_admitted(holders: set[str], run_key: str, max_jobs: int) -> bool:
    """Whether a run whose ticket exists may start, given the runs holding objects."""
    return len(holders | {run_key}) <= max_jobs


def describe_launch_failure(exc: BaseException) -> dict[str, str]:
    """What run.json says about a launch that failed: the error's kind and message."""
    return {"error": type(exc).__name__, "message": str(exc)}


class GangStartError(AirflowException):
    """Not every replica of a run started in time; the message says why for each pod."""


def read_runtime_files() -> dict[str, str]:
    """The `runtime/*.py` files, flat, as the per-run ConfigMap carries them."""
    import runtime

    folder = Path(runtime.__file__).parent
    return {
        path.name: path.read_text(encoding="utf-8")
        for path in sorted(folder.glob("*.py"))
        if path.name != "__init__.py"
    }


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

    def execute(self, context: Any) -> dict[str, list[str]]:
        run = self._run = pull_run(context)
        request = run.request
        self.namespace = run.namespace
        api = self.client

        self.remove_leftovers(run)
        self.clear_outputs(run)

        from airflow.providers.cncf.kubernetes.pod_generator import PodGenerator

        from operators.grants import GrantPlan, sign_grants
        from tfjob.manifests import (
            build_access_secret,
            build_pod_manifests,
            build_runtime_configmap,
            build_upload_secret,
        )

        identity = run.identity()
        ticket = build_runtime_configmap(identity, read_runtime_files(), request.tenant)
        self.admit(run, ticket, context)

        bundle = context["ti"].xcom_pull(task_ids=FETCH_BUNDLE_TASK) or {}
        if not bundle.get("snapshot"):
            raise AirflowException(f"no bundle snapshot in XCom of task {FETCH_BUNDLE_TASK!r}")
        plan = GrantPlan.for_run(run, bundle["snapshot"])  # signed as the tenant's connection
        grants = sign_grants(plan)
        context["ti"].xcom_push(key=GRANTS_KEY, value=plan.to_payload())
        made = [f"ConfigMap/{ticket['metadata']['name']}"]
        made += kubeobjects.create_objects(
            api,
            run.namespace,
            [
                build_access_secret(identity, grants.bundle_url, request.tenant),
                build_upload_secret(identity, grants.upload, request.tenant),
            ],
        )
        self.log.info(
            "S3 grants signed for %ds (SigV4), signed anew every %.0fs while the run lives",
            plan.lifetime,
            plan.refresh_every,
        )
        started = time.time()
        try:
            # Tenancy (docs/tenants.md): the run's pods talk only to each other.
            from operators.tenancy import create_run_network_policy

            policy = create_run_network_policy(api.api_client, identity, request.tenant)
            made.extend([policy] if policy else [])
            for manifest in build_pod_manifests(request, identity, UPLOAD_PATIENCE_SECONDS):
                pod = PodGenerator.deserialize_model_dict(manifest)
                self.pod_manager.create_pod(pod)
                made.append(f"Pod/{manifest['metadata']['name']}")
            self.log.info("created in namespace %s: %s", run.namespace, ", ".join(made))
            endpoints = self.await_gang_start(run, plan)
        except Exception as exc:
            # The objects stay: archive keeps the logs of the replicas that did start,
            # teardown removes everything, and a retry removes them first (remove_leftovers).
            try:
                context["ti"].xcom_push(key=LAUNCH_FAILURE_KEY, value=describe_launch_failure(exc))
            except Exception:  # the manifest's detail must not hide the failure itself
                self.log.exception("could not push the launch failure to XCom")
            raise
        self.log.info(
            "all %d replicas running after %.1fs", len(run.pod_names()), time.time() - started
        )
        context["ti"].xcom_push(key="ready_at", value=time.time())
        return endpoints

    def admit(self, run: RunInfo, ticket: dict[str, Any], context: Any) -> None:
        """Create the run's ticket and start only within the tenant's job cap (step 2)."""
        from airflow.sdk.exceptions import AirflowRescheduleException

        from tfjob.tenants import load_tenants, resolve_tenant

        tenant = run.request.tenant
        max_jobs = resolve_tenant(load_tenants(), tenant).max_concurrent_jobs
        api = self.client
        kubeobjects.create_objects(api, run.namespace, [ticket])
        holders = kubeobjects.list_runs_holding_objects(api, run.namespace, tenant)
        if is_admitted(holders, run.run_key, max_jobs):
            self.log.info(
                "admitted: %d of tenant %s's %d job places taken (%s)",
                len(holders | {run.run_key}),
                tenant,
                max_jobs,
                ", ".join(sorted(holders | {run.run_key})),
            )
            return
        kubeobjects.delete_run_objects(api, run.namespace, run.selector)
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

    def remove_leftovers(self, run: RunInfo) -> None:
        """Delete objects of an earlier try of this run and wait until they are gone."""
        api = self.client
        deleted = kubeobjects.delete_run_objects(
            api, run.namespace, run.selector, grace_period_seconds=0
        )
        if not deleted:
            return
        self.log.info("removing leftovers of an earlier try: %s", ", ".join(deleted))
        left = kubeobjects.await_run_objects_gone(
            api, run.namespace, run.selector, LEFTOVER_TIMEOUT_SECONDS
        )
        if left:
            raise AirflowException(
                f"leftovers of an earlier try still exist after {LEFTOVER_TIMEOUT_SECONDS}s: "
                + ", ".join(left)
            )

    def clear_outputs(self, run: RunInfo) -> None:
        """No model or metrics of an earlier try may be archived or published as this one's."""
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook

        from operators.runoutputs import clear_run_outputs

        cleared = clear_run_outputs(S3Hook(aws_conn_id=run.aws_conn_id).get_conn(), run.run_prefix)
        if cleared:
            self.log.info("cleared the outputs of an earlier try: %s", ", ".join(cleared))

    def await_gang_start(self, run: RunInfo, plan: Any) -> dict[str, list[str]]:
        """Watch until every pod runs with an IP; fail with the reasons when not in time.

        Pods waiting long (for GPUs, for a node) still find valid grants: they
        are signed anew every `plan.refresh_every` seconds of the wait.
        """
        from operators.grants import sign_grants, write_grants

        expected = run.pod_names()
        deadline = time.monotonic() + run.request.startup_timeout

        def settled(pods: list[dict[str, Any]]) -> bool:
            return judge_gang_start(pods, expected).state is not GangState.STARTING

        while True:
            refresh_at = time.monotonic() + plan.refresh_every
            pods = kubeobjects.watch_run_pods(
                self.client, run.namespace, run.selector, min(deadline, refresh_at), settled
            )
            if settled(pods) or time.monotonic() >= deadline:
                break
            write_grants(self.client, plan, sign_grants(plan))
            self.log.info("gang still starting: S3 grants signed anew")
        verdict = judge_gang_start(pods, expected)
        if verdict.state is GangState.READY:
            from tfjob.clusterspec import Endpoint, endpoints_to_mapping

            return endpoints_to_mapping(
                [Endpoint(r.role, r.index, r.ip, run.request.port) for r in verdict.ready]
            )
        problems = verdict.failed + verdict.waiting
        what = (
            "replicas failed to start"
            if verdict.state is GangState.FAILED
            else "not every replica was running after "
            f"startup_timeout={run.request.startup_timeout}s"
        )
        reasons = [self.explain_pod(run, replica) for replica in problems]
        raise GangStartError(f"gang start of run {run.run_key}: {what}\n" + "\n".join(reasons))

    def explain_pod(self, run: RunInfo, replica: Any) -> str:
        events: list[dict[str, Any]] = []
        init_log = None
        try:
            events = kubeobjects.list_pod_events(self.client, run.namespace, replica.pod)
            if replica.init_exit_code not in (None, 0):
                init_log = kubeobjects.read_container_log(
                    self.client,
                    run.namespace,
                    replica.pod,
                    INIT_CONTAINER,
                    tail_lines=INIT_LOG_LINES,
                )
        except Exception as exc:  # the explanation must not hide the failure itself
            self.log.warning("could not read events or logs of pod %s: %s", replica.pod, exc)
        return describe_startup_failure(replica, events, init_log)

    def delete_run(self, run: RunInfo, reason: str) -> None:
        try:
            deleted = kubeobjects.delete_run_objects(
                self.client,
                run.namespace,
                run.selector,
                grace_period_seconds=TEARDOWN_GRACE_SECONDS,
            )
            self.log.info("%s: deleted %s", reason, ", ".join(deleted) or "nothing")
        except Exception:
            self.log.exception("%s: could not delete the objects of run %s", reason, run.run_key)

    def on_kill(self) -> None:
        if self._run is not None:
            self.delete_run(self._run, reason="launch killed")
