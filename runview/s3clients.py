"""One boto3 S3 client per tenant connection in the API server, made again every minute.

Why this exists: building a client (the amazon provider's S3Hook, then
botocore parsing S3's service model) costs 0.1-0.5 s of CPU, and the TFJob
tab asks for a live run's curves every 2 s; on two busy cores the API
server, which also serves Airflow's own UI and the tasks' execution API,
spent its time making clients (a file listing took 16 s). A client is
thread-safe and holds no per-request state, so one per connection id is
shared by every request for `ttl_s`; after that the connection is read
again, so a rotated or revoked key takes effect within a minute. At most
MAX_CLIENTS connections are kept (one per tenant in practice).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from botocore.client import BaseClient

CLIENT_TTL_S = 60.0
MAX_CLIENTS = 256


@dataclass(frozen=True)
class _Made:
    client: BaseClient
    made_at: float


class S3Clients:
    """Clients by Airflow connection id, each made by `make` at most once per `ttl_s`."""

    def __init__(
        self,
        make: Callable[[str], BaseClient],
        ttl_s: float = CLIENT_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._make, self.ttl_s, self._clock = make, ttl_s, clock
        self._clients: dict[str, _Made] = {}
        self._lock = threading.Lock()

    def connect(self, conn_id: str) -> BaseClient:
        """The connection's client; made now when there is none younger than `ttl_s`."""
        with self._lock:
            kept = self._clients.get(conn_id)
            if kept is not None and self._clock() - kept.made_at < self.ttl_s:
                return kept.client
        # Made outside the lock: one slow connection must not hold up the others. Two
        # requests racing here both make one; the later replaces the earlier.
        client = self._make(conn_id)
        with self._lock:
            if conn_id not in self._clients and len(self._clients) >= MAX_CLIENTS:
                del self._clients[min(self._clients, key=lambda c: self._clients[c].made_at)]
            self._clients[conn_id] = _Made(client, self._clock())
        return client


def make_s3_client(conn_id: str) -> BaseClient:
    """A client with the Airflow connection's settings (the amazon provider's S3Hook)."""
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook

    return S3Hook(aws_conn_id=conn_id).get_conn()
