"""A run's archived files in S3, listed and streamed for the /tfjob API (runview/api.py).

Why this exists: people download a run's model, logs and run.json through
Airflow, with the rights Airflow gives them on the run (its XComs) and the S3
connection of the run's tenant, so nobody needs S3 credentials that reach
every tenant's prefix. The input is the run description `validate` pushed
(operators/runinfo.py `describe_run`): its `run_prefix` and `aws_conn_id`.
Tenant roles may read XComs but not write them (FAB's OP permissions), so the
description is the pipeline's own; it must still name this run's prefix.

Guarantees:
- a caller's path is checked (`check_run_file_path`, length first) before it
  becomes a key, so it names nothing outside the run's prefix;
- bytes go through in CHUNK_BYTES reads, never a whole object in memory, and
  never as a presigned URL: no grant leaves Airflow;
- a listing stops after LIST_LIMIT entries and says that it did.

Errors, each with the HTTP status the API answers (`status`):

    RunFilesError              base
    ├── RunFilePathError       400: the path breaks a rule; the message names it
    ├── RunFileNotFoundError   404: no such object, or no bucket, under the run's prefix
    ├── RunNotArchivableError  404: the run description names no run prefix or connection
    └── RunStorageError        502: S3 refused or failed with the tenant's connection
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from runview.errors import RunViewError
from runview.s3clients import S3Clients, make_s3_client
from tfjob.jsontypes import JsonObject
from tfjob.records.run import PartialRunDescription
from tfjob.runlayout import RunLayout, name_run_folder

if TYPE_CHECKING:
    from botocore.client import BaseClient
    from botocore.response import StreamingBody

log = logging.getLogger(__name__)

MAX_PATH_CHARS = 1024
LIST_LIMIT = 10_000
LIST_PAGE_SIZE = 1000  # S3's largest page
CHUNK_BYTES = 1024 * 1024
MISSING_CODES = ("NoSuchKey", "404", "NotFound")


class RunFilesError(RunViewError):
    """A request for a run's files that cannot be answered; `status` is the HTTP answer."""

    status = 500


class RunFilePathError(RunFilesError):
    status = 400


class RunFileNotFoundError(RunFilesError):
    status = 404


class RunNotArchivableError(RunFilesError):
    status = 404


class RunStorageError(RunFilesError):
    status = 502


@dataclass(frozen=True)
class RunStorage:
    """Where a run's files are and which Airflow connection reads them."""

    layout: RunLayout
    aws_conn_id: str

    @property
    def bucket(self) -> str:
        return self.layout.bucket

    @property
    def uri(self) -> str:
        return self.layout.root.uri


@dataclass(frozen=True)
class RunFile:
    path: str  # relative to the run's prefix
    size: int
    last_modified: str  # ISO 8601
    etag: str = ""  # S3's, to tell a changed object (runview/eventcurves.py)

    def as_json(self) -> JsonObject:
        return {"path": self.path, "size": self.size, "last_modified": self.last_modified}


@dataclass(frozen=True)
class RunFileListing:
    storage: RunStorage
    under: str
    files: tuple[RunFile, ...]
    truncated: bool
    limit: int

    def as_json(self) -> JsonObject:
        answer: JsonObject = {
            "run_prefix": self.storage.uri,
            "under": self.under,
            "files": [f.as_json() for f in self.files],
            "truncated": self.truncated,
            "limit": self.limit,
        }
        if self.truncated:
            answer["note"] = (
                f"listing cut after {self.limit} files; ask for a directory "
                f"with ?under=<dir>/ to list less"
            )
        return answer


