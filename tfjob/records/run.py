"""A run as validate describes it, its gang's endpoints, and the plan of its S3 grants.

`validate` pushes the description once for every later task and for the readers
outside the pipeline (tshell, the TFJob tab); `launch` returns the endpoints (the
ClusterSpec's input) and pushes the grants plan, which the trigger keeps valid. The TFJob
tab reads a stored description leniently (`PartialRunDescription`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tfjob.clusterspec import Endpoint, endpoints_from_mapping, endpoints_to_mapping
from tfjob.naming import NAMESPACE_PREFIX
from tfjob.records.replicas import Payload
from tfjob.request.model import TrainingRequest, load_request
from tfjob.tenants.model import PodUser, default_presign_conn_id


@dataclass(frozen=True)
class RunDescription:
    """The run as `validate` describes it once for every later task and reader (XCom)."""

    request: TrainingRequest
    run_id: str
    dag_id: str
    namespace: str
    run_key: str
    run_prefix: str  # `s3://<bucket>/<output>/runs/<dag_id>/<run_id>`, no final '/'
    aws_conn_id: str  # every S3 call of the run uses it: its tenant's `s3_conn_id`
    run_as: PodUser | None = None  # None: described before pods had their tenant's uid

    @property
    def tenant(self) -> str:
        return self.request.tenant

    def to_payload(self) -> Payload:
        payload: Payload = {
            "request": self.request.model_dump(mode="json"),
            "run_id": self.run_id,
            "dag_id": self.dag_id,
            "namespace": self.namespace,
            "run_key": self.run_key,
            "run_prefix": self.run_prefix,
            "aws_conn_id": self.aws_conn_id,
        }
        if self.run_as is not None:
            payload["run_as"] = {"uid": self.run_as.uid, "gid": self.run_as.gid}
        return payload

    @classmethod
    def from_payload(cls, payload: Mapping[str, object]) -> RunDescription:
        run_as = payload.get("run_as")
        return cls(
            request=load_request(payload["request"]),
            run_id=payload["run_id"],
            dag_id=payload["dag_id"],
            namespace=payload["namespace"],
            run_key=payload["run_key"],
            run_prefix=payload["run_prefix"],
            aws_conn_id=payload["aws_conn_id"],
            run_as=PodUser(uid=run_as["uid"], gid=run_as["gid"]) if run_as else None,
        )


@dataclass(frozen=True)
class PartialRunDescription:
    """A stored run description read leniently: each part None when missing or not text.

    The TFJob tab serves what was stored, partial or older than `RunDescription`, and a run
    whose validate has not run yet (its conf as the request), where `from_payload` refuses
    it; the request is the JSON as stored, not validated again. Read-only: the pipeline
    writes `RunDescription`.
    """

    request: Mapping[str, object] = field(default_factory=dict)
    run_id: str | None = None
    dag_id: str | None = None
    namespace: str | None = None
    run_key: str | None = None
    run_prefix: str | None = None
    aws_conn_id: str | None = None

    @property
    def tenant(self) -> str | None:
        tenant = self.request.get("tenant")
        return tenant if isinstance(tenant, str) else None

    @classmethod
    def from_payload(cls, payload: Mapping[str, object]) -> PartialRunDescription:
        def text(key: str) -> str | None:
            value = payload.get(key)
            return value if isinstance(value, str) else None

        request = payload.get("request")
        return cls(
            request=request if isinstance(request, Mapping) else {},
            run_id=text("run_id"),
            dag_id=text("dag_id"),
            namespace=text("namespace"),
            run_key=text("run_key"),
            run_prefix=text("run_prefix"),
            aws_conn_id=text("aws_conn_id"),
        )


@dataclass(frozen=True)
class GangEndpoints:
    """Where each replica of a started gang listens: `launch`'s return value."""

    endpoints: tuple[Endpoint, ...]

    def to_payload(self) -> dict[str, list[str]]:
        """`{role: ["ip:port", ...]}` in Role and index order (the index: list position)."""
        return endpoints_to_mapping(self.endpoints)

    @classmethod
    def from_payload(cls, payload: Mapping[str, list[str]]) -> GangEndpoints:
        return cls(tuple(endpoints_from_mapping(payload)))


@dataclass(frozen=True)
class GrantPlan:
    """What to sign for a run's pods, and how often: `launch` pushes it, the trigger keeps it."""

    aws_conn_id: str  # the run's tenant's connection (RunDescription.aws_conn_id)
    presign_conn_id: str  # its tenant's pods-only presigning identity (Tenant.pods_conn_id)
    namespace: str
    run_key: str
    dag_id: str
    run_id: str
    snapshot_uri: str | None  # the bundle snapshot; None: the program is in the image
    output_uri: str
    lifetime: int
    refresh_every: float
    # Every replica as `<role>-<index>`: each gets a grant of its own summaries folder.
    replicas: tuple[str, ...] = ()

    def to_payload(self) -> Payload:
        return {**self.__dict__, "replicas": list(self.replicas)}

    @classmethod
    def from_payload(cls, payload: Mapping[str, object]) -> GrantPlan:
        if "presign_conn_id" not in payload:  # a plan serialised before pods identities
            tenant = str(payload["namespace"]).removeprefix(NAMESPACE_PREFIX)
            payload = {**payload, "presign_conn_id": default_presign_conn_id(tenant)}
        replicas = payload.get("replicas") or ()  # none in a plan serialised before summaries
        return cls(**{**payload, "replicas": tuple(str(name) for name in replicas)})
