"""Keep moto's S3 backend and the disk store (scripts/s3_store.py) the same: save what a
request changed, and restore everything when the server starts.

Why this exists: moto keeps its S3 in memory, and a local S3 that forgets every
bundle, model and log at `make down` or a crash is not one to build on.

How moto tells us what changed: `install_change_tracking` wraps the six
methods of moto's `S3Backend` through which every change of what we keep goes
(`TRACKED_METHODS`: PUT, POST policy uploads, CopyObject and completed
multipart uploads all end in `put_object`; DeleteObjects calls
`delete_object` per key). While a thread is inside `collect_changes()`, each
call records its (bucket, key) there; key None stands for the bucket itself.
Requests are handled synchronously in their thread, so the set holds exactly
what that request changed, whatever its addressing style or form fields.

How it is saved: `BackendMirror.save_changes` reads the current state of each
changed bucket and object from moto and writes it (or its absence) to the
store, one bucket at a time under that bucket's lock. Reading the current
state, not the request, makes saves idempotent and order-proof: whichever save
runs last saw the latest state. Object bytes are streamed from moto's buffer
in 1 MiB chunks, under the key's own lock, never copied whole.

What is kept of an object: its bytes, the ETag clients saw (also a multipart
`"…-N"` one), Last-Modified, metadata (Content-Type, Content-Encoding,
Cache-Control, `x-amz-meta-*`, ...), storage class, checksum and tags; of a
bucket: its name, account, region and creation date. Not kept: ACLs, object
locks, older versions and delete markers of versioned buckets (only the
current version is), bucket configuration (policy, versioning, CORS,
lifecycle, tags), and multipart uploads not yet completed.
"""

from __future__ import annotations

import datetime as dt
import functools
import inspect
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from scripts.s3_store import (
    CHUNK_BYTES,
    BucketRecord,
    DiskStore,
    ObjectRecord,
    StoreError,
    StoreSize,
)

SAVE_ATTEMPTS = 5  # an object replaced while it is being copied is copied again

_collecting = threading.local()


@dataclass(frozen=True)
class Change:
    bucket: str
    key: str | None  # None: the bucket itself


# S3Backend method -> the change a call makes, from its arguments by name.
TRACKED_METHODS: dict[str, Callable[[dict[str, Any]], Change]] = {
    "put_object": lambda given: Change(given["bucket_name"], given["key_name"]),
    "delete_object": lambda given: Change(given["bucket_name"], given["key_name"]),
    "delete_object_tagging": lambda given: Change(given["bucket_name"], given["key_name"]),
    "put_object_tagging": lambda given: Change(given["key"].bucket_name, given["key"].name),
    "create_bucket": lambda given: Change(given["bucket_name"], None),
    "delete_bucket": lambda given: Change(given["bucket_name"], None),
}


def install_change_tracking() -> None:
    """Wrap TRACKED_METHODS of moto's S3Backend (once per process) to feed collect_changes."""
    from moto.s3.models import S3Backend

    for name, describe in TRACKED_METHODS.items():
        original = getattr(S3Backend, name, None)
        if original is None:
            raise RuntimeError(f"moto's S3Backend has no {name}: changes would go unsaved")
        if not getattr(original, "_tfjob_tracked", False):
            setattr(S3Backend, name, track_calls(original, describe))


def track_calls(original: Any, describe: Callable[[dict[str, Any]], Change]) -> Any:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def tracked(*args: Any, **kwargs: Any) -> Any:
        try:
            return original(*args, **kwargs)
        finally:  # also when it failed half-way: saving reads moto's state, whatever it is
            changes = getattr(_collecting, "changes", None)
            if changes is not None:
                changes.add(describe(signature.bind_partial(*args, **kwargs).arguments))

    tracked._tfjob_tracked = True  # type: ignore[attr-defined]
    return tracked


@contextmanager
def collect_changes() -> Iterator[set[Change]]:
    """The changes moto's backend makes in this thread until the block ends."""
    changes: set[Change] = set()
    _collecting.changes = changes
    try:
        yield changes
    finally:
        _collecting.changes = None


def find_bucket(name: str) -> Any:
    """moto's bucket of that name, in whichever account holds it; None when there is none."""
    from moto.s3.models import s3_backends

    where = s3_backends.bucket_accounts.get(name)
    if where is None:
        return None
    partition, account_id = where
    return s3_backends[account_id][partition].buckets.get(name)


def find_current_key(bucket: Any, name: str) -> Any:
    """The object's current version, or None (absent, or a delete marker)."""
    from moto.s3.models import FakeKey

    versions = dict.get(bucket.keys, name)  # the raw list: no KeyError, no copy
    latest = versions[-1] if versions else None
    return latest if isinstance(latest, FakeKey) else None


def backend_of(bucket: Any) -> Any:
    from moto.s3.models import s3_backends

    return s3_backends[bucket.account_id][bucket.partition]


def describe_key(key: Any, backend: Any) -> dict[str, Any]:
    """What is kept of an object besides its bytes (JSON types only, so a saved record
    compares equal to a fresh description of the same object)."""
    attributes: dict[str, Any] = {
        "etag": key.etag,
        "last_modified": key.last_modified.isoformat(),
        "metadata": {str(name): str(value) for name, value in key.metadata.items()},
        "storage_class": key.storage_class,
        "tags": {
            str(name): str(value)
            for name, value in backend.tagger.get_tag_dict_for_resource(key.arn).items()
        },
    }
    if key.checksum_value:
        attributes["checksum"] = {
            "algorithm": key.checksum_algorithm,
            "value": key.checksum_value,
            "type": key.checksum_type,
        }
    return attributes


