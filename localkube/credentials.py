"""The cluster's bearer token (where it lives, how it is made and read), and what a client holds.

Why it exists: the API server listens on 127.0.0.1, where every local user can connect, and a
pod it admits runs with the host's root rights; so every request must carry this token
(checked by localkube/apiserver/authentication.py). There is one token per state dir,
`DIR/token`:

- made once, by whichever of `up` and the API server first finds the state dir without one
  (`secrets.token_urlsafe(32)`), and kept across `down`/`up` and restarts, like DIR/store.db:
  a kubeconfig written once keeps working;
- 0600 from its first byte: written to a temporary file opened 0600, then linked into place,
  so two starters racing on one state dir both end up with the one token that was linked first;
- handed on through files only: `up` writes it into DIR/kubeconfig (users[].user.token), the
  API server and the kubelets read DIR/token. Never through argv, which /proc/<pid>/cmdline
  shows to every local user.

A client of the API server (`up` waiting for it, a kubelet) holds `ClusterCredentials`: the
token it sends and the cluster CA (localkube/certificates.py) it checks the server against.
"""

from __future__ import annotations

import os
import secrets
import ssl
from dataclasses import dataclass
from pathlib import Path

from localkube.certificates import build_client_ssl_context, ensure_serving_files, read_ca_pem
from localkube.errors import LocalkubeError

TOKEN_FILE = "token"
TOKEN_FILE_MODE = 0o600
TOKEN_BYTES = 32


class TokenError(LocalkubeError):
    """DIR/token is missing, unreadable or empty; the message says what to do."""


@dataclass(frozen=True)
class ClusterCredentials:
    """The bearer token a client sends and the CA (PEM) it verifies the API server with."""

    token: str
    ca_pem: str

    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def ssl_context(self) -> ssl.SSLContext:
        return build_client_ssl_context(self.ca_pem)


def ensure_credentials(state_dir: str | os.PathLike) -> ClusterCredentials:
    """The state dir's token and CA, made first when missing (what `up` does)."""
    token = ensure_token(state_dir)
    return ClusterCredentials(token, ensure_serving_files(state_dir).ca.read_text())


def read_credentials(state_dir: str | os.PathLike) -> ClusterCredentials:
    """The state dir's token and CA, which must exist (what a kubelet does); TokenError or
    certificates.CertificateError otherwise."""
    return ClusterCredentials(read_token(state_dir), read_ca_pem(state_dir))


def token_path(state_dir: str | os.PathLike) -> Path:
    return Path(state_dir) / TOKEN_FILE


def ensure_token(state_dir: str | os.PathLike) -> str:
    """The state dir's token, made first when it has none; the file is left 0600."""
    path = token_path(state_dir)
    if not path.exists():
        create_token_file(path)
    if path.stat().st_mode & 0o777 != TOKEN_FILE_MODE:
        os.chmod(path, TOKEN_FILE_MODE)
    return read_token(state_dir)


def read_token(state_dir: str | os.PathLike) -> str:
    """The state dir's token; TokenError when there is none to read."""
    path = token_path(state_dir)
    try:
        token = path.read_text().strip()
    except FileNotFoundError:
        raise TokenError(
            f"{path} does not exist: the cluster's token is made by "
            f"`python -m localkube up --state-dir {Path(state_dir)}`; start the "
            f"cluster (or its API server) first"
        ) from None
    except OSError as error:
        raise TokenError(f"cannot read the cluster's token {path}: {error}") from None
    if not token:
        raise TokenError(
            f"{path} is empty; remove it and run `python -m localkube up` again "
            f"to make a new token (kubeconfigs written before stop working)"
        )
    return token


def create_token_file(path: Path) -> None:
    """Link a new 0600 token file at path unless one is there already (first linker wins)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, TOKEN_FILE_MODE)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(TOKEN_BYTES) + "\n")
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another starter made the token first: use theirs
    finally:
        tmp.unlink(missing_ok=True)
