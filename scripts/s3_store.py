"""The local S3's data on disk: what survives a stop, a crash or a `kill -9` of the server.

Why this exists: moto keeps buckets and objects in memory only. scripts/s3_sync.py
copies each change moto makes into this store before the server answers the
request, and copies the store back into moto when the server starts. This
module is the disk half and knows nothing of moto: it writes each change
durably and atomically, and reads everything back, checked.

Layout (the directory is 0700, every file 0600):

    <state-dir>/data/
      FORMAT                                 "tfjob-local-s3 1"
      .lock                                  flock'ed by the serving process; holds its pid
      buckets/<bucket>/bucket.json           {"name", "account_id", "region", "created"}
      buckets/<bucket>/objects/<h>.json      {"key", "size", "sha256", "data", "attributes"}
      buckets/<bucket>/objects/<h>-<t>.data  the object's bytes

`<h>` is the SHA-256 of the object's key (keys may hold any character, `/`
and `..` included), `<t>` a random token, so a new version of an object never
overwrites the file the current record names. `attributes` are what
scripts/s3_sync.py keeps of the object (ETag, metadata, ...); this module
stores them as given.

How a change is written (scripts/s3_durable_files.py): a new file is written
under a name nothing reads yet (a `.tmp-*` name, or a fresh `<h>-<t>.data`),
fsync'ed, renamed into place, and then its directory is fsync'ed. The rename of a record
(`<h>.json`, `bucket.json`) is the commit point: an object's data is
written and made durable before the record that names it, and a deletion
removes the record first. After a crash an object is therefore either its
old version or its new one, never a mix. What a crash can leave behind (a
`.tmp-*` file, a data file no record names, a bucket directory without
`bucket.json`) is removed by `open_store` before anything is read.

Reading back checks every record's size (limit `MAX_RECORD_BYTES`) before
reading it, that its data file is the one its name allows and holds exactly
`size` bytes, and the SHA-256 of the bytes while they are read: a damaged
store is reported (`StoreError`), not served.

One process at a time: `open_store` takes an exclusive flock on `.lock` and
holds it until `close`; scripts/s3_store_upkeep.py tells whether a server holds
it, measures it and removes it (for `make clean-state`).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scripts.s3_durable_files import (
    DIR_MODE,
    FILE_MODE,
    TMP_PREFIX,
    fsync_dir,
    make_dir,
    replace_file,
    write_new_file,
)

DATA_DIR = "data"  # under the server's state dir
FORMAT = "tfjob-local-s3 1"
FORMAT_FILE = "FORMAT"
LOCK_FILE = ".lock"
BUCKETS_DIR = "buckets"
BUCKET_FILE = "bucket.json"
OBJECTS_DIR = "objects"
CHUNK_BYTES = 1 << 20  # what is held in memory at a time while copying an object
# A record holds a key (S3: at most 1 KiB), metadata (S3: 2 KiB), tags (S3: 10): a
# record above 1 MiB is not one this store wrote.
MAX_RECORD_BYTES = 1 << 20
MAX_SMALL_FILE_BYTES = 4096  # FORMAT, .lock
# Bucket names become directory names: S3's own characters (and '_', which moto allows).
BUCKET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}")
RECORD_NAME = re.compile(r"([0-9a-f]{64})\.json")
DATA_NAME = re.compile(r"([0-9a-f]{64})-[0-9a-f]{16}\.data")


class StoreError(Exception):
    """The store cannot be opened, read or written; the message names the file and what to do."""


@dataclass(frozen=True)
class BucketRecord:
    name: str
    account_id: str
    region: str
    created: str  # ISO 8601, as moto's creation_date


@dataclass(frozen=True)
class ObjectRecord:
    key: str
    size: int
    sha256: str
    data: str  # the data file's name, next to the record
    attributes: dict[str, Any]


@dataclass(frozen=True)
class StoreSize:
    buckets: int
    objects: int
    data_bytes: int


def locate_data_dir(state_dir: Path) -> Path:
    """Where a server started with --state-dir keeps its buckets and objects."""
    return state_dir / DATA_DIR


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def check_bucket_name(name: str) -> None:
    if not BUCKET_NAME.fullmatch(name):
        raise StoreError(
            f"bucket {name!r} cannot be kept on disk: its name must be letters, digits, "
            "'.', '-' or '_' (S3 allows lowercase letters, digits, '.' and '-')"
        )


def read_small_file(path: Path, limit: int) -> bytes:
    """A file's content, refused when it is larger than limit (checked before reading)."""
    size = path.stat().st_size
    if size <= limit:
        with open(path, "rb") as stream:
            content = stream.read(limit + 1)
        if len(content) <= limit:
            return content
    raise StoreError(f"{path}: more than the {limit} bytes such a file may hold; not ours")


