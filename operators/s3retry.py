"""Airflow's own S3 calls, retried through a short outage.

`archive` runs once, just before teardown deletes the pods: what it does not
get into S3 then (logs, the model recovered from a pod, run.json) is lost for
good. botocore retries a few times within a second or so; an S3 that restarts
or throttles for a minute needs more. `call_with_s3_retries` repeats one
action with exponential back-off (S3_RETRY_FIRST_DELAY_SECONDS doubling up to
S3_RETRY_MAX_DELAY_SECONDS) for at most S3_RETRY_BUDGET_SECONDS in all, logs
every retry, and retries only what waiting can cure: connection errors, time
outs, 5xx, throttling. A refusal (403, NoSuchKey, NoSuchBucket) is raised at
once, unchanged, so callers still catch the botocore error they know.

The action is a whole unit (list every page, read a whole body, upload a
whole file), so a retry starts it again from the beginning.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from botocore.exceptions import ClientError, HTTPClientError, IncompleteReadError
from botocore.exceptions import ConnectionError as BotoConnectionError

from operators.errors import PipelineError
from operators.settings import (
    S3_RETRY_BUDGET_SECONDS,
    S3_RETRY_FIRST_DELAY_SECONDS,
    S3_RETRY_MAX_DELAY_SECONDS,
)
from runtime.backoff import BackoffPolicy, RetryState, call_with_backoff

log = logging.getLogger("airflow.task")

T = TypeVar("T")

# S3 error codes that mean "try again later" (Amazon S3's and botocore's lists).
TRANSIENT_ERROR_CODES = frozenset(
    {
        "InternalError",
        "ServiceUnavailable",
        "SlowDown",
        "RequestTimeout",
        "RequestTimeoutException",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "OperationAborted",
    }
)


class S3Unavailable(PipelineError, RuntimeError):
    """S3 kept failing with transient errors for the whole retry budget."""


def is_transient_s3_error(exc: BaseException) -> bool:
    """True when waiting may cure the error: no connection, a time-out, 5xx, throttling."""
    if isinstance(exc, (BotoConnectionError, HTTPClientError, IncompleteReadError)):
        return True
    if isinstance(exc, ClientError):
        error = exc.response.get("Error") or {}
        status = (exc.response.get("ResponseMetadata") or {}).get("HTTPStatusCode") or 0
        return error.get("Code") in TRANSIENT_ERROR_CODES or status >= 500 or status == 429
    return False


def call_with_s3_retries(
    action: Callable[[], T],
    what: str,
    *,
    budget_s: float = S3_RETRY_BUDGET_SECONDS,
    first_delay_s: float = S3_RETRY_FIRST_DELAY_SECONDS,
    max_delay_s: float = S3_RETRY_MAX_DELAY_SECONDS,
    sleep: Callable[[float], None] | None = None,
    clock: Callable[[], float] | None = None,
) -> T:
    """`action()`, repeated after transient S3 errors until it works or `budget_s` is spent.

    `what` names the call in the log and the error (`put s3://bucket/key`).
    Raises the action's own error when it is not transient, and S3Unavailable
    (chained to the last error) when the budget runs out. `sleep` and `clock`
    (time.sleep, time.monotonic) are for tests.
    """
    policy = BackoffPolicy(
        first_delay=first_delay_s,
        max_delay=max_delay_s,
        budget=budget_s,
        sleep=sleep,
        clock=clock,
    )

    def note(state: RetryState) -> None:
        log.warning(
            "%s failed (%s: %s); attempt %d, retrying in %.1fs (%.0fs of %gs left)",
            what,
            type(state.error).__name__,
            state.error,
            state.attempt,
            state.delay,
            state.left,
            budget_s,
        )

    def give_up(state: RetryState) -> None:
        exc = state.error
        raise S3Unavailable(
            f"{what}: S3 still failing after {state.attempt} attempt(s) in {state.elapsed:.0f}s "
            f"(retry budget {budget_s:g}s): {type(exc).__name__}: {exc}"
        ) from exc

    # The last wait ends at the budget: one more try then.
    return call_with_backoff(
        action, policy, on=is_transient_s3_error, on_retry=note, on_give_up=give_up
    )