def read_value(key: Any) -> Iterator[bytes]:
    """The object's bytes from moto's buffer, in chunks (the caller holds key.lock)."""
    buffer = key._value_buffer  # moto's SpooledTemporaryFile: spilled to disk when large
    buffer.seek(0)
    while chunk := buffer.read(CHUNK_BYTES):
        yield chunk


def describe_bucket(bucket: Any) -> BucketRecord:
    return BucketRecord(
        bucket.name, bucket.account_id, bucket.region_name, bucket.creation_date.isoformat()
    )


@dataclass(frozen=True)
class Saved:
    record: ObjectRecord
    source: weakref.ref[Any]  # the FakeKey whose bytes the record's data file holds


class BackendMirror:
    """What the store holds, in memory too, and the code that brings it up to date."""

    def __init__(self, store: DiskStore) -> None:
        self.store = store
        self._buckets: dict[str, BucketRecord] = {}
        self._objects: dict[str, dict[str, Saved]] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    def _lock_for(self, bucket: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(bucket, threading.Lock())

    def restore(self) -> StoreSize:
        """Load every bucket and object of the store into moto (call before serving)."""
        from moto.s3.models import s3_backends
        from moto.utilities.utils import get_partition

        objects = data_bytes = 0
        for record in self.store.list_buckets():
            backend = s3_backends[record.account_id][get_partition(record.region)]
            bucket = backend.create_bucket(record.name, record.region)
            bucket.creation_date = dt.datetime.fromisoformat(record.created)
            self._buckets[record.name] = record
            saved = self._objects.setdefault(record.name, {})
            for item in self.store.list_objects(record.name):
                key = restore_key(bucket, backend, item, self.store.read_data(record.name, item))
                saved[item.key] = Saved(item, weakref.ref(key))
                objects += 1
                data_bytes += item.size
        return StoreSize(len(self._buckets), objects, data_bytes)

    def save_changes(self, changes: Iterable[Change]) -> None:
        """Bring the store up to date with moto for these buckets and objects."""
        by_bucket: dict[str, set[str]] = {}
        for change in changes:
            keys = by_bucket.setdefault(change.bucket, set())
            if change.key is not None:
                keys.add(change.key)
        for name in sorted(by_bucket):
            with self._lock_for(name):
                bucket = self._save_bucket(name)
                if bucket is not None:
                    for key in sorted(by_bucket[name]):
                        self._save_key(bucket, key)

    def save_everything(self) -> None:
        """Bring the whole store up to date (after moto's own API, e.g. /moto-api/reset)."""
        from moto.s3.models import s3_backends

        for name in sorted(set(s3_backends.bucket_accounts) | set(self._buckets)):
            with self._lock_for(name):
                bucket = self._save_bucket(name)
                if bucket is not None:
                    names = set(dict.keys(bucket.keys)) | set(self._objects.get(name, {}))
                    for key in sorted(names):
                        self._save_key(bucket, key)

    def _save_bucket(self, name: str) -> Any:
        """The bucket's record as moto has it (or its removal); moto's bucket or None."""
        bucket = find_bucket(name)
        if bucket is None:
            if name in self._buckets:
                self.store.drop_bucket(name)
                del self._buckets[name]
                self._objects.pop(name, None)
            return None
        record = describe_bucket(bucket)
        if self._buckets.get(name) != record:
            self.store.save_bucket(record)
            self._buckets[name] = record
            self._objects.setdefault(name, {})
        return bucket

    def _save_key(self, bucket: Any, name: str) -> None:
        saved_objects = self._objects[bucket.name]
        for _ in range(SAVE_ATTEMPTS):
            key = find_current_key(bucket, name)
            saved = saved_objects.get(name)
            if key is None:
                if saved is not None:
                    self.store.drop_object(bucket.name, saved.record)
                    del saved_objects[name]
                return
            try:
                with key.lock:
                    if key.disposed:
                        continue  # replaced or deleted meanwhile: look again
                    attributes = describe_key(key, backend_of(bucket))
                    same_bytes = saved is not None and saved.source() is key
                    if same_bytes and saved.record.attributes == attributes:
                        return
                    record = self.store.save_object(
                        bucket.name,
                        name,
                        attributes,
                        None if same_bytes else read_value(key),
                        None if saved is None else saved.record,
                    )
            except ValueError:
                if key.disposed:  # moto closed the buffer we were copying: replaced
                    continue
                raise
            saved_objects[name] = Saved(record, weakref.ref(key))
            return
        raise StoreError(
            f"{bucket.name}/{name} was replaced {SAVE_ATTEMPTS} times while it was being "
            "saved; send the request again"
        )


def restore_key(bucket: Any, backend: Any, record: ObjectRecord, chunks: Iterable[bytes]) -> Any:
    """Put one stored object into moto's bucket as it was saved; the FakeKey."""
    from moto.s3.models import FakeKey

    attributes = record.attributes
    key = FakeKey(
        name=record.key,
        value=b"",
        account_id=bucket.account_id,
        region_name=bucket.region_name,
        storage=attributes.get("storage_class"),
        etag=str(attributes["etag"]).strip('"'),
        bucket_name=bucket.name,
    )
    with key.lock:
        buffer = key._value_buffer
        for chunk in chunks:
            buffer.write(chunk)
        key.contentsize = record.size
    key.last_modified = dt.datetime.fromisoformat(attributes["last_modified"])
    key.metadata.clear()
    key.set_metadata(dict(attributes.get("metadata", {})))
    checksum = attributes.get("checksum")
    if checksum:
        key.checksum_algorithm = checksum.get("algorithm")
        key.checksum_value = checksum.get("value")
        key.checksum_type = checksum.get("type")
    tags = attributes.get("tags") or {}
    if tags:
        backend.tagger.tag_resource(key.arn, [{"Key": k, "Value": v} for k, v in tags.items()])
    bucket.keys.setlist(record.key, [key])
    return key
