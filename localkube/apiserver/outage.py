"""A test switch: the API server answers 503 for a while, as a real control plane blinks.

Why: kube-apiserver answers 503 (and drops connections) while its storage
elects a leader or while it restarts; clients that wait on pods for hours
must ride that out. To test that they do, a test tells a running localkube
to behave so for N seconds:

    POST /localkube/v1/outage {"seconds": 20}    → {"active": true, "secondsLeft": 20.0}
    GET  /localkube/v1/outage                    → the same shape, now
    POST /localkube/v1/outage {"seconds": 0}     → ends it early

(`python -m localkube blink --state-dir DIR --seconds 20` does the POST.)
The endpoint needs the cluster's bearer token like every request, so only the
cluster's owner can pull the switch, and it is the only request answered
during an outage besides /healthz, /livez and /readyz (a real API server's
health checks report the storage, but a test needs to see the server is still
there). Every other request, kubelets' included, gets kube-apiserver's 503:

    {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
     "message": "...", "reason": "ServiceUnavailable", "code": 503}

and no `Retry-After` (as kube-apiserver's 503s; urllib3 would otherwise wait it out
silently, hiding the outage from the code under test). Watch streams open when the
outage begins end within a second (as when an API server restarts), so
watchers relist into the 503s. The switch lives in memory only: a restarted
API server serves normally.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from localkube.apiserver import errors
from localkube.apiserver.errors import ApiError

log = logging.getLogger("localkube.apiserver.outage")

OUTAGE_PATH = "/localkube/v1/outage"
# Answered during an outage: the health checks and the switch itself.
ALWAYS_SERVED = frozenset({"/healthz", "/livez", "/readyz", OUTAGE_PATH})
# Longest outage one request may ask for.
MAX_OUTAGE_SECONDS = 3600.0

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Outage:
    """Whether the API server is 'down' now, and until when (monotonic clock)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.until = 0.0

    def begin(self, seconds: float) -> None:
        self.until = self.clock() + seconds if seconds > 0 else 0.0

    def seconds_left(self) -> float:
        return max(0.0, self.until - self.clock())

    @property
    def active(self) -> bool:
        return self.seconds_left() > 0

    def describe(self) -> dict:
        return {"active": self.active, "secondsLeft": round(self.seconds_left(), 3)}


def unavailable() -> web.Response:
    """kube-apiserver's 503 Status."""
    error = ApiError(
        503,
        "ServiceUnavailable",
        "the server is currently unable to handle the request (localkube outage switch)",
    )
    return web.Response(
        body=json.dumps(error.to_status()).encode(), status=503, content_type="application/json"
    )


def build_outage_middleware(outage: Outage) -> Callable[[web.Request, Handler], Awaitable]:
    """Answers 503 to everything but ALWAYS_SERVED while the outage lasts; runs after
    authentication, so a stranger still gets 401."""

    @web.middleware
    async def blink(request: web.Request, handler: Handler) -> web.StreamResponse:
        if outage.active and request.path not in ALWAYS_SERVED:
            return unavailable()
        return await handler(request)

    return blink


def read_seconds(body: object) -> float:
    """The `seconds` of a switch request; 400 for anything else."""
    seconds = body.get("seconds") if isinstance(body, dict) else None
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, (int, float))
        or not 0 <= seconds <= MAX_OUTAGE_SECONDS
    ):
        raise errors.bad_request(
            f"seconds: {seconds!r} given; a number from 0 to "
            f"{MAX_OUTAGE_SECONDS:g} is required (0 ends an outage)"
        )
    return float(seconds)


def outage_routes(app: web.Application, outage: Outage) -> None:
    async def show(_request: web.Request) -> web.Response:
        return web.json_response(outage.describe())

    async def switch(request: web.Request) -> web.Response:
        try:
            body = json.loads(await request.read() or b"null")
        except ValueError:
            raise errors.bad_request("the request body is not valid JSON") from None
        seconds = read_seconds(body)
        outage.begin(seconds)
        log.warning(
            "outage switch: %s", f"answering 503 for {seconds:g}s" if seconds else "serving again"
        )
        return web.json_response(outage.describe())

    app.router.add_get(OUTAGE_PATH, show)
    app.router.add_post(OUTAGE_PATH, switch)
