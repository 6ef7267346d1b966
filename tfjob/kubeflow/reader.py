"""The field reader of a TFJob manifest: typed values out, every problem kept as a Refusal.

A person should see every field of a manifest that stops it at once, so the reader notes a
refusal and goes on rather than raising at the first; manifest.py raises them together.
"""

from enum import StrEnum

from tfjob.kubeflow.errors import Refusal

# Fields Kubernetes or Kubeflow know that we refuse with a reason rather than as unknown.
REFUSAL_REASONS = {
    "volumes": "volumes are not supported: a program reads its data from the bundle's data/ "
    "(DATA_DIR) and writes its model to MODEL_DIR, uploaded to the run's output",
    "volumeMounts": "volume mounts are not supported (no volumes): use DATA_DIR and MODEL_DIR",
    "initContainers": "init containers are not supported: the platform's own fetches the bundle",
    "podAffinity": "pod affinity is not supported: the platform places a run's replicas "
    "together or apart (the request's placement); choose nodes with nodeAffinity, "
    "nodeSelector and tolerations",
    "podAntiAffinity": "pod anti-affinity is not supported: the platform spreads a run's "
    "replicas over nodes (the request's placement); choose nodes with nodeAffinity, "
    "nodeSelector and tolerations",
    "matchFields": "matchFields is not supported: select nodes by their labels (matchExpressions)",
    "serviceAccountName": "pods run without a service account token of the tenant's choosing",
    "securityContext": "pods run as the tenant's user, without privileges",
    "hostNetwork": "pods have their own network",
    "workingDir": "the program runs in the bundle's code/ directory",
    "enableDynamicWorker": "dynamic workers are not supported: the gang is fixed; supported: false",
    "valueFrom": "only literal values are supported (no Secrets or ConfigMaps: a credential must "
    "not travel in a request)",
    "envFrom": "only literal env values are supported",
    "suspend": "suspended jobs are not supported; supported: false",
    "managedBy": "the job is managed by this platform; leave it out",
    "queue": "scheduling queues are not supported: replicas are scheduled as a gang by the "
    "platform",
    "priorityClass": "priority classes are not supported",
    "minResources": "minResources is not supported: the gang's quota is checked before it starts",
}


class FieldReader:
    """Walks the manifest, keeping every refusal and note instead of stopping at the first."""

    def __init__(self) -> None:
        self.refusals: list[Refusal] = []
        self.notes: list[str] = []

    def refuse(self, path: str, given: object, allowed: str) -> None:
        self.refusals.append(Refusal(path, given, allowed))

    def mapping(self, value: object, path: str, supported: tuple[str, ...]) -> dict:
        """`value` as a mapping (null: empty), its keys outside `supported` refused."""
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.refuse(path, value, "a mapping is required")
            return {}
        for key, item in value.items():
            if key not in supported:
                reason = REFUSAL_REASONS.get(str(key))
                allowed = reason or f"not supported here; supported fields: {', '.join(supported)}"
                where = join_path(path, key)
                if isinstance(item, list) and item:  # each item by its own path
                    for index, element in enumerate(item):
                        self.refuse(f"{where}[{index}]", element, allowed)
                else:
                    self.refuse(where, item, allowed)
        return value

    def integer(self, value: object, path: str, low: int, high: int | None = None) -> int | None:
        if value is None:
            return None
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or value < low
            or (high is not None and value > high)
        ):
            bound = f"from {low} to {high}" if high is not None else f"of {low} or more"
            self.refuse(path, value, f"an integer {bound} is required")
            return None
        return value

    def string(self, value: object, path: str, required: bool = False) -> str | None:
        if value is None and not required:
            return None
        if not isinstance(value, str) or not value:
            self.refuse(path, value, "a non-empty string is required")
            return None
        return value

    def strings(self, value: object, path: str) -> tuple[str, ...] | None:
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            self.refuse(path, value, "a list of strings is required")
            return None
        return tuple(value)

    def string_map(self, value: object, path: str) -> tuple[tuple[str, str], ...]:
        if value is None:
            return ()
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            self.refuse(path, value, "a mapping of strings to strings is required")
            return ()
        return tuple(sorted(value.items()))

    def choice(self, value: object, path: str, enum: type[StrEnum]) -> StrEnum | None:
        if value is None:
            return None
        try:
            return enum(value)
        except ValueError:
            self.refuse(path, value, f"allowed: {', '.join(member.value for member in enum)}")
            return None


def join_path(path: str, key: object) -> str:
    text = str(key)
    if text.replace("-", "").replace("_", "").isalnum():
        return f"{path}.{text}"
    return f"{path}[{text!r}]".replace("'", '"')
