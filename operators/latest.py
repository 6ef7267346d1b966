"""`<output>/latest`: the pointer to an output's newest model, moved only forward.

Several runs publish to one output and finish in any order: runs of one DAG
overlapping (max_active_runs > 1), a request file's DAG and its tenant's
submit DAG naming the same output, a cleared old run finishing today. The
pointer must name the newest run, not the last one to finish.

Which run is newer: the DAG run's `run_after`. Airflow 3 sets it on every
run (scheduled: when its interval was due; manual or REST: when it was
triggered; `dag.test()`: its logical date), it survives clearing and
retries, and it says when the run was asked for, not when it happened to
finish. `logical_date` is None for runs triggered with `logical_date: null`
(tshell, REST), so it is only the first fallback; `start_date` is the last
one, because clearing a run gives it a new start_date and an old run would
then pass for the newest. The pointer records which was used (`ordered_by`).

The rule (`decide_latest`): a run's pointer replaces the current one when
(run_after, dag_id, run_id) is greater (the ids only break exact ties, the
same way in every publisher), or when the current one is the same run (a
cleared run publishing its new model). A pointer that cannot be read, or
written before this rule (no `run_after`), is older than any run.

No lost race: `publish_latest` reads the pointer and its ETag, decides, and
writes conditionally: `IfNoneMatch="*"` when there is none, `IfMatch=<ETag>`
otherwise (Amazon S3 since 2024; moto 5.2.5 honours both on put_object).
When another publish wrote in between, S3 refuses (412, or 409 for a
concurrent conditional write) and the pointer is read and judged again.
An S3-compatible store that ignores these headers leaves a window between
the read and the write, as wide as one PUT.
"""

from __future__ import annotations

import datetime as dt
import enum
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from operators.errors import PipelineError
from operators.s3retry import call_with_s3_retries
from tfjob.jsontypes import JsonObject
from tfjob.runlayout import RunLayout, S3Path

if TYPE_CHECKING:
    from botocore.client import BaseClient

log = logging.getLogger("airflow.task")

LATEST_POINTER_VERSION = 2
# Each attempt is one read and one conditional write; another attempt is needed only
# when another publish wrote the pointer in between.
LATEST_WRITE_ATTEMPTS = 5
# What S3 answers a conditional write whose condition no longer holds: the ETag changed
# (412), another conditional write is in flight (409), or the pointer was deleted (404).
LOST_RACE_CODES = frozenset({"PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey"})
LOST_RACE_STATUSES = frozenset({409, 412})
ORDER_FIELDS = ("run_after", "logical_date", "start_date")


class LatestAction(enum.StrEnum):
    MOVE = "move"
    KEEP = "keep"


@dataclass(frozen=True)
class LatestDecision:
    action: LatestAction
    reason: str


@dataclass(frozen=True)
class LatestOutcome:
    """What publishing did: `moved`, and the pointer `latest` now holds."""

    moved: bool
    current: JsonObject
    reason: str


class LatestRaceLost(PipelineError, RuntimeError):
    """Other publishes kept writing the pointer for LATEST_WRITE_ATTEMPTS attempts."""


def choose_run_order(dag_run: Any) -> tuple[str, str]:
    """(UTC ISO 8601 time, field it came from) that orders a DAG run among the output's runs."""
    for name in ORDER_FIELDS:
        value = getattr(dag_run, name, None)
        if isinstance(value, dt.datetime):
            moment = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
            return moment.astimezone(dt.UTC).isoformat(), name
    raise ValueError(
        f"DAG run {getattr(dag_run, 'run_id', '?')}: none of {', '.join(ORDER_FIELDS)} is set; "
        "one is needed to order it among the runs publishing to the same output"
    )


def build_pointer(
    *,
    dag_id: str,
    run_id: str,
    run_key: str,
    layout: RunLayout,
    model: str,
    metrics: Any,
    run_after: str,
    ordered_by: str,
    published_at: float,
) -> JsonObject:
    """The content of `<output>/latest` for a run (JSON)."""
    return {
        "version": LATEST_POINTER_VERSION,
        "dag_id": dag_id,
        "run_id": run_id,
        "run_key": run_key,
        "run": layout.root.uri,
        "model": model,
        "metrics": metrics,
        "run_after": run_after,
        "ordered_by": ordered_by,
        "published_at": published_at,
    }


