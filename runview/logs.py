"""A replica's log lines and the run's training curves, as the TFJob tab shows them.

Why this exists: the tab reads the same text from two places (a live pod's
log tail while the run is active, the archived `logs/<replica>.log` after)
and must treat both alike: the lines a person asked for (the last N, those
holding a filter text) and the `TFJOB_METRIC {json}` points of each replica
(runtime/metric_lines.py). Logs are untrusted input, so every input here is
bounded: the replica name by pattern, the filter and tail by size, an
archived log by the bytes read of its end (MAX_LOG_BYTES for the curves, which
are then kept per run, MAX_PANE_LOG_BYTES for the log pane), a line by
LOG_LINE_MAX_BYTES characters. Pure text in, JSON-ready values out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from operators.podlogs import describe_cut_line, split_log_lines
from operators.settings import LOG_LINE_MAX_BYTES
from runtime.metric_lines import MetricPoint, collect_metric_points
from runview.errors import RunViewError
from tfjob.pipeline_ids import ARCHIVE_TASK
from tfjob.request.model import Role
from tfjob.runlayout import REPLICA_LOG_SUFFIX

MAX_FILTER_CHARS = 200
MAX_TAIL_LINES = 2000
DEFAULT_TAIL_LINES = 500
MAX_LOG_BYTES = 4 * 1024 * 1024  # of an archived log's end, read for the curves
MAX_PANE_LOG_BYTES = 1024 * 1024  # of an archived log's end, read for the log pane
# Archived curves are kept this long per run (their key names the archive task's
# try and end, so a new archive is read at once; the TTL only bounds staleness).
ARCHIVED_CURVES_TTL_S = 300.0
MAX_POINTS_PER_REPLICA = 500
_ROLES = ", ".join(role.value for role in Role)
_REPLICA = re.compile(rf"^({'|'.join(role.value for role in Role)})-[0-9]{{1,4}}$")


class LogRequestError(RunViewError, ValueError):
    """A log request breaking a rule; the message names the field and the rule."""


def check_replica_id(replica: str) -> str:
    if len(replica) > 32 or not _REPLICA.match(replica):
        raise LogRequestError(
            f"replica {replica[:40]!r}: expected <role>-<index>, role one of "
            f"{_ROLES} (e.g. worker-0)"
        )
    return replica


def check_log_query(tail: int, text_filter: str) -> None:
    if not 1 <= tail <= MAX_TAIL_LINES:
        raise LogRequestError(f"tail {tail}: from 1 to {MAX_TAIL_LINES} lines are allowed")
    if len(text_filter) > MAX_FILTER_CHARS:
        raise LogRequestError(
            f"filter of {len(text_filter)} characters: at most {MAX_FILTER_CHARS} are allowed"
        )


def select_log_lines(text: str, tail: int, text_filter: str = "") -> list[str]:
    """The last `tail` lines of `text` holding `text_filter` (case-insensitive; all if empty)."""
    lines = [line.rstrip("\r") for line in split_log_lines(text)]
    if text_filter:
        wanted = text_filter.casefold()
        lines = [line for line in lines if wanted in line.casefold()]
    return [cut_long_line(line) for line in lines[-tail:]]


def cut_long_line(line: str) -> str:
    if len(line) <= LOG_LINE_MAX_BYTES:
        return line
    return line[:LOG_LINE_MAX_BYTES] + describe_cut_line(LOG_LINE_MAX_BYTES).decode()


def describe_archive_version(summary: Mapping[str, object]) -> tuple[object, ...]:
    """What names the archive a run's curves were read from: the archive task's try and
    end, and the logs it wrote (a cleared and rerun archive gives another)."""
    task = next((t for t in summary.get("tasks") or () if t.get("task_id") == ARCHIVE_TASK), {})
    return (task.get("try_number"), task.get("end"), tuple(summary.get("logs") or ()))


def replica_of_log_name(name: str) -> str | None:
    """`worker-0` for an archived `.../logs/worker-0.log`; None for anything else."""
    stem = name.rsplit("/", 1)[-1].removesuffix(REPLICA_LOG_SUFFIX)
    return stem if name.endswith(REPLICA_LOG_SUFFIX) and _REPLICA.match(stem) else None


def collect_curves(logs: Mapping[str, str]) -> dict[str, list[MetricPoint]]:
    """{replica: its metric points in order} for the replicas whose log reports any."""
    curves = {}
    for replica in sorted(logs):
        points = collect_metric_points(split_log_lines(logs[replica]), MAX_POINTS_PER_REPLICA)
        if points:
            curves[replica] = points
    return curves
