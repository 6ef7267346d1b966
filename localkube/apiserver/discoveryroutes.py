"""The routes that answer without the object store: discovery, health and what is not served.

`/version`, `/api`, `/apis` and each group version's resource list (documents of
discovery.py), `/healthz`, `/livez`, `/readyz`, and a 404 Status for other groups and
`/openapi`. Kept apart from routes.py, which serves the objects themselves.
"""

from __future__ import annotations

from aiohttp import web

from localkube.apiserver import discovery
from localkube.apiserver.errors import ApiError
from localkube.apiserver.resources import GROUP_RESOURCES
from localkube.apiserver.routes import error_response, json_response


def discovery_routes(app: web.Application, address: str) -> None:
    """Add the discovery and health routes for a server reachable at `address`."""

    async def version(_request: web.Request) -> web.Response:
        return json_response(discovery.VERSION)

    async def api(_request: web.Request) -> web.Response:
        return json_response(discovery.api_versions(address))

    async def apis(_request: web.Request) -> web.Response:
        return json_response(discovery.api_groups())

    def group_version(served: str):
        async def resources(_request: web.Request) -> web.Response:
            return json_response(discovery.group_resources(served))

        return resources

    async def v1(_request: web.Request) -> web.Response:
        return json_response(discovery.core_resources())

    async def healthz(_request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def not_served(_request: web.Request) -> web.Response:
        return error_response(
            ApiError(404, "NotFound", "the server could not find the requested resource")
        )

    app.router.add_get("/version", version)
    app.router.add_get("/version/", version)
    app.router.add_get("/api", api)
    app.router.add_get("/api/", api)
    app.router.add_get("/apis", apis)
    app.router.add_get("/apis/", apis)
    app.router.add_get("/api/v1", v1)
    app.router.add_get("/api/v1/", v1)
    for path in ("/healthz", "/livez", "/readyz"):
        app.router.add_get(path, healthz)
    for group_version_path in GROUP_RESOURCES:
        app.router.add_get(f"/apis/{group_version_path}", group_version(group_version_path))
    app.router.add_route("*", "/apis/{tail:.*}", not_served)
    app.router.add_route("*", "/openapi/{tail:.*}", not_served)
