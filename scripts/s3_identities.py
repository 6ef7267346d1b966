"""Who may sign requests to the local S3: the admin key and the pods-only identities.

Why this exists: a secret that is written in the source is no secret, and a
grant signed with a key the grantee can also sign with is no limit. So:

- the admin key (Airflow's and tshell's own calls) is generated at the first
  start of a state dir and kept in `<state-dir>/credentials.json` (0600 in the
  0700 state dir); later starts reuse it;
- each tenant has a pods-only identity that Airflow uses only to presign its
  pods' grants; `<state-dir>/pod_identities.json` (0600) names, per access
  key, its secret, its tenant and the tenant's output prefixes. Whoever starts
  the services writes it (`write_pod_identities`; secrets generated once and
  kept), the server re-reads it when it changes (`Keyring`).

What a pods identity may reach is scripts/s3_reach.py.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

CREDENTIALS_FILE = "credentials.json"
POD_IDENTITIES_FILE = "pod_identities.json"
IDENTITIES_VERSION = 1
ADMIN_KEY_PREFIX = "tfjob-admin-"
POD_KEY_PREFIX = "tfjob-pods-"
# Both files are written by us; a file larger than this is not ours.
MAX_IDENTITIES_BYTES = 4 * 1024**2


class IdentitiesError(ValueError):
    """A credentials or identities file that cannot be used: the file, what is wrong."""


@dataclass(frozen=True)
class AdminCredentials:
    access_key: str
    secret_key: str


@dataclass(frozen=True)
class PodIdentity:
    """A tenant's pods-only signing identity and the output prefixes it may reach."""

    access_key: str
    secret_key: str
    tenant: str
    output_prefixes: tuple[str, ...]  # s3://bucket/prefix/


def generate_secret() -> str:
    return secrets.token_urlsafe(30)


def generate_access_key(prefix: str) -> str:
    return prefix + secrets.token_hex(8)


def write_private_json(path: Path, data: object) -> None:
    """Write `data` as JSON, 0600 from creation, replacing `path` atomically."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle, indent=2, sort_keys=True)
    os.replace(temp, path)


def read_json(path: Path) -> object:
    size = path.stat().st_size
    if size > MAX_IDENTITIES_BYTES:
        raise IdentitiesError(f"{path}: {size} bytes; at most {MAX_IDENTITIES_BYTES} are read")
    try:
        return json.loads(path.read_text())
    except ValueError as error:
        raise IdentitiesError(f"{path}: not JSON ({error})") from None


def ensure_admin_credentials(state_dir: Path) -> AdminCredentials:
    """The state dir's admin key: read, or generated and kept at its first start."""
    path = state_dir / CREDENTIALS_FILE
    if not path.exists():
        state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_private_json(
            path,
            {
                "access_key": generate_access_key(ADMIN_KEY_PREFIX),
                "secret_key": generate_secret(),
            },
        )
    data = read_json(path)
    if not isinstance(data, dict) or not all(
        isinstance(data.get(name), str) and data.get(name) for name in ("access_key", "secret_key")
    ):
        raise IdentitiesError(
            f"{path}: access_key and secret_key (non-empty strings) are required; "
            "remove the file to generate new ones"
        )
    return AdminCredentials(data["access_key"], data["secret_key"])


def parse_pod_identities(data: object, source: str) -> dict[str, PodIdentity]:
    """Access key -> PodIdentity of a pod_identities.json document."""
    if not isinstance(data, dict) or data.get("version") != IDENTITIES_VERSION:
        raise IdentitiesError(f"{source}: version {IDENTITIES_VERSION} document required")
    entries = data.get("identities")
    if not isinstance(entries, dict):
        raise IdentitiesError(f"{source}: identities must be an object of access keys")
    found = {}
    for key, entry in entries.items():
        where = f"{source}: identities.{key}"
        if not isinstance(entry, dict):
            raise IdentitiesError(f"{where}: an object is required")
        secret, tenant, prefixes = (
            entry.get("secret_key"),
            entry.get("tenant"),
            entry.get("output_prefixes"),
        )
        if not isinstance(secret, str) or not secret or not isinstance(tenant, str):
            raise IdentitiesError(f"{where}: secret_key and tenant (strings) are required")
        if not isinstance(prefixes, list) or not all(
            isinstance(p, str) and p.startswith("s3://") and p.endswith("/") for p in prefixes
        ):
            raise IdentitiesError(
                f"{where}.output_prefixes: {prefixes!r} given; a list of s3://bucket/prefix/"
            )
        found[key] = PodIdentity(key, secret, tenant, tuple(prefixes))
    return found


def write_pod_identities(
    state_dir: Path, tenants: Iterable[tuple[str, Iterable[str]]]
) -> dict[str, PodIdentity]:
    """Write pod_identities.json for these (tenant, output prefixes); tenant -> identity.

    A tenant that already has an identity in the file keeps its key and secret
    (Airflow's connections stay valid across restarts); its prefixes are rewritten.
    """
    path = state_dir / POD_IDENTITIES_FILE
    kept: dict[str, PodIdentity] = {}
    if path.exists():
        kept = {
            each.tenant: each for each in parse_pod_identities(read_json(path), str(path)).values()
        }
    chosen: dict[str, PodIdentity] = {}
    for tenant, prefixes in tenants:
        old = kept.get(tenant)
        chosen[tenant] = PodIdentity(
            old.access_key if old else generate_access_key(POD_KEY_PREFIX),
            old.secret_key if old else generate_secret(),
            tenant,
            tuple(prefixes),
        )
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_private_json(
        path,
        {
            "version": IDENTITIES_VERSION,
            "identities": {
                each.access_key: {
                    "secret_key": each.secret_key,
                    "tenant": each.tenant,
                    "output_prefixes": list(each.output_prefixes),
                }
                for each in chosen.values()
            },
        },
    )
    return chosen


class Keyring:
    """The server's keys: the admin key, and the pods identities re-read when their file changes.

    `get(access_key)` is the secret of either kind (what the signature checks need);
    `pod_identity(access_key)` says whether a key is a pods identity. The file is
    stat'ed at most once per request and parsed only when its size, mtime or inode
    changed; a file that cannot be read keeps the identities last read (and says so).
    """

    def __init__(self, admin: Mapping[str, str], identities_path: Path | None) -> None:
        self.admin = dict(admin)
        self.path = identities_path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._identities: dict[str, PodIdentity] = {}

    def _refresh(self) -> dict[str, PodIdentity]:
        if self.path is None:
            return self._identities
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            stamp = None
        else:
            stamp = (info.st_ino, info.st_size, info.st_mtime_ns)
        if stamp == self._stamp:
            return self._identities
        with self._lock:
            if stamp != self._stamp:
                try:
                    found = (
                        {}
                        if stamp is None
                        else parse_pod_identities(read_json(self.path), str(self.path))
                    )
                except (OSError, IdentitiesError) as error:
                    print(f"s3 server: pods identities not reloaded: {error}", flush=True)
                    return self._identities
                self._identities = {k: v for k, v in found.items() if k not in self.admin}
                self._stamp = stamp
        return self._identities

    def get(self, access_key: str) -> str | None:
        secret = self.admin.get(access_key)
        if secret is not None:
            return secret
        identity = self._refresh().get(access_key)
        return identity.secret_key if identity else None

    def pod_identity(self, access_key: str) -> PodIdentity | None:
        return self._refresh().get(access_key)
