"""Which request file makes which DAG: one rule, shared by the DAG processor and the task runner.

Why this exists: the DAG a request file makes must be the same DAG whoever
builds it. When the processor kept the first file declaring a name and a
task's runner kept the file whose stem was that name, a file of one tenant
declaring another's `name` became that DAG in the UI (its roles, its tenant
tag) while its tasks ran the other tenant's file, and the first tenant could
read the second one's models and logs.

The rule: a request's `name` is its file's stem. `dags/requests/<stem>.yaml`
makes `tfjob__<stem>` and no other DAG, so a DAG has exactly one candidate
source whatever the other files declare:
- a file whose request declares another name is an INVALID DAG under its own
  stem (`check_request_name`, called by operators/dag_factory.py);
- two files with one stem (`x.yaml` and `x.yml`) make one INVALID DAG naming
  both (`RequestSource.conflict`);
- a stem that cannot be part of a DAG id is skipped with an error in the
  processor's log (Airflow refuses the id; raising would hide every DAG).
`select_request_sources` is the choice: all sources for the processor, the one
source of the DAG being run for a task's runner. It reads file names only.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

from operators.errors import PipelineError
from tfjob.pipeline_ids import REQUEST_DAG_PREFIX, request_dag_id

REQUEST_SUFFIXES = (".yaml", ".yml", ".json")
# Airflow's own rule for a DAG id (airflow.sdk validate_key): letters, digits, '_', '.', '-'.
_DAG_ID_CHARS = re.compile(r"^[A-Za-z0-9_.-]+$")
MAX_DAG_ID_CHARS = 250

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RequestSource:
    """The file(s) named `<stem>.*` in the requests folder: the source of DAG `dag_id`."""

    stem: str
    files: tuple[Path, ...]  # sorted; more than one is a conflict

    @property
    def dag_id(self) -> str:
        return request_dag_id(self.stem)

    @property
    def path(self) -> Path:
        return self.files[0]

    @property
    def conflict(self) -> str | None:
        """Why this source makes an INVALID DAG when several files share its stem."""
        if len(self.files) == 1:
            return None
        names = ", ".join(p.name for p in self.files)
        return (
            f"request files {names} share the name {self.stem!r}: a request's name is its "
            f"file's stem, so one name can have one file only; remove or rename all but one"
        )


class RequestNameError(PipelineError, ValueError):
    """A request file whose request declares a name other than the file's stem."""


def list_request_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix in REQUEST_SUFFIXES and p.is_file())


def select_request_sources(folder: Path, dag_id: str | None = None) -> list[RequestSource]:
    """The sources in `folder`, sorted by stem; with `dag_id`, only that DAG's (or none).

    The DAG processor asks for all; a task's runner asks for the DAG it runs,
    and gets what the processor built that DAG from.
    """
    if not folder.is_dir():
        return []
    by_stem: dict[str, list[Path]] = {}
    for path in list_request_files(folder):
        if not can_name_dag(path.stem):
            log.error(
                "request file %s: its name %r cannot be a DAG id (%s<name>, letters, digits, "
                "'_', '.', '-'); the file is ignored",
                path,
                path.stem[:80],
                REQUEST_DAG_PREFIX,
            )
            continue
        by_stem.setdefault(path.stem, []).append(path)
    sources = [RequestSource(stem, tuple(paths)) for stem, paths in sorted(by_stem.items())]
    if dag_id is not None:
        return [source for source in sources if source.dag_id == dag_id]
    return sources


def can_name_dag(stem: str) -> bool:
    dag_id = request_dag_id(stem)
    return bool(_DAG_ID_CHARS.match(stem)) and len(dag_id) <= MAX_DAG_ID_CHARS


def check_request_name(path: Path, name: str) -> None:
    """RequestNameError unless the request in `path` is named after its file's stem."""
    if name != path.stem:
        raise RequestNameError(
            f"request.name {name!r} given; allowed: {path.stem!r}, "
            f"the file's stem (a request's name is its file's name: rename the file to "
            f"{name}{path.suffix} or set name: {path.stem})"
        )


__all__ = [
    "RequestNameError",
    "RequestSource",
    "check_request_name",
    "list_request_files",
    "select_request_sources",
]
