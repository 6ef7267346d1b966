"""How long the pods' S3 grants last: the arithmetic `validate` and `launch` share.

A presigned SigV4 request lives at most 7 days. A grant covers the whole run
window (startup_timeout + active_deadline + a margin for the last upload) when
Airflow's credentials allow it, so a run still uploads its model even if
Airflow could not refresh anything; `validate` refuses a request whose window
is longer than that. Airflow refreshes grants at half their lifetime (or more
often), which is what keeps short-lived credentials working.
"""

from __future__ import annotations

MAX_GRANT_SECONDS = 7 * 24 * 3600  # SigV4's limit for a presigned request
GRANT_MARGIN_SECONDS = 600  # after the active deadline: the model's upload


def run_window_seconds(startup_timeout: int, active_deadline: int) -> int:
    """From launch to the last upload: what a grant should cover."""
    return startup_timeout + active_deadline + GRANT_MARGIN_SECONDS


def max_active_deadline(startup_timeout: int) -> int:
    """The longest active_deadline whose run window one grant can cover."""
    return MAX_GRANT_SECONDS - GRANT_MARGIN_SECONDS - startup_timeout


def grant_lifetime(startup_timeout: int, active_deadline: int, cap: int) -> int:
    """Seconds a grant is signed for: the run window, at most `cap` and SigV4's limit."""
    return max(1, min(run_window_seconds(startup_timeout, active_deadline), cap, MAX_GRANT_SECONDS))


def refresh_interval(lifetime: int, longest: float) -> float:
    """Sign anew at half the lifetime, and at least every `longest` seconds."""
    return max(1.0, min(lifetime / 2, longest))
