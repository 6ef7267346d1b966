"""What every task of a run needs to know about it, passed once through XCom.

`validate` loads the request, settles its tenant (from the DAG, never from
the request alone) and pushes `describe_run(...)`; every later task calls
`pull_run(context)` and gets the same request object and the same run
identity (namespace, run key, label selector, pod names, S3 prefix, the
tenant's AWS connection, the tenant's pod uid/gid), so no task derives names
on its own and a retried task finds exactly its run's objects.

A run is identified by its DAG and its run_id together: two DAGs may have
runs with equal run_ids (and jobs with equal names), so the run key and the
S3 prefix both include the DAG and never collide.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from airflow.sdk import Context

from tfjob import naming
from tfjob.jsontypes import JsonObject
from tfjob.manifests import RunIdentity
from tfjob.pipeline_ids import VALIDATE_TASK
from tfjob.records.run import RunDescription
from tfjob.request.model import TrainingRequest
from tfjob.runlayout import RunLayout
from tfjob.tenants import derive_pod_user, load_tenants
from tfjob.tenants.model import PodUser


@dataclass(frozen=True)
class RunInfo:
    request: TrainingRequest
    run_id: str
    dag_id: str
    namespace: str
    run_key: str
    aws_conn_id: str  # every S3 call of the run uses it: its tenant's `s3_conn_id`
    run_as: PodUser | None = None  # its tenant's `pod_user`; None: read from the tenants file

    @property
    def run_hash(self) -> str:
        return naming.run_hash(self.dag_id, self.run_id)

    @property
    def selector(self) -> str:
        """This run's objects and no other run's, even one whose run key is the same."""
        return naming.run_selector(self.run_key, self.run_hash)

    @property
    def key_selector(self) -> str:
        """Every object labelled with this run's key: this run's, and any run's colliding."""
        return naming.run_selector(self.run_key)

    @property
    def layout(self) -> RunLayout:
        """`<output>/runs/<dag_id>/<run_id>/`: this run's bundle snapshot, model, logs, manifest."""
        return RunLayout.for_run(self.request.output, self.dag_id, self.run_id)

    def pod_names(self) -> list[str]:
        return [naming.pod_name(self.run_key, r, i) for r, i in self.request.replicas_in_order()]

    def replica_ids(self) -> list[tuple[str, int]]:
        return [(r.value, i) for r, i in self.request.replicas_in_order()]

    def identity(self) -> RunIdentity:
        return RunIdentity(
            job=self.request.name,
            run_id=self.run_id,
            dag_id=self.dag_id,
            namespace=self.namespace,
            run_as=self.run_as or read_tenant_pod_user(self.request.tenant),
        )


def read_tenant_pod_user(tenant: str) -> PodUser:
    """The uid/gid of `tenant`'s pods, from the tenants file; for a tenant the file no
    longer declares (validate refuses those: only a run described before its tenant was
    removed, or a test), the one the file would give an entry without `uid`."""
    found = load_tenants().find(tenant)
    return found.pod_user if found else derive_pod_user(tenant)


def request_as_dict(request: TrainingRequest) -> JsonObject:
    """The request as plain JSON data, loadable again with `load_request`."""
    return request.model_dump(mode="json")


def describe_run(
    request: TrainingRequest,
    run_id: str,
    dag_id: str,
    aws_conn_id: str,
    run_as: PodUser | None = None,
) -> JsonObject:
    """The XCom `validate` pushes: a `RunDescription`'s payload. `run_prefix` is there for
    readers outside the pipeline (tshell, the run view); the tasks derive it from the same
    fields (`RunInfo.layout`). `run_as` (None: read from the tenants file) is fixed here for
    the whole run: every gang of the run, restarts included, runs as the uid/gid its tenant
    had at `validate`."""
    described = RunDescription(
        request=request,
        run_id=run_id,
        dag_id=dag_id,
        namespace=naming.tenant_namespace(request.tenant),
        run_key=naming.run_key(request.name, dag_id, run_id),
        run_prefix=RunLayout.for_run(request.output, dag_id, run_id).uri,
        aws_conn_id=aws_conn_id,
        run_as=run_as or read_tenant_pod_user(request.tenant),
    )
    return described.to_payload()


def read_run(described: Mapping[str, object]) -> RunInfo:
    """The run of a description's payload; a run described before pods had their tenant's
    uid has `run_as` None, read from the tenants file when needed."""
    record = RunDescription.from_payload(described)
    return RunInfo(
        request=record.request,
        run_id=record.run_id,
        dag_id=record.dag_id,
        namespace=record.namespace,
        run_key=record.run_key,
        aws_conn_id=record.aws_conn_id,
        run_as=record.run_as,
    )


def pull_run(context: Context) -> RunInfo:
    """The run as `validate` described it; fails clearly when validate has not run."""
    described = context["ti"].xcom_pull(task_ids=VALIDATE_TASK)
    if not described:
        raise RuntimeError(
            f"no run description in XCom of task {VALIDATE_TASK!r}: it did not succeed in this run"
        )
    return read_run(described)