def load_json(path: Path, limit: int) -> dict[str, Any]:
    try:
        value = json.loads(read_small_file(path, limit))
    except (ValueError, UnicodeDecodeError) as error:
        raise StoreError(f"{path}: not JSON ({error}); the store is damaged") from None
    if not isinstance(value, dict):
        raise StoreError(f"{path}: not a JSON object; the store is damaged")
    return value


def encode_record(value: dict[str, Any], what: str) -> bytes:
    content = json.dumps(value, sort_keys=True).encode()
    if len(content) > MAX_RECORD_BYTES:
        raise StoreError(
            f"{what}: its record would be {len(content)} bytes, more than the "
            f"{MAX_RECORD_BYTES} a record may hold (metadata or tags too large)"
        )
    return content


class DiskStore:
    """The store of one serving process (see the module docstring); `close` releases it."""

    def __init__(self, root: Path, lock_fd: int) -> None:
        self.root = root
        self.buckets_dir = root / BUCKETS_DIR
        self._lock_fd = lock_fd

    def close(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = -1

    def bucket_dir(self, name: str) -> Path:
        check_bucket_name(name)
        return self.buckets_dir / name

    def objects_dir(self, bucket: str) -> Path:
        return self.bucket_dir(bucket) / OBJECTS_DIR

    def list_buckets(self) -> list[BucketRecord]:
        records = []
        for path in sorted(self.buckets_dir.iterdir()):
            value = load_json(path / BUCKET_FILE, MAX_RECORD_BYTES)
            try:
                record = BucketRecord(
                    str(value["name"]),
                    str(value["account_id"]),
                    str(value["region"]),
                    str(value["created"]),
                )
            except KeyError as missing:
                raise StoreError(
                    f"{path / BUCKET_FILE}: no {missing}; the store is damaged"
                ) from None
            if record.name != path.name:
                raise StoreError(
                    f"{path / BUCKET_FILE}: names bucket {record.name!r}, not {path.name!r}; "
                    "the store is damaged"
                )
            records.append(record)
        return records

    def list_objects(self, bucket: str) -> list[ObjectRecord]:
        records = []
        for path in sorted(self.objects_dir(bucket).iterdir()):
            match = RECORD_NAME.fullmatch(path.name)
            if match:
                records.append(self._load_object(path, match.group(1)))
        return records

    def _load_object(self, path: Path, hashed: str) -> ObjectRecord:
        value = load_json(path, MAX_RECORD_BYTES)
        try:
            record = ObjectRecord(
                str(value["key"]),
                int(value["size"]),
                str(value["sha256"]),
                str(value["data"]),
                dict(value["attributes"]),
            )
        except (KeyError, TypeError, ValueError) as error:
            raise StoreError(f"{path}: a bad record ({error!r}); the store is damaged") from None
        data = DATA_NAME.fullmatch(record.data)
        if hash_key(record.key) != hashed or not data or data.group(1) != hashed:
            raise StoreError(
                f"{path}: its key or data file does not match its name; the store is damaged"
            )
        return record

    def read_data(self, bucket: str, record: ObjectRecord) -> Iterator[bytes]:
        """The object's bytes in chunks; StoreError when their size or SHA-256 is not the
        record's (the size is checked before reading, the hash after the last chunk)."""
        path = self.objects_dir(bucket) / record.data
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            raise StoreError(
                f"{path}: missing, named by the record of {bucket}/{record.key}; "
                "the store is damaged"
            ) from None
        if size != record.size:
            raise StoreError(
                f"{path}: {size} bytes, the record of {bucket}/{record.key} says "
                f"{record.size}; the store is damaged"
            )
        digest = hashlib.sha256()
        with open(path, "rb") as stream:
            while chunk := stream.read(CHUNK_BYTES):
                digest.update(chunk)
                yield chunk
        if digest.hexdigest() != record.sha256:
            raise StoreError(
                f"{path}: its SHA-256 is not the one recorded for {bucket}/{record.key}; "
                "the store is damaged"
            )

    def save_bucket(self, record: BucketRecord) -> None:
        directory = self.bucket_dir(record.name)
        make_dir(directory / OBJECTS_DIR)
        content = encode_record(
            {
                "name": record.name,
                "account_id": record.account_id,
                "region": record.region,
                "created": record.created,
            },
            f"bucket {record.name}",
        )
        replace_file(directory / BUCKET_FILE, content)

    def drop_bucket(self, name: str) -> None:
        """Remove the bucket and whatever it still holds; bucket.json goes first (commit)."""
        directory = self.bucket_dir(name)
        if not directory.exists():
            return
        (directory / BUCKET_FILE).unlink(missing_ok=True)
        fsync_dir(directory)
        shutil.rmtree(directory)
        fsync_dir(self.buckets_dir)

    def save_object(
        self,
        bucket: str,
        key: str,
        attributes: dict[str, Any],
        chunks: Iterable[bytes] | None,
        previous: ObjectRecord | None,
    ) -> ObjectRecord:
        """Write the object's record, with new data from chunks, or, when chunks is None, the
        data file of `previous` (the same bytes, new attributes). Durable when it returns."""
        directory = self.objects_dir(bucket)
        hashed = hash_key(key)
        if chunks is None:
            if previous is None:
                raise ValueError("save_object: no chunks and no previous data to keep")
            size, sha256, data = previous.size, previous.sha256, previous.data
        else:
            data = f"{hashed}-{secrets.token_hex(8)}.data"
            size, sha256 = write_new_file(directory / data, chunks)
            fsync_dir(directory)  # the data file's name is durable before a record names it
        record = ObjectRecord(key, size, sha256, data, attributes)
        content = encode_record(
            {"key": key, "size": size, "sha256": sha256, "data": data, "attributes": attributes},
            f"object {bucket}/{key}",
        )
        try:
            replace_file(directory / f"{hashed}.json", content)
        except BaseException:
            if chunks is not None:
                (directory / data).unlink(missing_ok=True)
            raise
        if previous is not None and previous.data != data:
            (directory / previous.data).unlink(missing_ok=True)  # a leftover if this is lost
        return record

    def drop_object(self, bucket: str, record: ObjectRecord) -> None:
        """Remove the object: its record first (the commit), then its data."""
        directory = self.objects_dir(bucket)
        (directory / f"{hash_key(record.key)}.json").unlink(missing_ok=True)
        fsync_dir(directory)
        (directory / record.data).unlink(missing_ok=True)


def open_store(root: Path) -> DiskStore:
    """Open (or create) the store at root for this process: lock it, check its format, and
    remove what an interrupted write left behind. StoreError when another process holds it."""
    make_dir(root)
    root.chmod(DIR_MODE)
    lock_fd = lock_store(root)
    try:
        os.ftruncate(lock_fd, 0)
        os.pwrite(lock_fd, str(os.getpid()).encode(), 0)
        for leftover in root.glob(f"{TMP_PREFIX}*"):
            leftover.unlink()
        check_format(root)
        make_dir(root / BUCKETS_DIR)
        remove_leftovers(root / BUCKETS_DIR)
    except BaseException:
        os.close(lock_fd)
        raise
    return DiskStore(root, lock_fd)


def lock_store(root: Path) -> int:
    """A descriptor holding the store's exclusive lock; StoreError, naming the holder's pid,
    while another process holds it. Closing the descriptor (or dying) releases it."""
    fd = os.open(root / LOCK_FILE, os.O_RDWR | os.O_CREAT, FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        os.close(fd)
        if error.errno not in (errno.EAGAIN, errno.EACCES):
            raise
        raise StoreError(
            f"an S3 server (pid {read_holder_pid(root) or '?'}) is using {root}; "
            "stop it first (make down)"
        ) from None
    return fd


def check_format(root: Path) -> None:
    path = root / FORMAT_FILE
    if not path.exists():
        if (root / BUCKETS_DIR).exists():
            raise StoreError(f"{path}: missing, but {root / BUCKETS_DIR} exists; not our store")
        replace_file(path, (FORMAT + "\n").encode())
        return
    found = read_small_file(path, MAX_SMALL_FILE_BYTES).decode(errors="replace").strip()
    if found != FORMAT:
        raise StoreError(
            f"{path}: {found!r}, this server reads {FORMAT!r}; "
            "use the server that wrote it, or remove the data (make clean-state)"
        )


def remove_leftovers(buckets_dir: Path) -> None:
    """What a crash mid-write can leave: temporary files, data files no record names, and
    bucket directories whose bucket.json was never committed (or already removed)."""
    for path in buckets_dir.iterdir():
        if not path.is_dir() or path.is_symlink():
            path.unlink()
        elif not (path / BUCKET_FILE).is_file():
            shutil.rmtree(path)
        else:
            for leftover in path.iterdir():
                if leftover.name.startswith(TMP_PREFIX):
                    leftover.unlink()
            remove_unnamed_data(path / OBJECTS_DIR)


def remove_unnamed_data(objects_dir: Path) -> None:
    names = {path.name for path in objects_dir.iterdir()}
    named = set()
    for name in names:
        if RECORD_NAME.fullmatch(name):
            named.add(str(load_json(objects_dir / name, MAX_RECORD_BYTES).get("data")))
    for name in names:
        if name.startswith(TMP_PREFIX) or (DATA_NAME.fullmatch(name) and name not in named):
            (objects_dir / name).unlink()


def read_holder_pid(root: Path) -> int | None:
    try:
        text = read_small_file(root / LOCK_FILE, MAX_SMALL_FILE_BYTES).decode().strip()
        return int(text)
    except (OSError, ValueError, StoreError):
        return None
