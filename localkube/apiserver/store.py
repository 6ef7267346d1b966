"""The object store: every object in memory, every change persisted, every change fanned out.

Why one class: resourceVersion assignment, persistence and watch delivery must happen in the same
order, atomically with respect to the event loop (the server is single-threaded asyncio, so a
method that does not await is atomic). Objects handed out are never mutated afterwards: every
write stores a new dict, so watch events can share them without copying.

Persistence is a SQLite database in WAL mode (DIR/store.db) with one row per object and a
meta row holding the last resourceVersion. Every write is committed before the client hears
back (synchronous=NORMAL: a commit is a write() to the WAL, no fsync), so a killed API server
loses nothing it acknowledged. On restart the resourceVersion continues from the stored one.
The database holds every Secret, so it is created 0600 before SQLite opens it; SQLite gives its
-wal and -shm files the database file's mode.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from localkube.apiserver.selectors import Requirement, fields_match, labels_match

HISTORY_SIZE = 50_000
DB_FILE_MODE = 0o600


class EventType(StrEnum):
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"


@dataclass(frozen=True)
class WatchEvent:
    resource: str
    type: EventType
    obj: dict
    old: dict | None
    rv: int


@dataclass(eq=False)
class Watcher:
    """One open watch: its filters and the queue its HTTP response drains."""

    resource: str
    namespace: str | None
    labels: tuple[Requirement, ...] = ()
    fields: tuple = ()
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)

    def matches(self, obj: dict | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata", {})
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        return labels_match(self.labels, meta.get("labels")) and fields_match(self.fields, obj)

    def offer(self, event: WatchEvent) -> None:
        """Queue the event as this watcher sees it: objects entering or leaving the selection
        show up as ADDED or DELETED, like a real filtered watch."""
        now = self.matches(event.obj)
        before = self.matches(event.old) if event.type == EventType.MODIFIED else now
        if event.type == EventType.MODIFIED and now != before:
            kind = EventType.ADDED if now else EventType.DELETED
            self.queue.put_nowait((kind, event.obj))
        elif now:
            self.queue.put_nowait((event.type, event.obj))


Key = tuple[str, str]  # (namespace or "", name)


def make_private(db_path: str) -> None:
    """Create the database file 0600 (or make an older one so), with its -wal and -shm files."""
    os.close(os.open(db_path, os.O_RDWR | os.O_CREAT, DB_FILE_MODE))
    for path in (db_path, db_path + "-wal", db_path + "-shm"):
        if os.path.exists(path):
            os.chmod(path, DB_FILE_MODE)


class Store:
    def __init__(self, db_path: str) -> None:
        make_private(db_path)
        self._db = sqlite3.connect(db_path, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS objects (resource TEXT, namespace TEXT, "
            "name TEXT, body TEXT, PRIMARY KEY (resource, namespace, name))"
        )
        self._db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
        self.objects: dict[str, dict[Key, dict]] = collections.defaultdict(dict)
        self.uids: dict[str, tuple[str, Key]] = {}
        row = self._db.execute("SELECT value FROM meta WHERE key='rv'").fetchone()
        self.rv = int(row[0]) if row else 0
        for resource, namespace, name, body in self._db.execute(
            "SELECT resource, namespace, name, body FROM objects"
        ):
            obj = json.loads(body)
            self.objects[resource][(namespace, name)] = obj
            self._index_uid(resource, (namespace, name), obj)
            self.rv = max(self.rv, int(obj["metadata"].get("resourceVersion", 0)))
        # Watches may resume from any version after this one; earlier ones answer 410.
        self.oldest_rv = self.rv
        self.history: collections.deque[WatchEvent] = collections.deque(maxlen=HISTORY_SIZE)
        self.watchers: set[Watcher] = set()
        self.listeners: list[Callable[[WatchEvent], None]] = []
        self._pending: dict[tuple[str, str, str], str | None] = {}
        self._db.execute("BEGIN")

    # -- reads ---------------------------------------------------------------------------------
    def get(self, resource: str, namespace: str, name: str) -> dict | None:
        return self.objects[resource].get((namespace or "", name))

    def list(self, resource: str, namespace: str | None = None) -> list[dict]:
        items = self.objects[resource]
        if namespace is None:
            return list(items.values())
        return [o for (ns, _), o in items.items() if ns == namespace]

    def find_uid(self, uid: str) -> dict | None:
        where = self.uids.get(uid)
        if where is None:
            return None
        return self.objects[where[0]].get(where[1])

    # -- writes --------------------------------------------------------------------------------
    def put(self, resource: str, obj: dict) -> dict:
        """Create or replace; assigns the next resourceVersion. Returns the stored object."""
        meta = obj["metadata"]
        key = (meta.get("namespace") or "", meta["name"])
        old = self.objects[resource].get(key)
        self.rv += 1
        meta["resourceVersion"] = str(self.rv)
        self.objects[resource][key] = obj
        self._index_uid(resource, key, obj)
        self._persist(resource, key, obj)
        self._emit(
            WatchEvent(resource, EventType.MODIFIED if old else EventType.ADDED, obj, old, self.rv)
        )
        return obj

    def remove(
        self, resource: str, namespace: str, name: str, final: dict | None = None
    ) -> dict | None:
        """Remove an object; the DELETED event carries `final` (its last state, e.g. with the
        finalizers just emptied) when given, else the stored object."""
        key = (namespace or "", name)
        old = self.objects[resource].pop(key, None)
        if old is None:
            return None
        self.uids.pop(old["metadata"].get("uid", ""), None)
        self.rv += 1
        last = final if final is not None else old
        gone = dict(last, metadata=dict(last["metadata"], resourceVersion=str(self.rv)))
        self._persist(resource, key, None)
        self._emit(WatchEvent(resource, EventType.DELETED, gone, old, self.rv))
        return gone

    # -- watch ---------------------------------------------------------------------------------
    def events_since(self, rv: int, resource: str) -> list[WatchEvent] | None:
        """Events after `rv` for a resource, or None when `rv` is older than the history."""
        if rv < self.oldest_rv or (self.history and rv < self.history[0].rv - 1):
            return None
        return [e for e in self.history if e.rv > rv and e.resource == resource]

    def _emit(self, event: WatchEvent) -> None:
        if len(self.history) == self.history.maxlen:
            self.oldest_rv = self.history[0].rv
        self.history.append(event)
        for watcher in list(self.watchers):
            if watcher.resource == event.resource:
                watcher.offer(event)
        for listener in self.listeners:
            listener(event)

    # -- persistence ---------------------------------------------------------------------------
    def _index_uid(self, resource: str, key: Key, obj: dict) -> None:
        uid = obj["metadata"].get("uid")
        if uid:
            self.uids[uid] = (resource, key)

    def _persist(self, resource: str, key: Key, obj: dict | None) -> None:
        self._pending[(resource, key[0], key[1])] = None if obj is None else json.dumps(obj)
        self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        pending, self._pending = self._pending, {}
        for (resource, namespace, name), body in pending.items():
            if body is None:
                self._db.execute(
                    "DELETE FROM objects WHERE resource=? AND namespace=? AND name=?",
                    (resource, namespace, name),
                )
            else:
                self._db.execute(
                    "INSERT OR REPLACE INTO objects VALUES (?, ?, ?, ?)",
                    (resource, namespace, name, body),
                )
        self._db.execute("INSERT OR REPLACE INTO meta VALUES ('rv', ?)", (str(self.rv),))
        self._db.execute("COMMIT")
        self._db.execute("BEGIN")

    def close(self) -> None:
        self.flush()
        self._db.execute("COMMIT")
        self._db.close()
