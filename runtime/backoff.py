"""One back-off mechanism for every retry, on the host and in the pods.

The world we call is unreliable in the same way everywhere (an API server
that blinks, an S3 that restarts, an Airflow behind a proxy), so every retry
is written once: a frozen `BackoffPolicy` says how long to wait between two
tries and when to give up; `call_with_backoff` (and the `retry` decorator over
it) asks again while a predicate calls the error worth waiting for, calls a
hook before each pause (to log it) and one when it gives up (to raise an error
of its own), and otherwise raises the last error as it came. Loops that retry
more than one call (a list, then a watch) walk a `Backoff` schedule of the
same policy and `reset()` it after a call that got through.

Delays: `first_delay · factorⁿ + increment · n` capped at `max_delay` (a
factor of 1 with an increment walks a linear 1 s, 2 s, 3 s), each drawn in
[1 - jitter, 1] of its step so that clients that failed together do not come
back together. Limits: at most `attempts` tries, within `budget` seconds
counted from the first try (or from the first failure), or before an
absolute `deadline` given per call; `last_delay` says what becomes of the
pause that would cross that time. Time (`sleep`, `clock`) and chance
(`draw`) can be replaced, so tests never sleep.

Standard library only and no imports of the project: the pods run it.
"""

from __future__ import annotations

import enum
import functools
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, TypeVar

T = TypeVar("T")

if TYPE_CHECKING:  # pods may run an older Python than the host: no runtime alias
    from typing import TypeAlias

    # Which errors are worth another try: a predicate, an exception type or a tuple of them.
    ErrorFilter: TypeAlias = (
        Callable[[Exception], bool] | type[Exception] | tuple[type[Exception], ...]
    )


class LastDelay(enum.Enum):
    """What becomes of a pause that would end past the deadline."""

    TRIMMED = "trimmed"  # it ends at the deadline: one more try then; a failure after it ends
    WHOLE_OR_NONE = "whole or none"  # a try whose whole pause does not fit is not made
    WHOLE = "whole"  # it is taken whole; the tries end once the deadline has passed


@dataclass(frozen=True)
class RetryState:
    """One failed try, as the hooks see it."""

    attempt: int  # tries made so far, this one included
    error: Exception
    delay: float  # the pause before the next try (0 when giving up)
    elapsed: float  # seconds since the first try
    left: float | None  # seconds to the deadline, None when there is none


@dataclass(frozen=True)
class BackoffPolicy:
    """How long to wait between tries, and when to stop (see the module docstring)."""

    first_delay: float
    max_delay: float = math.inf
    factor: float = 2.0
    increment: float = 0.0
    jitter: float = 0.0
    attempts: int | None = None
    budget: float | None = None
    budget_from_first_failure: bool = False
    last_delay: LastDelay = LastDelay.TRIMMED
    # None: time.sleep, time.monotonic, random.random, looked up at each use.
    sleep: Callable[[float], None] | None = field(default=None, compare=False, repr=False)
    clock: Callable[[], float] | None = field(default=None, compare=False, repr=False)
    draw: Callable[[], float] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.first_delay < 0 or self.max_delay < 0:
            raise ValueError(f"delays: {self.first_delay}, {self.max_delay} given; need ≥ 0")
        if self.increment < 0:
            raise ValueError(f"increment: {self.increment} given; need ≥ 0")
        if self.factor < 1:
            raise ValueError(f"factor: {self.factor} given; at least 1 is needed")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"jitter: {self.jitter} given; it is a fraction in [0, 1]")
        if self.attempts is not None and self.attempts < 1:
            raise ValueError(f"attempts: {self.attempts} given; at least 1 is needed")

    def with_changes(self, **changes: object) -> BackoffPolicy:
        """This policy with some fields changed (a test's clock, a call's budget)."""
        return replace(self, **changes)  # type: ignore[arg-type]

    def step(self, failures: int) -> float:
        """The pause after `failures` earlier failures, before jitter."""
        grown = self.first_delay * self.factor ** min(failures, 64)
        return min(self.max_delay, grown + self.increment * failures)

    def delay(self, failures: int) -> float:
        """The pause after `failures` earlier failures, jitter drawn."""
        step = self.step(failures)
        if not self.jitter:
            return step
        draw = self.draw or random.random
        return step * (1 - self.jitter + self.jitter * draw())

    def now(self) -> float:
        return (self.clock or time.monotonic)()

    def pause(self, seconds: float) -> None:
        (self.sleep or time.sleep)(seconds)

    def schedule(self) -> Backoff:
        """A fresh walk through this policy's delays."""
        return Backoff(self)


class Backoff:
    """The delays of one run of retries; `reset()` after a call that got through."""

    def __init__(self, policy: BackoffPolicy) -> None:
        self.policy = policy
        self.failures = 0

    def next_delay(self) -> float:
        delay = self.policy.delay(self.failures)
        self.failures += 1
        return delay

    def reset(self) -> None:
        self.failures = 0


def _as_predicate(on: ErrorFilter) -> Callable[[Exception], bool]:
    if isinstance(on, type) or isinstance(on, tuple):
        kinds = on
        return lambda exc: isinstance(exc, kinds)
    return on


def call_with_backoff(
    action: Callable[[], T],
    policy: BackoffPolicy,
    *,
    on: ErrorFilter,
    deadline: float | None = None,
    on_retry: Callable[[RetryState], None] | None = None,
    on_give_up: Callable[[RetryState], None] | None = None,
) -> T:
    """`action()`, asked again after each error that `on` accepts, as `policy` says.

    `deadline` is a time of the policy's clock (it wins over the policy's
    budget). `on_retry` is called before each pause; `on_give_up` when the
    tries end on an accepted error (it may raise an error of its own, chained
    to that one); then that error is raised as it came. An error `on` refuses
    is raised at once.
    """
    accepts = _as_predicate(on)
    schedule = policy.schedule()
    started = policy.now()
    attempt = 0
    while True:
        attempt += 1
        try:
            return action()
        except Exception as exc:
            if not accepts(exc):
                raise
            now = policy.now()
            if deadline is None and policy.budget is not None:
                origin = now if policy.budget_from_first_failure else started
                deadline = origin + policy.budget
            delay = schedule.next_delay()
            left = None if deadline is None else deadline - now
            state = RetryState(attempt, exc, 0.0, now - started, left)
            if _gives_up(policy, attempt, delay, left):
                if on_give_up is not None:
                    on_give_up(state)
                raise
            if left is not None and policy.last_delay is LastDelay.TRIMMED:
                delay = min(delay, left)
            if on_retry is not None:
                on_retry(replace(state, delay=delay))
            policy.pause(delay)


def _gives_up(policy: BackoffPolicy, attempt: int, delay: float, left: float | None) -> bool:
    if policy.attempts is not None and attempt >= policy.attempts:
        return True
    if left is None:
        return False
    if policy.last_delay is LastDelay.WHOLE_OR_NONE:
        return delay > left
    if policy.last_delay is LastDelay.WHOLE:
        return left < 0
    return left <= 0


def retry(
    policy: BackoffPolicy,
    *,
    on: ErrorFilter,
    on_retry: Callable[[RetryState], None] | None = None,
    on_give_up: Callable[[RetryState], None] | None = None,
) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """A decorator: each call of the function goes through `call_with_backoff`."""

    def decorate(function: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(function)
        def retried(*args: object, **kwargs: object) -> T:
            return call_with_backoff(
                lambda: function(*args, **kwargs),
                policy,
                on=on,
                on_retry=on_retry,
                on_give_up=on_give_up,
            )

        return retried

    return decorate
