"""What a bundle may contain: the manifest, the path rules and the refusals.

Pure checks on names and on MANIFEST.json, shared by the reader
(`bundleread.py`) and re-exported by `bundle.py`. The rules here decide what
`verify_bundle` accepts, so they must also guarantee that `extract_bundle`
can write it: no path that is both a file and a directory (`code/x` and
`code/x/y`, or a file named `code`), no name a Linux file system refuses
(too long, not UTF-8), no trailing `/` on a file.

Standard library only: shipped to pods.
"""

from __future__ import annotations

import enum
import json
import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass

from runtime.errors import PodError

FORMAT_VERSION = 1
MANIFEST_NAME = "MANIFEST.json"
TOP_DIRS = ("code", "data")
DEFAULT_MAX_TOTAL_SIZE = 20 * 1024**3
# The archive itself; incompressible data grows a little in tar and gzip.
DEFAULT_MAX_COMPRESSED_SIZE = DEFAULT_MAX_TOTAL_SIZE + DEFAULT_MAX_TOTAL_SIZE // 16
# Parsing a manifest costs ~5x its size (an 8 MiB one of ~60,000 files: +37 MiB RSS,
# a 64 MiB one: +306 MiB), so its size bounds the reader's memory: ~60,000 files.
MAX_MANIFEST_BYTES = 8 * 1024**2
# Linux limits (NAME_MAX; a path well under PATH_MAX once the destination is prefixed).
MAX_NAME_COMPONENT_BYTES = 255
MAX_PATH_BYTES = 1024
CHUNK_BYTES = 1024 * 1024
ARCHIVE_MEMBER = "<archive>"

_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


class Refusal(enum.Enum):
    """Why a bundle was refused; the value is the reason shown to people."""

    ABSOLUTE_PATH = "absolute path"
    PARENT_REFERENCE = "path contains '..'"
    NOT_NORMALIZED = "path is not a normalized relative path"
    PATH_TOO_LONG = "path is too long"
    OUTSIDE_TOP_DIRS = "path is outside code/ and data/"
    FILE_DIR_CONFLICT = "path is both a file and a directory"
    LINK = "links are refused (symbolic and hard, wherever they point)"
    SPECIAL_FILE = "device files, fifos and other special files are refused"
    TOO_LARGE = "total size over the limit"
    ARCHIVE_TOO_LARGE = "compressed archive over the size limit"
    NOT_IN_MANIFEST = "member is not listed in the manifest"
    DUPLICATE = "member appears twice"
    SIZE_MISMATCH = "size does not match the manifest"
    CHECKSUM_MISMATCH = "sha256 does not match the manifest"
    MISSING = "listed in the manifest but missing from the archive"
    BAD_MANIFEST = "manifest is missing or invalid"
    EXTENDED_HEADER = "extended tar header over the limit"
    TRAILING_DATA = "data after the end of the archive"
    CORRUPT = "archive is corrupt or truncated"
    FILTER = "refused by tarfile's data filter"
    EXTRACT_FAILED = "cannot be extracted"
    BAD_SOURCE = "cannot be packed"


class BundleError(PodError):
    """A bundle was refused (or could not be written): names the member and the reason."""

    def __init__(self, member: str, reason: Refusal, detail: str = "") -> None:
        self.member = member
        self.reason = reason
        self.detail = detail
        text = f"bundle refused: {member}: {reason.value}"
        super().__init__(f"{text} ({detail})" if detail else text)


@dataclass(frozen=True)
class ManifestEntry:
    path: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    name: str
    created: str
    files: tuple[ManifestEntry, ...]
    total_size: int
    format_version: int = FORMAT_VERSION

    def to_json(self) -> bytes:
        body = {
            "format_version": self.format_version,
            "name": self.name,
            "created": self.created,
            "files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in self.files],
            "total_size": self.total_size,
        }
        return (json.dumps(body, indent=1, sort_keys=False) + "\n").encode()


def check_member_path(name: str) -> None:
    """Refuse any path that is not a plain relative path under code/ or data/."""
    if name.startswith("/") or name.startswith("\\") or re.match(r"^[A-Za-z]:", name):
        raise BundleError(name, Refusal.ABSOLUTE_PATH)
    parts = name.replace("\\", "/").split("/")
    if ".." in parts:
        raise BundleError(name, Refusal.PARENT_REFERENCE)
    if (
        "\\" in name
        or "\x00" in name
        or posixpath.normpath(name) != name.rstrip("/")
        or "" in parts[:-1]
    ):
        raise BundleError(name, Refusal.NOT_NORMALIZED)
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:  # tarfile's surrogate escapes of non-UTF-8 bytes
        raise BundleError(repr(name), Refusal.NOT_NORMALIZED, "not valid UTF-8") from None
    if len(encoded) > MAX_PATH_BYTES:
        raise BundleError(name, Refusal.PATH_TOO_LONG, f"at most {MAX_PATH_BYTES} bytes")
    if any(len(part.encode()) > MAX_NAME_COMPONENT_BYTES for part in parts):
        raise BundleError(
            name, Refusal.PATH_TOO_LONG, f"a component over {MAX_NAME_COMPONENT_BYTES} bytes"
        )
    if parts[0] not in TOP_DIRS:
        raise BundleError(name, Refusal.OUTSIDE_TOP_DIRS)


