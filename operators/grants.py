"""The pods' S3 grants of a run: signed by Airflow, kept valid while the run lives.

Two Secrets per run (docs/architecture.md, "Grants"):

- `<runkey>-access`: `bundle_url`, a presigned GET of the bundle snapshot,
  mounted by every init container;
- `<runkey>-upload`: `upload.json`, the model owner's POST policies for
  `model/` and `metrics.json`, mounted by that replica's main container only.

A grant lives `grant_lifetime` seconds: the whole run window (startup, active
deadline and a margin), capped by what Airflow's credentials can sign
(`GRANT_LIFETIME_SECONDS`: temporary credentials such as IRSA or an instance
role last about an hour). `launch` signs them; while the gang starts (`launch`)
and while it trains (the train trigger) both Secrets are signed anew every
`refresh_interval` seconds, and the kubelet carries the new files into the
running pods. The bootstrap reads `upload.json` when it uploads, so a model
written days after launch goes up with a fresh grant.

Presigning is local computation (no request to S3), so a refresh costs one
Secret write per Secret.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from operators.s3access import presign_bundle_url, presign_upload
from operators.settings import GRANT_LIFETIME_SECONDS, GRANT_REFRESH_SECONDS
from runtime.protocol import BUNDLE_URL_FILE, UPLOAD_FILE
from tfjob import naming
from tfjob.grants import grant_lifetime, refresh_interval


@dataclass(frozen=True)
class GrantPlan:
    """What to sign for a run, and how often: XCom- and trigger-serialisable."""

    aws_conn_id: str  # the run's tenant's connection (operators.runinfo.RunInfo.aws_conn_id)
    namespace: str
    run_key: str
    dag_id: str
    run_id: str
    snapshot_uri: str
    output_uri: str
    lifetime: int
    refresh_every: float

    @classmethod
    def for_run(cls, run: Any, snapshot_uri: str) -> GrantPlan:
        """The plan of a run (`RunInfo`): signed with its tenant's AWS connection."""
        request = run.request
        lifetime = grant_lifetime(
            request.startup_timeout, request.active_deadline, GRANT_LIFETIME_SECONDS
        )
        return cls(
            aws_conn_id=run.aws_conn_id,
            namespace=run.namespace,
            run_key=run.run_key,
            dag_id=run.dag_id,
            run_id=run.run_id,
            snapshot_uri=snapshot_uri,
            output_uri=request.output,
            lifetime=lifetime,
            refresh_every=refresh_interval(lifetime, GRANT_REFRESH_SECONDS),
        )

    def to_payload(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> GrantPlan:
        return cls(**payload)


@dataclass(frozen=True)
class Grants:
    """Freshly signed grants: the values of the two Secrets."""

    bundle_url: str
    upload: dict[str, Any]

    def secret_data(self) -> dict[str, dict[str, str]]:
        """Secret name suffix -> its data (base64, as the API's `data` field holds it)."""
        return {
            "access": {BUNDLE_URL_FILE: _b64(self.bundle_url)},
            "upload": {UPLOAD_FILE: _b64(json.dumps(self.upload, sort_keys=True))},
        }


def make_presigning_client(aws_conn_id: str) -> Any:
    """Airflow's S3 client for `aws_conn_id`, set to sign with SigV4 whatever the region."""
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook
    from botocore.config import Config

    hook = S3Hook(aws_conn_id=aws_conn_id)
    return hook.get_client_type(config=hook.config.merge(Config(signature_version="s3v4")))


def sign_grants(plan: GrantPlan, client: Any | None = None) -> Grants:
    """Sign the run's bundle URL and upload policies, valid for `plan.lifetime` seconds."""
    s3 = client if client is not None else make_presigning_client(plan.aws_conn_id)
    return Grants(
        bundle_url=presign_bundle_url(s3, plan.snapshot_uri, plan.lifetime),
        upload=presign_upload(s3, plan.output_uri, plan.dag_id, plan.run_id, plan.lifetime),
    )


def grant_patches(plan: GrantPlan, grants: Grants) -> list[tuple[str, dict[str, Any]]]:
    """(Secret name, merge patch) for each of the run's two Secrets."""
    names = {
        "access": naming.secret_name(plan.run_key),
        "upload": naming.upload_secret_name(plan.run_key),
    }
    return [(names[kind], {"data": data}) for kind, data in grants.secret_data().items()]


def write_grants(api: Any, plan: GrantPlan, grants: Grants) -> None:
    """Rewrite both Secrets with new grants (sync client)."""
    for name, patch in grant_patches(plan, grants):
        api.patch_namespaced_secret(name, plan.namespace, patch)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode("utf-8")).decode("ascii")
