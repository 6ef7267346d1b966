"""The WSGI layer between the gate and moto that saves each change before it is answered.

Why this exists: a client that got a success answer from the local S3 relies
on the change (a bundle uploaded, a model published, a log deleted). This
layer sits under both listeners' gates (scripts/s3_gate.py), so presigned
POST uploads from pods pass through it as well as the host's requests. For a
request that can change something (any method but GET, HEAD and OPTIONS), it:

1. lets moto handle it while collecting what moto's backend changed
   (scripts/s3_sync.py `collect_changes`);
2. holds moto's answer back (WSGI servers send nothing before the first body
   chunk) and saves those changes to the disk store, fsync'ed;
3. only then lets the answer go. When saving fails, the client gets 500
   InternalError instead of moto's answer, naming the reason: the change is
   then in memory only and is gone after a restart.

A request to moto's own API (`/moto-api/...`, host listener only; e.g. reset)
may change anything: the whole store is brought up to date after it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any

from scripts.s3_checks import Refused, WsgiApp
from scripts.s3_gate import answer_error
from scripts.s3_store import StoreError
from scripts.s3_sync import BackendMirror, collect_changes

READ_ONLY_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class PersistingMiddleware:
    """Saves what each request changed before its answer leaves (see the module docstring)."""

    def __init__(self, app: WsgiApp, mirror: BackendMirror) -> None:
        self.app = app
        self.mirror = mirror

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD", "GET") in READ_ONLY_METHODS:
            return self.app(environ, start_response)
        held: list[Any] = []

        def hold(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            held[:] = [status, headers, exc_info]
            return refuse_write

        with collect_changes() as changes:
            body = self.app(environ, hold)
        try:
            if not held:
                raise RuntimeError("moto returned without starting its answer")
            if environ.get("PATH_INFO", "").startswith("/moto-api/"):
                self.mirror.save_everything()
            else:
                self.mirror.save_changes(changes)
        except (OSError, StoreError, RuntimeError) as error:
            close_body(body)
            message = (
                f"the local S3 could not save this change under {self.mirror.store.root}: "
                f"{error}. It is in memory only and will be lost when the server stops."
            )
            print(
                f"s3 server: {environ.get('REQUEST_METHOD')} {environ.get('PATH_INFO')}: {message}",
                file=sys.stderr,
                flush=True,
            )
            return answer_error(environ, start_response, Refused("InternalError", message, 500))
        start_response(*held)
        return body


def refuse_write(_data: bytes) -> None:
    # PEP 3333's write() would send the answer before the change is saved; moto never uses it.
    raise RuntimeError("write() is not supported under PersistingMiddleware")


def close_body(body: Iterable[bytes]) -> None:
    close = getattr(body, "close", None)
    if close is not None:
        close()
