"""The pods' S3 grants of a run: signed by Airflow, kept valid while the run lives.

Two Secrets per run (docs/architecture.md, "Grants"):

- `<runkey>-access`: `bundle_url`, a presigned GET of the bundle snapshot,
  mounted by every init container;
- `<runkey>-upload`: `upload.json`, the model owner's POST policies for
  `model/`, `checkpoints/` and `metrics.json`, mounted by that replica's main
  container only;
- `<runkey>-tensorboard-<n>`: one `tensorboard-<role>-<index>.json` per
  replica (TENSORBOARD_GRANTS_PER_SECRET a Secret), the POST policy of that
  replica's own summaries folder, mounted (as `tensorboard.json`) by that
  replica's main container only.

A grant lives `grant_lifetime` seconds: the whole run window (startup, active
deadline and a margin), capped by what Airflow's credentials can sign
(`GRANT_LIFETIME_SECONDS`: temporary credentials such as IRSA or an instance
role last about an hour). `launch` signs them; while the gang starts (`launch`)
and while it trains (the train trigger) both Secrets are signed anew every
`refresh_interval` seconds, and the kubelet carries the new files into the
running pods. The bootstrap reads `upload.json` when it uploads, so a model
written days after launch goes up with a fresh grant.

Presigning is local computation (no request to S3), so a refresh costs one
Secret write per Secret. Grants are signed with the tenant's pods-only
identity (`presign_conn_id`, default `tfjob_pods_<tenant>`), never with
`aws_conn_id`: a URL is only as narrow as its signer's own reach, so the
signer is an identity that can reach the run layout's pod objects and
nothing else (docs/bundles.md "Local S3", docs/real-cluster.md). A missing
connection fails `validate` and `launch`; there is no fallback.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowFailException, AirflowNotFoundException
from kubernetes import client as k8s

from tfjob.jsontypes import JsonObject

if TYPE_CHECKING:
    from botocore.client import BaseClient

    from operators.runinfo import RunInfo

from operators.errors import PipelineError
from operators.s3access import presign_bundle_url, presign_tensorboard_upload, presign_upload
from operators.settings import GRANT_LIFETIME_SECONDS, GRANT_REFRESH_SECONDS
from runtime.protocol import BUNDLE_URL_FILE, UPLOAD_FILE
from tfjob import naming
from tfjob.grants import grant_lifetime, refresh_interval
from tfjob.manifests import build_tensorboard_files
from tfjob.records.run import GrantPlan
from tfjob.tenants import load_tenants, resolve_tenant


def plan_grants(run: RunInfo, snapshot_uri: str | None) -> GrantPlan:
    """The grants plan of a run: signed with its tenant's pods-only presigning identity."""
    request = run.request
    lifetime = grant_lifetime(
        request.startup_timeout, request.active_deadline, GRANT_LIFETIME_SECONDS
    )
    return GrantPlan(
        aws_conn_id=run.aws_conn_id,
        presign_conn_id=find_presign_conn_id(run),
        namespace=run.namespace,
        run_key=run.run_key,
        dag_id=run.dag_id,
        run_id=run.run_id,
        snapshot_uri=snapshot_uri,
        output_uri=request.output,
        lifetime=lifetime,
        refresh_every=refresh_interval(lifetime, GRANT_REFRESH_SECONDS),
        replicas=tuple(
            naming.name_replica(role, index) for role, index in request.replicas_in_order()
        ),
    )


@dataclass(frozen=True)
class Grants:
    """Freshly signed grants: the values of the two Secrets."""

    bundle_url: str
    upload: JsonObject
    tensorboard: dict[str, JsonObject] = field(default_factory=dict)  # by `<role>-<index>`

    def secret_data(self, run_key: str) -> dict[str, dict[str, str]]:
        """Secret name -> its data (base64, as the API's `data` field holds it)."""
        data = {
            naming.secret_name(run_key): {BUNDLE_URL_FILE: _b64(self.bundle_url)},
            naming.upload_secret_name(run_key): {
                UPLOAD_FILE: _b64(json.dumps(self.upload, sort_keys=True))
            },
        }
        for shard, files in build_tensorboard_files(self.tensorboard).items():
            data[naming.tensorboard_secret_name(run_key, shard)] = {
                name: _b64(text) for name, text in files.items()
            }
        return data


def find_presign_conn_id(run: RunInfo) -> str:
    """The pods-only presigning connection of the run's tenant (its `pods_conn_id`)."""
    known = getattr(run, "pods_conn_id", None)  # a run that carries it (tests' stand-ins)
    if isinstance(known, str):
        return known
    return str(resolve_tenant(load_tenants(), run.request.tenant).pods_conn_id)


class PresignConnectionMissing(PipelineError, AirflowFailException):
    """The tenant's pods-only presigning connection is not defined in Airflow (no retry)."""


def require_presign_connection(conn_id: str, whose: str) -> None:
    """PresignConnectionMissing, saying what to do, unless Airflow knows `conn_id`."""
    try:
        BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        raise PresignConnectionMissing(
            f"{whose}: the Airflow connection {conn_id!r} that signs its pods' S3 "
            "grants is not defined; pods' grants are never signed with aws_conn_id. Define it "
            f"(AIRFLOW_CONN_{conn_id.upper()}: scripts/services.py does for the embedded "
            "default; on a real cluster a role limited as docs/real-cluster.md shows), or name "
            "another with the tenant's presign_conn_id in the tenants file"
        ) from None


def make_presigning_client(presign_conn_id: str) -> BaseClient:
    """Airflow's S3 client for `presign_conn_id`, set to sign with SigV4 whatever the region."""
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook
    from botocore.config import Config

    require_presign_connection(presign_conn_id, "the run's tenant")
    hook = S3Hook(aws_conn_id=presign_conn_id)
    return hook.get_client_type(config=hook.config.merge(Config(signature_version="s3v4")))


def sign_grants(plan: GrantPlan, client: BaseClient | None = None) -> Grants:
    """Sign the run's bundle URL and upload policies, valid for `plan.lifetime` seconds."""
    s3 = client if client is not None else make_presigning_client(plan.presign_conn_id)
    return Grants(
        bundle_url=(
            presign_bundle_url(s3, plan.snapshot_uri, plan.lifetime) if plan.snapshot_uri else ""
        ),
        upload=presign_upload(s3, plan.output_uri, plan.dag_id, plan.run_id, plan.lifetime),
        tensorboard={
            replica: presign_tensorboard_upload(
                s3, plan.output_uri, plan.dag_id, plan.run_id, replica, plan.lifetime
            )
            for replica in plan.replicas
        },
    )


def grant_patches(plan: GrantPlan, grants: Grants) -> list[tuple[str, JsonObject]]:
    """(Secret name, merge patch) for each of the run's grants' Secrets."""
    return [(name, {"data": data}) for name, data in grants.secret_data(plan.run_key).items()]


def write_grants(api: k8s.CoreV1Api, plan: GrantPlan, grants: Grants) -> None:
    """Rewrite every grants' Secret with new grants (sync client)."""
    for name, patch in grant_patches(plan, grants):
        api.patch_namespaced_secret(name, plan.namespace, patch)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode("utf-8")).decode("ascii")
