"""Airflow pools read and written: through the REST API or through Airflow's own model.

Why this exists: what the pools should be (`tfjob-tenant-<name>`, one per
tenant) is decided in `tenancy.apply`; this module only talks to Airflow,
and it is the one place that does so for pools. Two clients answer the same
`PoolClient` protocol:

- `RestPoolClient`, for tshell, the start-up script, the tests and the bench:
  `/api/v2/pools` with a bearer token from a callable (asked on every call,
  so a caller may refresh it);
- `DatabasePoolClient`, for a process with Airflow's database configured.

Every REST pool call is safe to repeat: reads and PATCHes are idempotent, and
a create that meets 409 (an earlier try whose answer was lost, or another
apply) updates instead. So what a real network needs is asked again, a few
times: no answer in time, a dropped connection, and 502/503/504 from Airflow
or a proxy before it. Anything else (4xx, and a 500, which is a real server
error) is raised at once with the server's detail:

    PoolApiError            a refused or failed call (4xx, 500 and other 5xx)
    ├── PoolUnavailableError  no answer, or 502/503/504: asked again, then raised
    └── PoolConflictError     409: the pool exists (create_pool then updates it)
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from runtime.backoff import BackoffPolicy, call_with_backoff
from tenancy.errors import TenancyError
from tfjob.jsontypes import JsonObject

POOLS_PATH = "/api/v2/pools"
# The wait for each answer; longer is a hung server or a lost connection: asked again.
POOL_REQUEST_TIMEOUT_S = 60.0
# Tries of one call that gets no answer or 502/503/504 (waiting 1 s, 2 s, 3 s between).
POOL_REQUEST_ATTEMPTS = 4
POOL_BACKOFF = BackoffPolicy(first_delay=1.0, factor=1.0, increment=1.0)
# A proxy that cannot reach Airflow (502, 504) or a server not ready or shedding load (503).
UNAVAILABLE_STATUSES = (502, 503, 504)
# Deferred tasks (a waiting train trigger) keep their slot: the pool caps running jobs.
POOL_INCLUDE_DEFERRED = True


@dataclass(frozen=True)
class PoolSpec:
    name: str
    slots: int
    description: str


class PoolClient(Protocol):
    def read_pool(self, name: str) -> PoolSpec | None: ...
    def create_pool(self, spec: PoolSpec) -> None: ...
    def update_pool(self, spec: PoolSpec) -> None: ...


class PoolApiError(TenancyError, RuntimeError):
    """Airflow refused or failed a pool call; the message has its detail."""


class PoolUnavailableError(PoolApiError):
    """No answer in time, or HTTP 502/503/504 from Airflow or a proxy; worth asking again."""


class PoolConflictError(PoolApiError):
    """Airflow already has the pool (HTTP 409)."""


class RestPoolClient:
    """Pools through Airflow's REST API (`/api/v2/pools`) with a bearer token."""

    def __init__(
        self, base_url: str, token: Callable[[], str], timeout: float = POOL_REQUEST_TIMEOUT_S
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def _request(self, method: str, path: str, body: JsonObject | None = None) -> JsonObject | None:
        return call_with_backoff(
            lambda: self._request_once(method, path, body),
            POOL_BACKOFF.with_changes(attempts=POOL_REQUEST_ATTEMPTS),
            on=PoolUnavailableError,
        )

    def _request_once(self, method: str, path: str, body: JsonObject | None) -> JsonObject | None:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.base_url + path,
            data=data,
            method=method,
            headers={
                "Authorization": f"Bearer {self.token()}",
                "Content-Type": "application/json",
                "Accept": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                payload = response.read()
        except urllib.error.HTTPError as exc:
            if exc.code == 404 and method == "GET":
                return None
            detail = exc.read().decode(errors="replace")[:500]
            if exc.code == 409:
                error_type = PoolConflictError
            elif exc.code in UNAVAILABLE_STATUSES:
                error_type = PoolUnavailableError
            else:
                error_type = PoolApiError
            raise error_type(
                f"Airflow at {self.base_url}: {method} {path} answered HTTP {exc.code}: {detail}"
            ) from None
        except (urllib.error.URLError, OSError) as exc:
            raise PoolUnavailableError(
                f"Airflow is not reachable at {self.base_url} ({getattr(exc, 'reason', exc)})"
            ) from None
        return json.loads(payload) if payload else {}

    def read_pool(self, name: str) -> PoolSpec | None:
        found = self._request("GET", f"{POOLS_PATH}/{urllib.parse.quote(name)}")
        if found is None:
            return None
        return PoolSpec(found["name"], int(found["slots"]), found.get("description") or "")

    def create_pool(self, spec: PoolSpec) -> None:
        try:
            self._request(
                "POST",
                POOLS_PATH,
                {
                    "name": spec.name,
                    "slots": spec.slots,
                    "description": spec.description,
                    "include_deferred": POOL_INCLUDE_DEFERRED,
                },
            )
        except PoolConflictError:
            # An earlier try whose answer was lost, or another apply, created it first.
            self.update_pool(spec)

    def update_pool(self, spec: PoolSpec) -> None:
        mask = "update_mask=slots&update_mask=description&update_mask=include_deferred"
        self._request(
            "PATCH",
            f"{POOLS_PATH}/{urllib.parse.quote(spec.name)}?{mask}",
            # Airflow 3.3 validates a patched pool's body as a whole pool: without its
            # name it answers 422 ("pool": field required) whatever the update_mask says.
            {
                "pool": spec.name,
                "slots": spec.slots,
                "description": spec.description,
                "include_deferred": POOL_INCLUDE_DEFERRED,
            },
        )


class DatabasePoolClient:
    """Pools through Airflow's model, for processes with Airflow's database configured."""

    def read_pool(self, name: str) -> PoolSpec | None:
        from airflow.models.pool import Pool

        pool = Pool.get_pool(name)
        if pool is None:
            return None
        return PoolSpec(pool.pool, int(pool.slots), pool.description or "")

    def _write(self, spec: PoolSpec) -> None:
        from airflow.models.pool import Pool

        Pool.create_or_update_pool(spec.name, spec.slots, spec.description, POOL_INCLUDE_DEFERRED)

    create_pool = _write
    update_pool = _write


__all__ = [
    "DatabasePoolClient",
    "PoolApiError",
    "PoolClient",
    "PoolConflictError",
    "PoolSpec",
    "PoolUnavailableError",
    "RestPoolClient",
]
