"""kubernetes_asyncio (which sends `watch=True` and only speaks exec v4) through the lifecycle:
create, get, list with selectors, watch, patch, delete."""

from __future__ import annotations

import asyncio
import uuid


def test_asyncio_client_lifecycle(localkube_api):
    from kubernetes_asyncio import client, config, watch

    async def run() -> None:
        configuration = client.Configuration()
        await config.load_kube_config(
            config_file=localkube_api.kubeconfig, client_configuration=configuration
        )
        async with client.ApiClient(configuration) as api_client:
            core = client.CoreV1Api(api_client)
            ns = f"a-{uuid.uuid4().hex[:6]}"
            await core.create_namespace({"metadata": {"name": ns}})
            since = (await core.list_namespaced_pod(ns)).metadata.resource_version
            body = {
                "metadata": {"name": "p", "labels": {"app": "x"}},
                "spec": {
                    "schedulerName": "nobody",
                    "containers": [{"name": "c", "image": "busybox:1", "command": ["true"]}],
                },
            }
            created = await core.create_namespaced_pod(ns, body)
            assert created.metadata.uid
            got = await core.read_namespaced_pod("p", ns)
            assert got.metadata.resource_version == created.metadata.resource_version
            assert [
                p.metadata.name
                for p in (await core.list_namespaced_pod(ns, label_selector="app in (x,y)")).items
            ] == ["p"]
            assert (await core.list_namespaced_pod(ns, label_selector="app!=x")).items == []
            patched = await core.patch_namespaced_pod(
                "p", ns, {"metadata": {"labels": {"extra": "1"}}}
            )
            assert patched.metadata.labels == {"app": "x", "extra": "1"}
            await core.delete_namespaced_pod("p", ns)

            seen = []
            async with watch.Watch().stream(
                core.list_namespaced_pod, ns, resource_version=since, timeout_seconds=1
            ) as stream:
                async for event in stream:
                    seen.append((event["type"], event["object"].metadata.name))
            assert seen == [("ADDED", "p"), ("MODIFIED", "p"), ("DELETED", "p")]

    asyncio.run(run())
