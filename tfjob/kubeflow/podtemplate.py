"""A replica type's pod template read: its `tensorflow` container, node selector, tolerations,
node affinity.

Kubeflow takes the port from the `tensorflow` container's port named `tfjob-port` (2222 when
there is none: training-operator `GetPortFromTFJob`, `setTensorflowDefaultPort`). Everything
else a pod template may hold is refused by its path (reader.py's reasons).
"""

from dataclasses import dataclass

from runtime.protocol import MAIN_CONTAINER
from tfjob.kubeflow.reader import FieldReader

# Kubeflow's TFJobDefaultContainerName is the name our pods give their main container too.
CONTAINER_NAME = MAIN_CONTAINER
PORT_NAME = "tfjob-port"
DEFAULT_PORT = 2222
GPU_RESOURCE = "nvidia.com/gpu"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


@dataclass(frozen=True)
class Container:
    """The `tensorflow` container of a replica type's pod template."""

    image: str
    command: tuple[str, ...] | None
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    requests: tuple[tuple[str, str], ...]
    limits: tuple[tuple[str, str], ...]
    port: int


@dataclass(frozen=True)
class PodTemplate:
    container: Container
    container_path: str  # where the `tensorflow` container was written
    node_selector: tuple[tuple[str, str], ...]
    tolerations: tuple[dict[str, object], ...]
    node_affinity: dict[str, object] | None = None  # the request's node_affinity.<role> shape


def read_pod_template(reader: FieldReader, value: object, path: str) -> PodTemplate | None:
    """`<replica spec>.template`, or None when it was refused (the reasons are in `reader`)."""
    before = len(reader.refusals)
    template = reader.mapping(value, path, ("metadata", "spec"))
    if template.get("metadata"):
        reader.refuse(
            f"{path}.metadata",
            template["metadata"],
            "pod labels and annotations are the platform's; leave it out",
        )
    where = f"{path}.spec"
    pod = reader.mapping(
        template.get("spec"),
        where,
        ("containers", "nodeSelector", "tolerations", "restartPolicy", "affinity"),
    )
    if "restartPolicy" in pod:
        reader.notes.append(
            f"{where}.restartPolicy: ignored, as Kubeflow ignores it (the replica spec's rules)"
        )
    container, container_path = _read_containers(
        reader, pod.get("containers"), f"{where}.containers"
    )
    node_selector = reader.string_map(pod.get("nodeSelector"), f"{where}.nodeSelector")
    tolerations = pod.get("tolerations") or []
    if not isinstance(tolerations, list) or not all(isinstance(t, dict) for t in tolerations):
        reader.refuse(f"{where}.tolerations", tolerations, "a list of tolerations is required")
        tolerations = []
    node_affinity = _read_affinity(reader, pod.get("affinity"), f"{where}.affinity")
    if len(reader.refusals) > before or container is None:
        return None
    return PodTemplate(container, container_path, node_selector, tuple(tolerations), node_affinity)


def _read_affinity(reader: FieldReader, value: object, path: str) -> dict[str, object] | None:
    """`nodeAffinity` as the request's node_affinity of a role; pod (anti-)affinity refused."""
    affinity = reader.mapping(value, path, ("nodeAffinity",))
    where = f"{path}.nodeAffinity"
    node = reader.mapping(affinity.get("nodeAffinity"), where, (REQUIRED, PREFERRED))
    if not node:
        return None
    mapped: dict[str, object] = {}
    if REQUIRED in node:
        required = reader.mapping(node[REQUIRED], f"{where}.{REQUIRED}", ("nodeSelectorTerms",))
        terms = _read_list(
            reader, required.get("nodeSelectorTerms"), f"{where}.{REQUIRED}.nodeSelectorTerms"
        )
        mapped["required"] = [
            _read_term(reader, term, f"{where}.{REQUIRED}.nodeSelectorTerms[{i}]")
            for i, term in enumerate(terms)
        ]
    if PREFERRED in node:
        preferred = []
        for i, item in enumerate(_read_list(reader, node[PREFERRED], f"{where}.{PREFERRED}")):
            at = f"{where}.{PREFERRED}[{i}]"
            entry = reader.mapping(item, at, ("weight", "preference"))
            weight = reader.integer(entry.get("weight"), f"{at}.weight", 1, 100)
            term = _read_term(reader, entry.get("preference"), f"{at}.preference")
            preferred.append({"weight": weight, "preference": term})
        mapped["preferred"] = preferred
    return mapped


