"""The one back-off mechanism: a policy's delays and limits, the call helper and the
decorator, all on a fake clock (nothing here sleeps)."""

from __future__ import annotations

import pytest

from runtime.backoff import BackoffPolicy, LastDelay, RetryState, call_with_backoff, retry


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class Flaky:
    """Raises each of `errors` in turn, then answers `answer`."""

    def __init__(self, *errors: Exception, answer: object = "done") -> None:
        self.errors, self.answer, self.calls = list(errors), answer, 0

    def __call__(self) -> object:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return self.answer


def policy(clock: FakeClock, **fields: object) -> BackoffPolicy:
    fields.setdefault("first_delay", 1.0)
    return BackoffPolicy(sleep=clock.sleep, clock=clock, **fields)  # type: ignore[arg-type]


def test_delays_grow_by_the_factor_up_to_the_largest_delay():
    steady = BackoffPolicy(first_delay=0.5, max_delay=4.0)
    schedule = steady.schedule()
    assert [schedule.next_delay() for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    schedule.reset()
    assert schedule.next_delay() == 0.5
    assert BackoffPolicy(first_delay=2.0, factor=1.0).step(10) == 2.0


def test_an_increment_adds_a_linear_step_to_each_delay():
    linear = BackoffPolicy(first_delay=1.0, factor=1.0, increment=1.0)
    schedule = linear.schedule()
    assert [schedule.next_delay() for _ in range(4)] == [1.0, 2.0, 3.0, 4.0]
    assert BackoffPolicy(first_delay=1.0, factor=1.0, increment=1.0, max_delay=2.5).step(5) == 2.5
    with pytest.raises(ValueError, match="increment: -1 given"):
        BackoffPolicy(first_delay=1.0, increment=-1)


def test_a_linear_policy_waits_one_two_three_seconds_between_four_tries():
    clock = FakeClock()
    action = Flaky(*[ConnectionError()] * 4)
    linear = policy(clock, factor=1.0, increment=1.0, attempts=4)
    with pytest.raises(ConnectionError):
        call_with_backoff(action, linear, on=ConnectionError)
    assert action.calls == 4
    assert clock.slept == [1.0, 2.0, 3.0]


def test_jitter_draws_each_delay_within_its_fraction_of_the_step():
    lowest = BackoffPolicy(first_delay=1.0, max_delay=10.0, jitter=0.5, draw=lambda: 0.0)
    highest = BackoffPolicy(first_delay=1.0, max_delay=10.0, jitter=0.5, draw=lambda: 1.0)
    assert [lowest.delay(n) for n in range(5)] == [0.5, 1.0, 2.0, 4.0, 5.0]
    assert [highest.delay(n) for n in range(5)] == [1.0, 2.0, 4.0, 8.0, 10.0]


def test_a_policy_with_impossible_limits_is_refused():
    with pytest.raises(ValueError, match="attempts: 0 given"):
        BackoffPolicy(first_delay=1.0, attempts=0)
    with pytest.raises(ValueError, match="jitter: 2 given"):
        BackoffPolicy(first_delay=1.0, jitter=2)
    with pytest.raises(ValueError, match="factor: 0.5 given"):
        BackoffPolicy(first_delay=1.0, factor=0.5)


def test_an_accepted_error_is_tried_again_until_the_call_answers():
    clock, action = FakeClock(), Flaky(ConnectionError(), TimeoutError())
    seen: list[RetryState] = []
    answer = call_with_backoff(
        action, policy(clock), on=(ConnectionError, TimeoutError), on_retry=seen.append
    )
    assert answer == "done" and action.calls == 3
    assert clock.slept == [1.0, 2.0]
    assert [(s.attempt, type(s.error), s.delay, s.left) for s in seen] == [
        (1, ConnectionError, 1.0, None),
        (2, TimeoutError, 2.0, None),
    ]


def test_an_error_the_filter_refuses_is_raised_at_once():
    clock, action = FakeClock(), Flaky(ValueError("bad"))
    with pytest.raises(ValueError, match="bad"):
        call_with_backoff(action, policy(clock), on=lambda exc: isinstance(exc, OSError))
    assert action.calls == 1 and clock.slept == []


def test_the_last_error_is_raised_as_it_came_once_the_attempts_are_spent():
    clock = FakeClock()
    last = ConnectionError("third")
    action = Flaky(ConnectionError("first"), ConnectionError("second"), last)
    with pytest.raises(ConnectionError) as raised:
        call_with_backoff(action, policy(clock, attempts=3), on=ConnectionError)
    assert raised.value is last and action.calls == 3 and clock.slept == [1.0, 2.0]


def test_the_last_pause_is_trimmed_to_end_at_the_budget():
    clock = FakeClock()
    action = Flaky(*[ConnectionError() for _ in range(100)])
    with pytest.raises(ConnectionError):
        call_with_backoff(action, policy(clock, budget=10.0), on=ConnectionError)
    assert clock.slept == [1.0, 2.0, 4.0, 3.0]
    assert action.calls == 5  # one more try at the budget, then it ends


def test_a_deadline_given_to_the_call_wins_over_the_budget():
    clock = FakeClock()
    clock.now = 100.0
    action = Flaky(*[ConnectionError() for _ in range(100)])
    with pytest.raises(ConnectionError):
        call_with_backoff(action, policy(clock, budget=1000.0), on=ConnectionError, deadline=103.0)
    assert clock.slept == [1.0, 2.0]


def test_a_try_whose_whole_pause_does_not_fit_is_not_made():
    clock = FakeClock()
    action = Flaky(*[ConnectionError() for _ in range(100)])
    whole_or_none = policy(clock, budget=5.0, last_delay=LastDelay.WHOLE_OR_NONE)
    with pytest.raises(ConnectionError):
        call_with_backoff(action, whole_or_none, on=ConnectionError)
    assert clock.slept == [1.0, 2.0] and action.calls == 3


def test_whole_pauses_may_pass_a_budget_counted_from_the_first_failure():
    clock = FakeClock()

    def slow_then_failing() -> None:
        clock.now += 50.0  # the first answer is slow; the budget starts at its failure
        raise ConnectionError()

    steady = policy(
        clock,
        first_delay=2.0,
        factor=1.0,
        budget=5.0,
        budget_from_first_failure=True,
        last_delay=LastDelay.WHOLE,
    )
    with pytest.raises(ConnectionError):
        call_with_backoff(slow_then_failing, steady, on=ConnectionError)
    # failures at 50, 102, 154 (pauses of 2 s and 50 s answers): the second is past 55
    assert clock.slept == [2.0]


def test_giving_up_may_raise_an_error_of_its_own_chained_to_the_last():
    clock = FakeClock()

    class Unavailable(RuntimeError):
        pass

    def give_up(state: RetryState) -> None:
        raise Unavailable(f"{state.attempt} tries in {state.elapsed:.0f}s") from state.error

    with pytest.raises(Unavailable, match="3 tries in 3s") as raised:
        call_with_backoff(
            Flaky(*[OSError() for _ in range(5)]),
            policy(clock, attempts=3),
            on=OSError,
            on_give_up=give_up,
        )
    assert isinstance(raised.value.__cause__, OSError)


def test_the_decorator_retries_each_call_of_the_function():
    clock = FakeClock()
    failures = [ConnectionError(), ConnectionError()]

    @retry(policy(clock, attempts=5), on=ConnectionError)
    def fetch(name: str, *, suffix: str = "") -> str:
        if failures:
            raise failures.pop(0)
        return name + suffix

    assert fetch("model", suffix=".json") == "model.json"
    assert fetch.__name__ == "fetch"
    assert clock.slept == [1.0, 2.0]
