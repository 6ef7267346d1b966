"""Discovery documents (/version, /api, /api/v1, /apis) that clients and kubectl read first."""

from __future__ import annotations

from localkube.apiserver.resources import CORE_GROUP_VERSION, GROUP_RESOURCES, RESOURCES

VERSION = {
    "major": "1",
    "minor": "30",
    "gitVersion": "v1.30.0-localkube",
    "gitCommit": "",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.22",
    "compiler": "gc",
    "platform": "linux/amd64",
}

SUBRESOURCE_VERBS = {
    "status": ["get", "patch", "update"],
    "binding": ["create"],
    "log": ["get"],
    "exec": ["create", "get"],
    "finalize": ["update"],
}


def api_versions(server_address: str) -> dict:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def api_groups() -> dict:
    groups = []
    for group_version in GROUP_RESOURCES:
        group, version = group_version.split("/")
        entry = {"groupVersion": group_version, "version": version}
        groups.append({"name": group, "versions": [entry], "preferredVersion": entry})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def group_resources(group_version: str) -> dict | None:
    """The APIResourceList of a non-core group version; None when not served."""
    served = GROUP_RESOURCES.get(group_version)
    if not served:
        return None
    resources = [
        {
            "name": info.plural,
            "singularName": info.singular,
            "namespaced": info.namespaced,
            "kind": info.kind,
            "verbs": list(info.verbs),
            **({"shortNames": list(info.short_names)} if info.short_names else {}),
        }
        for info in served
    ]
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }


def core_resources() -> dict:
    resources = []
    for info in RESOURCES.values():
        if info.group_version != CORE_GROUP_VERSION:
            continue
        entry = {
            "name": info.plural,
            "singularName": info.singular,
            "namespaced": info.namespaced,
            "kind": info.kind,
            "verbs": list(info.verbs),
        }
        if info.short_names:
            entry["shortNames"] = list(info.short_names)
        if info.plural == "pods":
            entry["categories"] = ["all"]
        resources.append(entry)
        for sub in info.subresources:
            kind = {"binding": "Binding", "log": "Pod", "exec": "PodExecOptions"}.get(
                sub, info.kind
            )
            resources.append(
                {
                    "name": f"{info.plural}/{sub}",
                    "singularName": "",
                    "namespaced": info.namespaced,
                    "kind": kind,
                    "verbs": SUBRESOURCE_VERBS[sub],
                }
            )
    return {"kind": "APIResourceList", "groupVersion": "v1", "resources": resources}
