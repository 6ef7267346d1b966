"""Syntax check of a request's `schedule`: an Airflow preset or a 5-field cron.

Airflow only parses a schedule when the DAG file is processed, far from the
person who wrote the request; checking here lets the request loader name the
bad field instead. Returns an explanation of what is wrong, or None.
"""

import re

AIRFLOW_PRESETS = (
    "@once",
    "@hourly",
    "@daily",
    "@weekly",
    "@monthly",
    "@quarterly",
    "@yearly",
    "@annually",
)

_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")

# (name, lowest, highest, names mapped to lowest + position)
CRON_FIELDS = (
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day of month", 1, 31, ()),
    ("month", 1, 12, _MONTHS),
    ("day of week", 0, 7, _DAYS),
)

_STEP = re.compile(r"^[0-9]+$")


def _parse_value(text: str, low: int, high: int, names: tuple[str, ...]) -> int | None:
    lowered = text.lower()
    if lowered in names:
        return low + names.index(lowered)
    if not text.isdigit():
        return None
    value = int(text)
    return value if low <= value <= high else None


def _explain_cron_item(
    item: str, name: str, low: int, high: int, names: tuple[str, ...]
) -> str | None:
    base, slash, step = item.partition("/")
    if slash and (not _STEP.match(step) or int(step) == 0):
        return f"the {name} step {step!r} is not a positive number"
    if base == "*":
        return None
    first, dash, last = base.partition("-")
    start = _parse_value(first, low, high, names)
    if start is None:
        return f"the {name} value {first!r} is outside {low}-{high}"
    if dash:
        end = _parse_value(last, low, high, names)
        if end is None:
            return f"the {name} value {last!r} is outside {low}-{high}"
        if end < start:
            return f"the {name} range {base!r} runs backwards"
    return None


def explain_schedule_problem(schedule: str) -> str | None:
    """None when `schedule` is a preset or a valid 5-field cron, else what is wrong."""
    if schedule.startswith("@"):
        return None if schedule in AIRFLOW_PRESETS else "unknown preset"
    fields = schedule.split()
    if len(fields) != len(CRON_FIELDS):
        return f"a cron expression has 5 fields, this one has {len(fields)}"
    for text, (name, low, high, names) in zip(fields, CRON_FIELDS, strict=True):
        for item in text.split(","):
            problem = _explain_cron_item(item, name, low, high, names)
            if problem:
                return problem
    return None