def check_file_dir_conflicts(files: Iterable[str]) -> None:
    """Refuse a file whose path is also a directory: another file's parent, or code/data.

    Extraction would fail half-way on such a pair (FileExistsError), in either
    order, so the check that verify and extract share refuses it up front.
    """
    paths = set(files)
    parent_of: dict[str, str] = {top: f"{top}/ is always a directory" for top in TOP_DIRS}
    for path in sorted(paths):
        parts = path.split("/")
        for end in range(1, len(parts)):
            parent_of.setdefault("/".join(parts[:end]), f"the manifest also lists {path}")
    clashes = sorted(paths & parent_of.keys())
    if clashes:
        raise BundleError(clashes[0], Refusal.FILE_DIR_CONFLICT, parent_of[clashes[0]])


def check_directory_member(name: str, files: Iterable[str] | dict[str, ManifestEntry]) -> None:
    """A directory member must not sit at, or under, a path the manifest lists as a file."""
    parts = name.split("/")
    for end in range(1, len(parts) + 1):
        prefix = "/".join(parts[:end])
        if prefix in files:
            raise BundleError(
                name, Refusal.FILE_DIR_CONFLICT, f"the manifest lists {prefix} as a file"
            )


def parse_manifest(body: bytes, max_total_size: int) -> Manifest:
    """Parse and validate MANIFEST.json; every listed path must itself be safe."""
    try:
        raw = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BundleError(MANIFEST_NAME, Refusal.BAD_MANIFEST, f"not JSON: {exc}") from None
    except RecursionError:
        raise BundleError(MANIFEST_NAME, Refusal.BAD_MANIFEST, "nested too deeply") from None
    if not isinstance(raw, dict):
        raise BundleError(MANIFEST_NAME, Refusal.BAD_MANIFEST, "not a JSON object")
    if raw.get("format_version") != FORMAT_VERSION:
        raise BundleError(
            MANIFEST_NAME,
            Refusal.BAD_MANIFEST,
            f"format_version: {raw.get('format_version')!r} given; "
            f"this reader knows {FORMAT_VERSION}",
        )
    files = raw.get("files")
    if not isinstance(files, list):
        raise BundleError(MANIFEST_NAME, Refusal.BAD_MANIFEST, "files: a list is required")
    entries = []
    seen = set()
    for index, item in enumerate(files):
        where = f"files[{index}]"
        if not isinstance(item, dict):
            raise BundleError(
                MANIFEST_NAME, Refusal.BAD_MANIFEST, f"{where}: an object is required"
            )
        path, size, digest = item.get("path"), item.get("size"), item.get("sha256")
        if not isinstance(path, str):
            raise BundleError(
                MANIFEST_NAME, Refusal.BAD_MANIFEST, f"{where}.path: a string is required"
            )
        check_member_path(path)
        if path.endswith("/"):
            raise BundleError(path, Refusal.NOT_NORMALIZED, "a file's path cannot end with '/'")
        if path in seen:
            raise BundleError(path, Refusal.DUPLICATE, "listed twice in the manifest")
        seen.add(path)
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise BundleError(
                MANIFEST_NAME,
                Refusal.BAD_MANIFEST,
                f"{where}.size: {size!r} given; a non-negative integer is required",
            )
        if not isinstance(digest, str) or not _SHA256_RE.match(digest):
            raise BundleError(
                MANIFEST_NAME,
                Refusal.BAD_MANIFEST,
                f"{where}.sha256: {digest!r} given; 64 lowercase hex digits are required",
            )
        entries.append(ManifestEntry(path, size, digest))
    check_file_dir_conflicts(seen)
    total = sum(e.size for e in entries)
    if raw.get("total_size") != total:
        raise BundleError(
            MANIFEST_NAME,
            Refusal.BAD_MANIFEST,
            f"total_size: {raw.get('total_size')!r} given; the files add up to {total}",
        )
    if total > max_total_size:
        raise BundleError(
            MANIFEST_NAME, Refusal.TOO_LARGE, f"{total} bytes listed; the limit is {max_total_size}"
        )
    name, created = raw.get("name"), raw.get("created")
    if not isinstance(name, str) or not isinstance(created, str):
        raise BundleError(
            MANIFEST_NAME, Refusal.BAD_MANIFEST, "name and created: strings are required"
        )
    return Manifest(name=name, created=created, files=tuple(entries), total_size=total)
