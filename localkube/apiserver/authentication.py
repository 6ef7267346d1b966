"""Who may use the API server: the holder of the cluster's bearer token (DIR/token), nobody else.

Why: the server listens on 127.0.0.1, where any local user can connect, and a pod it admits runs
with the host's root rights. So every request (REST, watch, pods/log, the pods/exec WebSocket
upgrade, discovery and /version) needs `Authorization: Bearer <token>`. Without it, or with
another token, the answer is the 401 Status a real API server sends
(`{"kind": "Status", ..., "reason": "Unauthorized", "code": 401}`), given by a middleware before
any handler runs: a refused exec is never upgraded, a refused watch never registers.

/healthz, /livez and /readyz stay open, as on a real API server, whose default RBAC lets
anonymous users read them (the system:public-info-viewer ClusterRole): they answer "ok" and
nothing else. There is one identity and no authorization: whoever has the token may do anything.

The header is read as kube-apiserver's bearer-token authenticator reads it (scheme compared
case-insensitively, surrounding space trimmed). Tokens are compared with hmac.compare_digest, so
the time an answer takes does not tell how much of a guess was right.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from localkube.apiserver import errors
from localkube.apiserver.routes import error_response

log = logging.getLogger("localkube.apiserver.authentication")

OPEN_PATHS = frozenset({"/healthz", "/livez", "/readyz"})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def bearer_token_of(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header; None for anything else."""
    parts = (header or "").strip().split(" ")
    if len(parts) < 2 or parts[0].lower() != "bearer" or not parts[1]:
        return None
    return parts[1]


def is_authorized(header: str | None, token: str) -> bool:
    given = bearer_token_of(header)
    if given is None:
        return False
    return hmac.compare_digest(given.encode("utf-8", "backslashreplace"), token.encode())


def build_authentication_middleware(token: str) -> Callable[[web.Request, Handler], Awaitable]:
    """The aiohttp middleware that refuses (401) every request without `token`."""
    if not token:
        raise ValueError("the API server needs a non-empty bearer token to check requests")

    @web.middleware
    async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
        header = request.headers.get("Authorization")
        if request.path in OPEN_PATHS or is_authorized(header, token):
            return await handler(request)
        log.warning(
            "refused %s %s from %s: %s",
            request.method,
            request.path,
            request.remote,
            "no bearer token" if bearer_token_of(header) is None else "wrong token",
        )
        return error_response(errors.unauthorized())

    return authenticate