def _read_list(reader: FieldReader, value: object, path: str) -> list:
    if not isinstance(value, list) or not value:
        reader.refuse(path, value, "a non-empty list is required")
        return []
    return value


def _read_term(reader: FieldReader, value: object, path: str) -> dict[str, object]:
    """A node selector term: its matchExpressions (matchFields refused)."""
    term = reader.mapping(value, path, ("matchExpressions",))
    expressions = _read_list(reader, term.get("matchExpressions"), f"{path}.matchExpressions")
    for index, item in enumerate(expressions):
        reader.mapping(item, f"{path}.matchExpressions[{index}]", ("key", "operator", "values"))
    return {"match_expressions": expressions}


def _read_containers(reader: FieldReader, value: object, path: str) -> tuple[Container | None, str]:
    """The `tensorflow` container and its path; every other container is refused."""
    if not isinstance(value, list) or not value:
        reader.refuse(path, value, f"a list holding one container named {CONTAINER_NAME}")
        return None, path
    chosen, chosen_path = None, path
    for index, item in enumerate(value):
        name = item.get("name") if isinstance(item, dict) else None
        if name == CONTAINER_NAME and chosen_path == path:
            chosen_path = f"{path}[{index}]"
            chosen = _read_container(reader, item, chosen_path)
        else:
            reader.refuse(
                f"{path}[{index}]",
                name if name is not None else item,
                f"one container named {CONTAINER_NAME} is supported (no sidecars)",
            )
    if chosen_path == path:
        reader.refuse(path, value, f"a container named {CONTAINER_NAME} is required")
    return chosen, chosen_path


def _read_container(reader: FieldReader, value: dict, path: str) -> Container | None:
    before = len(reader.refusals)
    container = reader.mapping(
        value,
        path,
        ("name", "image", "command", "args", "env", "resources", "ports", "imagePullPolicy"),
    )
    if "imagePullPolicy" in container:
        reader.notes.append(f"{path}.imagePullPolicy: not carried; the cluster's default applies")
    image = reader.string(container.get("image"), f"{path}.image", required=True)
    command = reader.strings(container.get("command"), f"{path}.command")
    args = reader.strings(container.get("args"), f"{path}.args") or ()
    env = _read_env(reader, container.get("env"), f"{path}.env")
    requests, limits = _read_resources(reader, container.get("resources"), f"{path}.resources")
    port = _read_port(reader, container.get("ports"), f"{path}.ports")
    if len(reader.refusals) > before or image is None:
        return None
    return Container(image, command, args, env, requests, limits, port)


def _read_env(reader: FieldReader, value: object, path: str) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        reader.refuse(path, value, "a list of {name, value} is required")
        return ()
    env = []
    for index, item in enumerate(value):
        where = f"{path}[{index}]"
        entry = reader.mapping(item, where, ("name", "value"))
        name = reader.string(entry.get("name"), f"{where}.name", required=True)
        text = entry.get("value", "")
        if not isinstance(text, str):
            reader.refuse(f"{where}.value", text, "a string is required")
        elif name is not None:
            env.append((name, text))
    return tuple(env)


def _read_resources(
    reader: FieldReader, value: object, path: str
) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]:
    resources = reader.mapping(value, path, ("requests", "limits"))
    supported = ("cpu", "memory", GPU_RESOURCE)
    parts = []
    for part in ("requests", "limits"):
        amounts = reader.mapping(resources.get(part), f"{path}.{part}", supported)
        parts.append(tuple((k, str(v)) for k, v in amounts.items() if k in supported))
    return parts[0], parts[1]


def _read_port(reader: FieldReader, value: object, path: str) -> int:
    if value is None:
        return DEFAULT_PORT
    if not isinstance(value, list):
        reader.refuse(path, value, "a list of container ports is required")
        return DEFAULT_PORT
    port = DEFAULT_PORT
    for index, item in enumerate(value):
        where = f"{path}[{index}]"
        entry = reader.mapping(item, where, ("name", "containerPort", "protocol"))
        if entry.get("name") != PORT_NAME:
            reader.refuse(
                where,
                entry.get("name"),
                f"only the port named {PORT_NAME} is supported (replicas reach each other "
                "on it; pods get no other Service)",
            )
            continue
        if entry.get("protocol") not in (None, "TCP"):
            reader.refuse(f"{where}.protocol", entry["protocol"], "supported: TCP")
        port = (
            reader.integer(entry.get("containerPort"), f"{where}.containerPort", 1, 65535) or port
        )
    return port
