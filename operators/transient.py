"""Which Kubernetes API failures are weather, not verdicts, and how long to wait them out.

A real control plane blinks: kube-apiserver answers 500/503 while its storage
elects a leader, 502/504 through a load balancer during a rollout, 429 when
priority and fairness sheds load, and connections drop (a restarted API
server, an idle proxy). None of that says anything about the pods. The steps
that wait on a run (the launch watch, the delivery of the ClusterSpec, the
train trigger) treat such a failure as transient: they back off and ask again
until the run's own deadline, and never fail the run on one such error.

The rule, in one place:

- transient: an API answer 429, 500, 502, 503 or 504; a connection refused,
  reset or dropped mid-answer; a timeout (urllib3's and aiohttp's errors,
  `ConnectionError`, `TimeoutError`). An exec whose WebSocket handshake got
  one of those statuses counts too (the client reports it as status 0 with
  "Handshake status 503" in the reason).
- final: every other 4xx (400, 401, 403, 404, 422, ...): asking again cannot
  help. 409 and 410 are left to the caller: 410 Gone on a watch means "relist
  now" (no back-off), 409 Conflict on a delete with preconditions means "not
  ours any more".

`API_BACKOFF` is the policy (runtime/backoff.py) for Kubernetes calls:
0.5 s doubling to 10 s, each delay drawn in [½, 1] of its step, so clients
that failed together do not come back together.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import TypeVar

from runtime.backoff import BackoffPolicy, RetryState, call_with_backoff

# The API answers that say "ask again later" (Kubernetes sends Retry-After with most).
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
# A watch whose resourceVersion is too old: relist at once, no back-off.
GONE_STATUS = 410

# Back-off between two tries of a Kubernetes call, in seconds.
API_FIRST_DELAY_SECONDS = 0.5
API_LONGEST_DELAY_SECONDS = 10.0
API_BACKOFF = BackoffPolicy(
    first_delay=API_FIRST_DELAY_SECONDS, max_delay=API_LONGEST_DELAY_SECONDS, jitter=0.5
)

# kubernetes.stream reports a refused exec upgrade as ApiException(status=0,
# reason="Handshake status 503 Service Unavailable -+-+- {...}").
_HANDSHAKE_STATUS = re.compile(r"Handshake status (\d{3})")

T = TypeVar("T")


def _connection_error_types() -> tuple[type[BaseException], ...]:
    """Dropped connections and timeouts, as each client library raises them."""
    kinds: list[type[BaseException]] = [ConnectionError, TimeoutError]
    try:
        import urllib3.exceptions

        kinds.append(urllib3.exceptions.HTTPError)  # MaxRetryError, ProtocolError, timeouts
    except ImportError:  # pragma: no cover - the sync client always brings urllib3
        pass
    try:
        import aiohttp

        kinds.append(aiohttp.ClientConnectionError)  # reset, refused, server disconnected
        kinds.append(aiohttp.ClientPayloadError)  # a response cut off mid-body
    except ImportError:  # pragma: no cover - the async client always brings aiohttp
        pass
    try:
        import websocket

        kinds.append(websocket.WebSocketConnectionClosedException)
        kinds.append(websocket.WebSocketTimeoutException)
    except ImportError:  # pragma: no cover
        pass
    return tuple(kinds)


_CONNECTION_ERRORS: tuple[type[BaseException], ...] | None = None


def api_status_of(exc: BaseException) -> int | None:
    """The HTTP status an API error carries (an exec's handshake status included), else None."""
    status = getattr(exc, "status", None)
    if isinstance(status, int) and status >= 100:
        return status
    match = _HANDSHAKE_STATUS.search(str(getattr(exc, "reason", "") or exc))
    return int(match.group(1)) if match else None


def is_transient(exc: BaseException) -> bool:
    """Whether asking the API again later may well succeed (see the module docstring)."""
    global _CONNECTION_ERRORS
    status = api_status_of(exc)
    if status is not None:
        return status in TRANSIENT_STATUSES
    if _CONNECTION_ERRORS is None:
        _CONNECTION_ERRORS = _connection_error_types()
    return isinstance(exc, _CONNECTION_ERRORS)


def describe_api_error(exc: BaseException) -> str:
    """A short line for a log: `503 Service Unavailable` or `ServerDisconnectedError: ...`."""
    status = api_status_of(exc)
    if status is not None:
        reason = getattr(exc, "reason", None)
        if reason and not _HANDSHAKE_STATUS.search(str(reason)):
            return f"{status} {reason}"
        return f"HTTP {status}"
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def call_with_retries(
    call: Callable[[], T],
    *,
    deadline: float,
    what: str,
    log: logging.Logger,
    policy: BackoffPolicy = API_BACKOFF,
) -> T:
    """`call()`, asked again after each transient failure until `deadline` (of the policy's
    clock, time.monotonic by default).

    A final error, or a transient one at the deadline, is raised as it came.
    """

    def note(state: RetryState) -> None:
        log.warning(
            "%s: %s (transient); asking again in %.1fs",
            what,
            describe_api_error(state.error),
            state.delay,
        )

    return call_with_backoff(call, policy, on=is_transient, deadline=deadline, on_retry=note)