@dataclass(frozen=True)
class RunFileStream:
    """One object, opened: its size, the name to save it as, and its bytes in chunks."""

    path: str
    size: int
    body: StreamingBody

    @property
    def filename(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    def iter_chunks(self) -> Iterator[bytes]:
        """The object's bytes, CHUNK_BYTES at a time; the S3 connection is closed at the end."""
        try:
            yield from self.body.iter_chunks(CHUNK_BYTES)
        except Exception as error:  # headers are sent: the client sees a short body
            log.warning("reading %s stopped: %s: %s", self.path, type(error).__name__, error)
            raise
        finally:
            self.body.close()


def check_run_file_path(path: str, *, directory: bool = False) -> str:
    """`path` when it names something under a run's prefix; RunFilePathError naming the rule.

    A file path is relative, '/'-separated, without empty, '.' or '..' segments,
    backslashes or control characters, at most MAX_PATH_CHARS long. With
    `directory`, it is "" (the whole run) or such a path ending in '/'.
    """
    if not isinstance(path, str):
        raise RunFilePathError(f"path {path!r}: a string is required")
    if len(path) > MAX_PATH_CHARS:
        raise RunFilePathError(
            f"path {path[:60]!r}… ({len(path)} characters): at most "
            f"{MAX_PATH_CHARS} characters are allowed"
        )
    if not directory:
        check_relative_path(path, path)
    elif path and not path.endswith("/"):
        raise RunFilePathError(
            f"path {path!r}: a directory of the run ends with '/', e.g. model/ or logs/"
        )
    elif path:
        check_relative_path(path[:-1], path)
    return path


def check_relative_path(path: str, given: str) -> None:
    """The rules of a file path; the message names `given`, what the caller wrote."""
    if path == "":
        raise RunFilePathError(
            f"path {given!r}: a file of the run is required, e.g. run.json, "
            f"model/saved_model.pb or logs/worker-0.log"
        )
    if "\\" in path:
        raise RunFilePathError(f"path {given!r}: backslashes are not allowed; separate with '/'")
    if path.startswith("/"):
        raise RunFilePathError(
            f"path {given!r}: an absolute path is not allowed; give it "
            f"relative to the run, e.g. model/saved_model.pb"
        )
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        raise RunFilePathError(f"path {given!r}: control characters are not allowed")
    for segment in path.split("/"):
        if segment in ("", ".", ".."):
            raise RunFilePathError(
                f"path {given!r}: segment {segment!r} is not allowed "
                f"(no empty, '.' or '..' segments)"
            )


def locate_run_storage(described: PartialRunDescription, dag_id: str, run_id: str) -> RunStorage:
    """The run's prefix and connection from its description; it must be this run's prefix."""
    run_prefix, conn_id = described.run_prefix, described.aws_conn_id
    if run_prefix is None or not conn_id:
        raise RunNotArchivableError(
            f"run {run_id!r} of DAG {dag_id!r}: its run description names no run_prefix and "
            f"aws_conn_id (validate of an older pipeline?); its files are not served"
        )
    try:
        layout = RunLayout.parse(run_prefix)
    except ValueError as error:
        raise RunNotArchivableError(f"run {run_id!r} of DAG {dag_id!r}: {error}") from None
    this_run = (described.dag_id, described.run_id) == (dag_id, run_id)
    if not this_run or not layout.belongs_to(dag_id, run_id):
        raise RunNotArchivableError(
            f"run {run_id!r} of DAG {dag_id!r}: its description names {run_prefix!r}, which is "
            f"not <output>/{name_run_folder(dag_id, run_id)}; its files are not served"
        )
    return RunStorage(layout=layout, aws_conn_id=conn_id)


S3_CLIENTS = S3Clients(make_s3_client)


def connect_run_storage(storage: RunStorage) -> BaseClient:
    """A boto3 S3 client with the tenant's Airflow connection, shared for a minute
    (runview/s3clients.py)."""
    try:
        return S3_CLIENTS.connect(storage.aws_conn_id)
    except Exception as error:  # noqa: BLE001 - any failure to build the client is the same answer
        raise describe_storage_failure(storage, "connect", error) from None


def list_run_files(
    s3: BaseClient, storage: RunStorage, under: str = "", limit: int = LIST_LIMIT
) -> RunFileListing:
    """The run's files under `under` (a directory of the run, "" for all), at most `limit`."""
    under = check_run_file_path(under, directory=True)
    files: list[RunFile] = []
    params: JsonObject = {"Bucket": storage.bucket, "Prefix": storage.layout.file(under).key}
    truncated = False
    try:
        while True:
            params["MaxKeys"] = min(LIST_PAGE_SIZE, limit - len(files) + 1)
            page = s3.list_objects_v2(**params)
            for item in page.get("Contents", []):
                path = storage.layout.path_of(item["Key"])
                if not path or path.endswith("/"):
                    continue  # a "directory" placeholder, not a file
                if len(files) == limit:
                    truncated = True
                    break
                files.append(
                    RunFile(
                        path,
                        int(item.get("Size", 0)),
                        item["LastModified"].isoformat(),
                        str(item.get("ETag", "")),
                    )
                )
            token = page.get("NextContinuationToken")
            if truncated or not page.get("IsTruncated") or not token:
                break
            params["ContinuationToken"] = token
    except Exception as error:  # noqa: BLE001 - translated below
        raise describe_storage_failure(storage, f"list {under or 'the run'}", error) from None
    return RunFileListing(storage, under, tuple(files), truncated, limit)


def open_run_file(s3: BaseClient, storage: RunStorage, path: str) -> RunFileStream:
    """The object `path` of the run, opened for streaming; RunFileNotFoundError when absent."""
    path = check_run_file_path(path)
    try:
        answer = s3.get_object(Bucket=storage.bucket, Key=storage.layout.file(path).key)
    except Exception as error:  # noqa: BLE001 - translated below
        raise describe_storage_failure(storage, path, error) from None
    return RunFileStream(path=path, size=int(answer["ContentLength"]), body=answer["Body"])


def read_run_file_tail(s3: BaseClient, storage: RunStorage, path: str, max_bytes: int) -> str:
    """The last `max_bytes` of the run's object `path` as text (a log's end is what matters)."""
    path = check_run_file_path(path)
    try:
        answer = s3.get_object(
            Bucket=storage.bucket, Key=storage.layout.file(path).key, Range=f"bytes=-{max_bytes}"
        )
        data = answer["Body"].read(max_bytes)
    except Exception as error:  # noqa: BLE001 - translated below
        if getattr(error, "response", {}).get("Error", {}).get("Code") == "InvalidRange":
            return ""  # an empty object has no last bytes
        raise describe_storage_failure(storage, path, error) from None
    return data.decode("utf-8", errors="replace")


def describe_storage_failure(storage: RunStorage, what: str, error: Exception) -> RunFilesError:
    """An S3 failure as an answer naming the file (or listing) and the connection, no secret."""
    from botocore.exceptions import BotoCoreError, ClientError

    if isinstance(error, ClientError):
        code = str(error.response.get("Error", {}).get("Code", ""))
        if code in MISSING_CODES:
            return RunFileNotFoundError(
                f"{what}: no such file under the run's prefix {storage.uri}"
            )
        if code == "NoSuchBucket":
            return RunFileNotFoundError(
                f"{what}: bucket {storage.bucket!r} of the run's prefix "
                f"{storage.uri} does not exist"
            )
        return RunStorageError(
            f"{what}: S3 answered {code or 'an error'} to connection "
            f"{storage.aws_conn_id!r} for {storage.uri}"
        )
    if isinstance(error, BotoCoreError):
        return RunStorageError(
            f"{what}: S3 failed with connection {storage.aws_conn_id!r} "
            f"for {storage.uri} ({type(error).__name__})"
        )
    log.warning("S3 call for %s failed: %s", storage.uri, type(error).__name__)
    return RunStorageError(
        f"{what}: S3 failed with connection {storage.aws_conn_id!r} for "
        f"{storage.uri} ({type(error).__name__})"
    )


def build_content_disposition(filename: str) -> str:
    """`attachment` with an ASCII `filename` and the exact name as RFC 5987 `filename*`."""
    fallback = "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else "_" for c in filename)
    exact = urllib.parse.quote(filename, safe="")
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{exact}"
