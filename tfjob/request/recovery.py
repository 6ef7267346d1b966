"""The request's fault-recovery fields: restarts, checkpoints, warm starts.

`TrainingRequest` (tfjob/request/model.py) declares `max_restarts`, `restart_on`,
`checkpoint_interval` and `warm_start` with the annotated types here, so each
field's bounds, description, JSON Schema and checks live in one place and the
request model stays small. Checks raise the request's `RequestError` shape
through `invalid`, naming the field, the value given and what is allowed.

The fields are validated here; the restart verdict is `tfjob/restart_policy.py`,
and the train step acts on `max_restarts` and `restart_on` by restarting the
gang within the run (operators/restart.py). `checkpoint_interval` paces the
model owner's checkpoint sync (runtime/checkpoints.py), and `warm_start`
names what the first gang restores (operators/restore.py).
"""

import re
from typing import Annotated

from pydantic import BeforeValidator, Field, WithJsonSchema

from tfjob.request.errors import invalid
from tfjob.restart_policy import (
    DEFAULT_MAX_RESTARTS,
    MAX_EXIT_CODE,
    MAX_RESTARTS,
    MIN_EXIT_CODE,
    RestartOn,
    find_exit_code_problem,
)

DEFAULT_CHECKPOINT_INTERVAL = 60
# Below 10 s the upload of a large model would overlap the next; above an hour a
# restart loses more than most runs can afford.
MIN_CHECKPOINT_INTERVAL = 10
MAX_CHECKPOINT_INTERVAL = 3600

DEFAULT_RESTART_ON = RestartOn.RETRYABLE
WARM_START_LATEST = "latest"
# Airflow's default `[scheduler] allowed_run_id_pattern` (every run id Airflow makes
# itself matches it too), and the length of its run_id column. "." and ".." are
# refused besides: the run id is one segment of an S3 key (`runs/<dag_id>/<run_id>/`).
RUN_ID_PATTERN = re.compile(r"^(?!\.+$)[A-Za-z0-9_.~:+-]+$")
MAX_RUN_ID_LENGTH = 250
RUN_ID_EXAMPLE = "scheduled__2026-12-01T03:00:00+00:00"

_RESTART_ON_ALLOWED = (
    f"allowed: {RestartOn.RETRYABLE.value}, {RestartOn.ANY_FAILURE.value} "
    f"or a list of exit codes from {MIN_EXIT_CODE} to {MAX_EXIT_CODE}, "
    "e.g. [137, 143]"
)
_WARM_START_ALLOWED = (
    f"allowed: none, {WARM_START_LATEST} or a run id of this DAG (Airflow's run "
    f"id characters: letters, digits, '_', '.', '~', ':', '+', '-'; at most "
    f"{MAX_RUN_ID_LENGTH}), e.g. {RUN_ID_EXAMPLE}"
)


def check_restart_on(value: object) -> object:
    """`retryable`, `any_failure`, or a non-empty list of distinct exit codes 1-255."""
    if isinstance(value, str):
        try:
            return RestartOn(value)
        except ValueError:
            raise invalid(_RESTART_ON_ALLOWED, value) from None
    if not isinstance(value, list | tuple) or not value:
        raise invalid(_RESTART_ON_ALLOWED, value)
    problem = find_exit_code_problem(value)
    if problem is not None:
        index, allowed = problem
        if index is None:
            raise invalid(allowed, value)
        raise invalid(allowed, value[index], f"[{index}]")
    return list(value)


def check_warm_start(value: object) -> object:
    """None, `latest`, or the shape of an Airflow run id; whether the run exists is for run time."""
    if value is None:
        return None
    if (
        not isinstance(value, str)
        or len(value) > MAX_RUN_ID_LENGTH
        or not RUN_ID_PATTERN.match(value)
    ):
        raise invalid(_WARM_START_ALLOWED, value)
    return value


MaxRestarts = Annotated[
    int,
    Field(
        ge=0,
        le=MAX_RESTARTS,
        description=f"Gang restarts within one run after a replica fails, 0-{MAX_RESTARTS}; "
        "restart_on says which failures. Not Airflow's retries.",
    ),
]

RestartOnSetting = Annotated[
    RestartOn | list[int],
    BeforeValidator(check_restart_on),
    WithJsonSchema(
        {
            # One "type" with several kinds: Airflow's form then takes text or JSON.
            "type": ["string", "array"],
            "anyOf": [
                {"type": "string", "enum": [choice.value for choice in RestartOn]},
                {
                    "type": "array",
                    "minItems": 1,
                    "uniqueItems": True,
                    "items": {
                        "type": "integer",
                        "minimum": MIN_EXIT_CODE,
                        "maximum": MAX_EXIT_CODE,
                    },
                },
            ],
        }
    ),
    Field(
        description="Failures that restart: retryable (pod deleted, evicted or its node "
        "lost; OOMKilled; exit codes 128-255), any_failure, or a list of exit "
        "codes (deletion, eviction and node loss always restart)."
    ),
]

CheckpointInterval = Annotated[
    int,
    Field(
        ge=MIN_CHECKPOINT_INTERVAL,
        le=MAX_CHECKPOINT_INTERVAL,
        description="Seconds between copies of the model owner's CHECKPOINT_DIR to S3, "
        f"{MIN_CHECKPOINT_INTERVAL}-{MAX_CHECKPOINT_INTERVAL}; a restarted gang "
        "resumes from the last copy.",
    ),
]

WarmStart = Annotated[
    str | None,
    BeforeValidator(check_warm_start),
    Field(
        description=f"Start from a checkpoint: none, {WARM_START_LATEST} (this output's "
        "last published run) or a run id of this DAG, whose checkpoints every "
        "replica finds in CHECKPOINT_DIR before the first attempt."
    ),
]

# The schema keywords of the checks above, for forms (tfjob/schema.py adds them).
WARM_START_SCHEMA = {"pattern": RUN_ID_PATTERN.pattern, "maxLength": MAX_RUN_ID_LENGTH}

__all__ = [
    "DEFAULT_CHECKPOINT_INTERVAL",
    "DEFAULT_MAX_RESTARTS",
    "DEFAULT_RESTART_ON",
    "WARM_START_LATEST",
    "CheckpointInterval",
    "MaxRestarts",
    "RestartOnSetting",
    "WarmStart",
    "check_restart_on",
    "check_warm_start",
]
