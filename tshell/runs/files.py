"""A run's archived files, listed and read through Airflow: `/tfjob/runs/{dag}/{run}/files`.

Why this exists: `tshell download` and the archived logs of `tshell logs`
read what the pipeline's `archive` task wrote under
`<output>/runs/<dag_id>/<run_id>/` (architecture.md, S3 layout). Airflow
serves those files (runview/files.py) with the user's rights on the run
and the S3 connection of the run's tenant, so a person needs only an Airflow
login, never S3 credentials. A 403 is the user's roles speaking (the commands
word it with run_lookup.explain_forbidden_on_run); a missing file is a 404.

Guarantees: bytes are copied in CHUNK_BYTES pieces, never a whole file in
memory; a downloaded file appears under its name only once it is complete
(written beside it as `.<name>.<random>.part`, then renamed); an answer
shorter than its Content-Length is an error, not a file; nothing is written
outside the target directory.
"""

from __future__ import annotations

import codecs
import os
import tempfile
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from tfjob.runlayout import LOGS_DIR, replica_log_path
from tshell.airflow_client import AirflowNotFoundError, AirflowSession
from tshell.exitcodes import CommandError, ExitCode
from tshell.progress import ProgressBar, format_bytes
from tshell.runs.lookup import RunRef, quote

CHUNK_BYTES = 1024 * 1024


@dataclass(frozen=True)
class RunFile:
    path: str  # relative to the run's prefix
    size: int
    last_modified: str = ""  # ISO 8601, as Airflow lists it


@dataclass(frozen=True)
class RunFileListing:
    run_prefix: str  # s3://bucket/<output>/runs/<dag_id>/<run_id>/, for messages
    files: tuple[RunFile, ...]
    truncated: bool
    limit: int


def build_files_path(ref: RunRef, path: str | None = None) -> str:
    """The API path of the run's file listing, or of one file (relative to the run)."""
    base = f"/tfjob/runs/{quote(ref.dag_id)}/{quote(ref.run_id)}/files"
    return base if path is None else f"{base}/{urllib.parse.quote(path, safe='/')}"


def list_run_files(session: AirflowSession, ref: RunRef, under: str = "") -> RunFileListing:
    """The run's files under `under` ("" or a directory such as "model/"), as Airflow lists them."""
    body = session.get_json(build_files_path(ref), {"under": under} if under else None)
    files = tuple(
        RunFile(str(f["path"]), int(f["size"]), str(f.get("last_modified") or ""))
        for f in body["files"]
    )
    return RunFileListing(
        str(body["run_prefix"]), files, bool(body["truncated"]), int(body["limit"])
    )


def copy_run_file(
    session: AirflowSession, ref: RunRef, path: str, write: Callable[[bytes], Any]
) -> int:
    """Feed the bytes of the run's file `path` to `write`, chunk by chunk; the count copied.

    A missing file is a CommandError (exit 4) naming it; an answer cut short
    (fewer bytes than its Content-Length) one that says so (exit 3).
    """
    try:
        with session.open_stream(build_files_path(ref, path)) as response:
            announced = response.headers.get("Content-Length")
            copied = 0
            try:
                while chunk := response.read(CHUNK_BYTES):
                    write(chunk)
                    copied += len(chunk)
            except OSError as error:  # http.client.IncompleteRead is not one: read() returns less
                raise session.unreachable(f"reading {path}: {error.__class__.__name__}") from None
    except AirflowNotFoundError as missing:
        raise CommandError(
            f"run {ref.run_id} of DAG {ref.dag_id} has no file {path!r} on {session.url} "
            f"({missing.detail or 'not found'})",
            ExitCode.NOT_FOUND,
        ) from None
    if announced is not None and copied != int(announced):
        raise CommandError(
            f"{path}: Airflow's answer ended after {copied} of {announced} bytes; nothing was "
            f"kept, ask again",
            ExitCode.AIRFLOW_ERROR,
        )
    return copied