def read_order(pointer: Any) -> tuple[dt.datetime, str, str] | None:
    """(run_after, dag_id, run_id) of a pointer; None when it has none that can be read."""
    if not isinstance(pointer, Mapping):
        return None
    try:
        moment = dt.datetime.fromisoformat(str(pointer["run_after"]))
    except (KeyError, TypeError, ValueError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment, str(pointer.get("dag_id", "")), str(pointer.get("run_id", ""))


def describe_pointer(pointer: Any) -> str:
    if not isinstance(pointer, Mapping):
        return "an unreadable pointer"
    return (
        f"run {pointer.get('run_id')} of {pointer.get('dag_id')} "
        f"(run_after {pointer.get('run_after', 'unknown')})"
    )


def decide_latest(mine: Mapping[str, object], current: Any) -> LatestDecision:
    """Should `mine` replace the `current` pointer (None: there is none)? Pure; see the module."""
    if current is None:
        return LatestDecision(LatestAction.MOVE, "no pointer yet")
    ours = read_order(mine)
    if ours is None:
        raise ValueError(f"pointer to publish has no valid run_after: {dict(mine)!r}")
    theirs = read_order(current)
    if theirs is None:
        return LatestDecision(
            LatestAction.MOVE, f"the current pointer has no run order ({describe_pointer(current)})"
        )
    if theirs[1:] == ours[1:]:
        return LatestDecision(LatestAction.MOVE, "the same run published again")
    if ours > theirs:
        return LatestDecision(LatestAction.MOVE, f"newer than {describe_pointer(current)}")
    return LatestDecision(LatestAction.KEEP, f"{describe_pointer(current)} is newer than this run")


def read_latest(s3: BaseClient, latest: S3Path) -> tuple[Any, str | None]:
    """(parsed pointer or the raw text when not JSON, ETag); (None, None) when there is none."""
    bucket, key, uri = latest.bucket, latest.key, latest.uri

    def get() -> tuple[bytes, str] | None:
        try:
            answer = s3.get_object(Bucket=bucket, Key=key)
        except s3.exceptions.NoSuchKey:
            return None
        return answer["Body"].read(), answer["ETag"]

    found = call_with_s3_retries(get, f"get {uri}")
    if found is None:
        return None, None
    body, etag = found
    try:
        return json.loads(body), etag
    except ValueError:
        return body.decode("utf-8", "replace")[:200], etag


def is_lost_race(exc: BaseException) -> bool:
    from botocore.exceptions import ClientError

    if not isinstance(exc, ClientError):
        return False
    error = exc.response.get("Error") or {}
    status = (exc.response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
    return error.get("Code") in LOST_RACE_CODES or status in LOST_RACE_STATUSES


def publish_latest(
    s3: BaseClient,
    latest: S3Path,
    pointer: Mapping[str, object],
    attempts: int = LATEST_WRITE_ATTEMPTS,
) -> LatestOutcome:
    """Write `pointer` to `latest` if it is newer than what is there (read, decide, write if
    unchanged); LatestRaceLost when other publishes kept changing it."""
    bucket, key, uri = latest.bucket, latest.key, latest.uri
    body = json.dumps(pointer, indent=2, sort_keys=True).encode("utf-8")
    for attempt in range(1, attempts + 1):
        current, etag = read_latest(s3, latest)
        decision = decide_latest(pointer, current)
        if decision.action is LatestAction.KEEP:
            return LatestOutcome(False, dict(current), decision.reason)
        condition = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}

        def put(condition: dict[str, str] = condition) -> None:
            s3.put_object(
                Bucket=bucket, Key=key, Body=body, ContentType="application/json", **condition
            )

        try:
            call_with_s3_retries(put, f"put {uri}")
        except Exception as exc:
            if not is_lost_race(exc):
                raise
            log.info(
                "%s changed while publishing (attempt %d of %d): reading it again",
                uri,
                attempt,
                attempts,
            )
            continue
        return LatestOutcome(True, dict(pointer), decision.reason)
    raise LatestRaceLost(
        f"{uri}: other publishes changed it {attempts} times between this run's read and "
        "write; the run's model stays under its run prefix; clear `publish` to try again"
    )
