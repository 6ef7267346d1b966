"""Defaulting the API server applies on create, as the real one does (what clients read back)."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import uuid

SERVICE_CIDR = ipaddress.ip_network("10.96.0.0/16")


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_uid() -> str:
    return str(uuid.uuid4())


def default_pod(pod: dict) -> None:
    spec = pod.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("serviceAccountName", spec.get("serviceAccount") or "default")
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("priority", 0)
    spec.setdefault(
        "tolerations",
        [
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
            {
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
        ],
    )
    for container in spec.get("initContainers") or []:
        default_container(container)
    for container in spec.get("containers") or []:
        default_container(container)
    status = pod.setdefault("status", {})
    status.setdefault("phase", "Pending")
    status["qosClass"] = qos_class(spec)


def default_container(container: dict) -> None:
    image = container.get("image", "")
    tag = image.rsplit(":", 1)[1] if ":" in image.rsplit("/", 1)[-1] else ""
    container.setdefault("imagePullPolicy", "Always" if tag in ("", "latest") else "IfNotPresent")
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    resources = container.setdefault("resources", {})
    limits = resources.get("limits") or {}
    if limits:
        requests = resources.setdefault("requests", {})
        for name, value in limits.items():
            requests.setdefault(name, value)
    for port in container.get("ports") or []:
        port.setdefault("protocol", "TCP")


def qos_class(spec: dict) -> str:
    containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    requests_any = limits_all = False
    guaranteed = bool(containers)
    for container in containers:
        resources = container.get("resources") or {}
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        if requests or limits:
            requests_any = True
        for name in ("cpu", "memory"):
            if name not in limits or requests.get(name, limits.get(name)) != limits.get(name):
                guaranteed = False
        limits_all = limits_all or bool(limits)
    if guaranteed:
        return "Guaranteed"
    return "Burstable" if requests_any else "BestEffort"


def default_service(service: dict, taken: set[str]) -> None:
    spec = service.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if spec.get("clusterIP") is None:
        for host in SERVICE_CIDR.hosts():
            if str(host) not in taken and not str(host).endswith(".1"):
                spec["clusterIP"] = str(host)
                break
    if spec.get("clusterIP") and spec["clusterIP"] != "None":
        spec.setdefault("clusterIPs", [spec["clusterIP"]])
    for port in spec.get("ports") or []:
        port.setdefault("protocol", "TCP")
        port.setdefault("targetPort", port.get("port"))
    service.setdefault("status", {"loadBalancer": {}})


def default_secret(secret: dict) -> None:
    secret.setdefault("type", "Opaque")
    string_data = secret.pop("stringData", None) or {}
    data = secret.setdefault("data", {}) if string_data else secret.get("data")
    for key, value in string_data.items():
        data[key] = base64.b64encode(str(value).encode()).decode()


def default_namespace(namespace: dict) -> None:
    namespace.setdefault("spec", {"finalizers": ["kubernetes"]})
    namespace.setdefault("status", {})["phase"] = "Active"
    labels = namespace["metadata"].setdefault("labels", {})
    labels.setdefault("kubernetes.io/metadata.name", namespace["metadata"]["name"])


def default_event(event: dict) -> None:
    stamp = now_rfc3339()
    event.setdefault("firstTimestamp", event.get("eventTime") or stamp)
    event.setdefault("lastTimestamp", event.get("firstTimestamp") or stamp)
    event.setdefault("count", 1)
    event.setdefault("type", "Normal")
    event.setdefault("source", {})
    event.setdefault("reportingComponent", "")
    event.setdefault("reportingInstance", "")


def apply_defaults(resource: str, obj: dict, taken_service_ips: set[str] | None = None) -> None:
    if resource == "pods":
        default_pod(obj)
    elif resource == "services":
        default_service(obj, taken_service_ips or set())
    elif resource == "secrets":
        default_secret(obj)
    elif resource == "namespaces":
        default_namespace(obj)
    elif resource == "events":
        default_event(obj)