def write_atomically(destination: Path, fill: Callable[[BinaryIO], Any]) -> None:
    """`fill` a temporary file beside `destination`, then rename it there; on failure remove it."""
    handle, temporary = tempfile.mkstemp(
        dir=destination.parent, prefix=f".{destination.name}.", suffix=".part"
    )
    try:
        with os.fdopen(handle, "wb") as stream:
            fill(stream)
        os.replace(temporary, destination)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def download_run_files(
    session: AirflowSession,
    ref: RunRef,
    directory: str,
    target: Path,
    show_progress: bool | None = None,
) -> tuple[str, list[Path]]:
    """Copy the run's `directory` (model, logs) into `target`; (its S3 URI, the files written)."""
    listing = list_run_files(session, ref, f"{directory}/")
    where = f"{listing.run_prefix}{directory}/"
    if listing.truncated:
        raise CommandError(
            f"{where} holds more than {listing.limit} files, more than Airflow lists at once; "
            f"nothing was downloaded",
            ExitCode.AIRFLOW_ERROR,
        )
    if not listing.files:
        raise CommandError(
            f"no files under {where}: the run has not archived them (yet); "
            f"`tshell status` shows how far it got",
            ExitCode.NOT_FOUND,
        )
    root = target.resolve()
    total = sum(f.size for f in listing.files)
    written = []
    with ProgressBar(f"download {directory}", total, enabled=show_progress) as bar:
        for item in listing.files:
            destination = (root / item.path[len(directory) + 1 :]).resolve()
            if not destination.is_relative_to(root) or destination == root:
                raise CommandError(
                    f"{listing.run_prefix}{item.path}: refusing a file that leaves {target}",
                    ExitCode.NOT_FOUND,
                )
            destination.parent.mkdir(parents=True, exist_ok=True)

            def fill(stream: BinaryIO, path: str = item.path) -> None:
                def write(chunk: bytes) -> None:
                    stream.write(chunk)
                    bar.add(len(chunk))

                copy_run_file(session, ref, path, write)

            write_atomically(destination, fill)
            written.append(destination)
    return where, written


def describe_download(where: str, written: list[Path], target: Path) -> str:
    size = sum(p.stat().st_size for p in written)
    return f"downloaded {len(written)} files ({format_bytes(size)}) from {where} to {target}"


def write_run_file_text(
    session: AirflowSession, ref: RunRef, path: str, out: TextIO, final_newline: bool = True
) -> bool:
    """Print the run's file `path` as text (undecodable bytes replaced); False when absent.

    With `final_newline`, what was printed ends with a newline (an empty file prints one).
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    last = ""

    def write(chunk: bytes) -> None:
        nonlocal last
        text = decoder.decode(chunk)
        if text:
            out.write(text)
            last = text[-1]

    try:
        copy_run_file(session, ref, path, write)
    except CommandError as error:
        if error.code == ExitCode.NOT_FOUND:
            return False
        raise
    rest = decoder.decode(b"", final=True)
    if rest:
        out.write(rest)
        last = rest[-1]
    if last != "\n" and (final_newline or last):
        out.write("\n")
    return True


def write_archived_logs(
    session: AirflowSession, ref: RunRef, role: str | None, index: int, out: TextIO
) -> tuple[bool, str]:
    """Print the run's archived logs (one replica, or all with headers); (any printed, where).

    `where` names what was looked for, for the note that falls back to Airflow's task log.
    """
    if role is not None:
        path = replica_log_path(f"{role}-{index}")
        return write_run_file_text(session, ref, path, out, final_newline=False), path
    try:
        listing = list_run_files(session, ref, LOGS_DIR)
    except AirflowNotFoundError:
        return False, LOGS_DIR  # not a run whose files Airflow serves
    for item in listing.files:
        out.write(f"==> {item.path.rsplit('/', 1)[-1]} <==\n")
        write_run_file_text(session, ref, item.path, out)
    return bool(listing.files), f"{listing.run_prefix}{LOGS_DIR}"
