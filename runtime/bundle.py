"""The bundle format and the one bundle safety check.

A bundle is `<name>.tar.gz` whose first member is `MANIFEST.json`, followed by
regular files under `code/` and `data/`. The manifest lists every file with
its size and sha256, so a reader can check the archive in one streaming pass.

Bundles cross a trust boundary twice (laptop -> S3 -> every pod), so reading
one is done here and only here: tshell, Airflow and the pod's init container
all call `verify_bundle` / `extract_bundle`. The check refuses, naming the
member and the reason: absolute paths, `..`, paths outside `code/`/`data/`,
every link (symbolic or hard, wherever it points: `write_bundle` stores link
targets as plain files, so a well-formed bundle never has one), device files
and fifos, a total size over the caller's limit, members that are not in the
manifest or do not match its size/sha256, manifest files that are missing,
and corrupt or truncated archives. Python's tarfile `data` extraction filter
runs on every member as a second, independent guard.

Extraction writes into a temporary directory inside the destination (the
destination may be a mount point, e.g. a pod's emptyDir, which cannot be
renamed) and moves `code/` and `data/` into place only after the whole
archive verified, so a refused bundle leaves nothing half-extracted.

Standard library only: this module is shipped to pods that may lack anything
else.
"""

from __future__ import annotations

import enum
import gzip
import hashlib
import io
import json
import os
import posixpath
import re
import shutil
import stat
import tarfile
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

FORMAT_VERSION = 1
MANIFEST_NAME = "MANIFEST.json"
TOP_DIRS = ("code", "data")
EXCLUDED_DIR_NAMES = frozenset({".git", "__pycache__"})
EXCLUDED_SUFFIXES = (".pyc",)
LARGE_FILE_BYTES = 100 * 1000 * 1000
DEFAULT_MAX_TOTAL_SIZE = 20 * 1024**3
MAX_MANIFEST_BYTES = 64 * 1024**2
DEFAULT_COMPRESSLEVEL = 1  # bundles are mostly data: level 1 is ~3x faster than 6 for a few % size
CHUNK_BYTES = 1024 * 1024
ARCHIVE_MEMBER = "<archive>"

ProgressCallback = Callable[[int, int], None]
"""Called as progress(done_bytes, total_bytes) while reading or writing."""

_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


class Refusal(enum.Enum):
    """Why a bundle was refused; the value is the reason shown to people."""

    ABSOLUTE_PATH = "absolute path"
    PARENT_REFERENCE = "path contains '..'"
    NOT_NORMALIZED = "path is not a normalized relative path"
    OUTSIDE_TOP_DIRS = "path is outside code/ and data/"
    LINK = "links are refused (symbolic and hard, wherever they point)"
    SPECIAL_FILE = "device files, fifos and other special files are refused"
    TOO_LARGE = "total size over the limit"
    NOT_IN_MANIFEST = "member is not listed in the manifest"
    DUPLICATE = "member appears twice"
    SIZE_MISMATCH = "size does not match the manifest"
    CHECKSUM_MISMATCH = "sha256 does not match the manifest"
    MISSING = "listed in the manifest but missing from the archive"
    BAD_MANIFEST = "manifest is missing or invalid"
    CORRUPT = "archive is corrupt or truncated"
    FILTER = "refused by tarfile's data filter"
    BAD_SOURCE = "cannot be packed"


class BundleError(Exception):
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


@dataclass(frozen=True)
class BundleInfo:
    """What `write_bundle` produced: the archive and its own size and sha256."""

    path: Path
    manifest: Manifest
    archive_size: int
    archive_sha256: str
    large_files: tuple[ManifestEntry, ...] = field(default=())
    skipped: tuple[str, ...] = field(default=())


# --------------------------------------------------------------------------- writing


def collect_source_files(
    src_dir: str | os.PathLike[str],
) -> tuple[list[tuple[str, Path]], list[str]]:
    """Map a source directory to (bundle path, file) pairs, sorted, plus skipped top-level names.

    `DIR/code` and `DIR/data` become `code/` and `data/`; when DIR has neither,
    all of DIR becomes `code/`. Links are followed (their targets are packed as
    plain files) but must stay inside DIR.
    """
    root = Path(src_dir)
    if not root.is_dir():
        raise BundleError(str(root), Refusal.BAD_SOURCE, "not a directory")
    real_root = root.resolve()
    tops = [t for t in TOP_DIRS if (root / t).is_dir()]
    skipped: list[str] = []
    if tops:
        skipped = sorted(p.name for p in root.iterdir() if p.name not in tops)
        sources = [(t, root / t) for t in tops]
    else:
        sources = [("code", root)]
    pairs: list[tuple[str, Path]] = []
    for prefix, top in sources:
        for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
            dirnames[:] = sorted(d for d in dirnames if d not in EXCLUDED_DIR_NAMES)
            # Directory links are not walked into; packed only when they point inside.
            for name in sorted(
                filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
            ):
                if name.endswith(EXCLUDED_SUFFIXES):
                    continue
                path = Path(dirpath) / name
                rel = path.relative_to(top).as_posix()
                if path.is_symlink():
                    target = path.resolve()
                    if not target.is_relative_to(real_root):
                        raise BundleError(
                            str(path), Refusal.BAD_SOURCE, f"link points outside {root}: {target}"
                        )
                    if target.is_dir():
                        skipped.append(f"{prefix}/{rel} (link to a directory)")
                        continue
                if not path.is_file():
                    raise BundleError(str(path), Refusal.BAD_SOURCE, "not a regular file")
                pairs.append((f"{prefix}/{rel}", path))
    pairs.sort(key=lambda pair: pair[0])
    return pairs, skipped


def hash_file(path: Path, on_bytes: Callable[[int], None] | None = None) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as stream:
        while chunk := stream.read(CHUNK_BYTES):
            digest.update(chunk)
            size += len(chunk)
            if on_bytes:
                on_bytes(len(chunk))
    return size, digest.hexdigest()


class _HashingWriter(io.RawIOBase):
    """A write-only file that hashes and counts what passes through it."""

    def __init__(
        self, target: io.BufferedWriter, also: Callable[[bytes], None] | None = None
    ) -> None:
        self.target = target
        self.also = also
        self.digest = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.digest.update(data)
        self.size += len(data)
        self.target.write(data)
        if self.also is not None:
            self.also(bytes(data))
        return len(data)


def _tar_info(name: str, size: int, mode: int = 0o644, mtime: float = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mode = mode
    info.mtime = int(mtime)
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def write_bundle(
    src_dir: str | os.PathLike[str],
    out_path: str | os.PathLike[str],
    name: str,
    progress: ProgressCallback | None = None,
    compresslevel: int = DEFAULT_COMPRESSLEVEL,
    on_archive_bytes: Callable[[bytes], None] | None = None,
) -> BundleInfo:
    """Pack `src_dir` into `out_path` (a .tar.gz with MANIFEST.json first).

    Excludes `.git`, `__pycache__` and `*.pyc`; members are in sorted order
    with owner 0 and normalized modes. The archive is written to a temporary
    name and renamed into place when complete. `on_archive_bytes` sees the
    compressed bytes as they are written (tshell push uploads them at once).
    """
    pairs, skipped = collect_source_files(src_dir)
    sizes = [p.stat().st_size for _, p in pairs]
    grand_total = 2 * sum(sizes)  # read once to hash, once to compress
    done = 0

    def advance(count: int) -> None:
        nonlocal done
        done += count
        if progress:
            progress(done, grand_total)

    entries = []
    for (bundle_path, path), _size in zip(pairs, sizes, strict=True):
        size, digest = hash_file(path, advance)
        entries.append(ManifestEntry(bundle_path, size, digest))
    manifest = Manifest(
        name=name,
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        files=tuple(entries),
        total_size=sum(e.size for e in entries),
    )
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.partial")
    try:
        with open(tmp, "wb") as raw:
            hashing = _HashingWriter(raw, on_archive_bytes)
            with gzip.GzipFile(
                filename="", mode="wb", fileobj=hashing, compresslevel=compresslevel, mtime=0
            ) as gz:
                with tarfile.open(
                    fileobj=gz, mode="w", format=tarfile.PAX_FORMAT, copybufsize=CHUNK_BYTES
                ) as tar:
                    body = manifest.to_json()
                    tar.addfile(_tar_info(MANIFEST_NAME, len(body)), io.BytesIO(body))
                    for entry, (_, path) in zip(entries, pairs, strict=True):
                        st = path.stat()
                        if st.st_size != entry.size:
                            raise BundleError(
                                str(path), Refusal.BAD_SOURCE, "file changed while packing"
                            )
                        mode = 0o755 if st.st_mode & stat.S_IXUSR else 0o644
                        with open(path, "rb") as stream:
                            tar.addfile(
                                _tar_info(entry.path, entry.size, mode, st.st_mtime),
                                _CountingReader(stream, advance),
                            )
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    large = tuple(e for e in entries if e.size > LARGE_FILE_BYTES)
    return BundleInfo(
        out, manifest, hashing.size, hashing.digest.hexdigest(), large, tuple(skipped)
    )


class _CountingReader:
    def __init__(self, stream: io.BufferedReader, on_bytes: Callable[[int], None]) -> None:
        self.stream = stream
        self.on_bytes = on_bytes

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(size)
        self.on_bytes(len(data))
        return data


# --------------------------------------------------------------------------- checking


def parse_manifest(body: bytes, max_total_size: int) -> Manifest:
    """Parse and validate MANIFEST.json; every listed path must itself be safe."""
    try:
        raw = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BundleError(MANIFEST_NAME, Refusal.BAD_MANIFEST, f"not JSON: {exc}") from None
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
    if parts[0] not in TOP_DIRS:
        raise BundleError(name, Refusal.OUTSIDE_TOP_DIRS)


def check_member_kind(member: tarfile.TarInfo) -> None:
    if member.issym() or member.islnk():
        raise BundleError(member.name, Refusal.LINK, f"points to {member.linkname!r}")
    if not (member.isfile() or member.isdir()):
        raise BundleError(member.name, Refusal.SPECIAL_FILE)


def _iterate_checked(
    path: str | os.PathLike[str],
    max_total_size: int,
    on_file: Callable[[tarfile.TarFile, tarfile.TarInfo, ManifestEntry], str],
    filter_dest: str,
) -> Manifest:
    """Stream the archive once, checking every member.

    `on_file` reads a regular file member and returns its sha256.
    """
    current = ARCHIVE_MEMBER
    try:
        with tarfile.open(path, mode="r|gz") as tar:
            first = tar.next()
            if first is None or first.name != MANIFEST_NAME or not first.isfile():
                got = "nothing" if first is None else repr(first.name)
                raise BundleError(
                    MANIFEST_NAME, Refusal.BAD_MANIFEST, f"must be the first member; found {got}"
                )
            if first.size > MAX_MANIFEST_BYTES:
                raise BundleError(
                    MANIFEST_NAME,
                    Refusal.BAD_MANIFEST,
                    f"{first.size} bytes; at most {MAX_MANIFEST_BYTES}",
                )
            manifest = parse_manifest(tar.extractfile(first).read(), max_total_size)  # type: ignore[union-attr]
            expected = {e.path: e for e in manifest.files}
            seen: set[str] = set()
            total = 0
            while (member := tar.next()) is not None:
                current = member.name
                check_member_path(member.name)
                check_member_kind(member)
                apply_data_filter(member, filter_dest)
                if member.isdir():
                    continue
                entry = expected.get(member.name)
                if entry is None:
                    raise BundleError(member.name, Refusal.NOT_IN_MANIFEST)
                if member.name in seen:
                    raise BundleError(member.name, Refusal.DUPLICATE)
                seen.add(member.name)
                total += member.size
                if total > max_total_size:
                    raise BundleError(
                        member.name, Refusal.TOO_LARGE, f"over {max_total_size} bytes"
                    )
                if member.size != entry.size:
                    raise BundleError(
                        member.name,
                        Refusal.SIZE_MISMATCH,
                        f"{member.size} bytes in the archive; the manifest says {entry.size}",
                    )
                digest = on_file(tar, member, entry)
                if digest != entry.sha256:
                    raise BundleError(
                        member.name,
                        Refusal.CHECKSUM_MISMATCH,
                        f"got {digest}, the manifest says {entry.sha256}",
                    )
                current = ARCHIVE_MEMBER
            missing = sorted(set(expected) - seen)
            if missing:
                more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
                raise BundleError(missing[0], Refusal.MISSING, more.strip(" ()") or "")
            return manifest
    except BundleError:
        raise
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile, OSError) as exc:
        if (
            isinstance(exc, OSError)
            and not isinstance(exc, gzip.BadGzipFile)
            and exc.errno is not None
        ):
            raise  # a real I/O error (disk full, permission), not a bad archive
        raise BundleError(current, Refusal.CORRUPT, f"{type(exc).__name__}: {exc}") from None


def apply_data_filter(member: tarfile.TarInfo, dest: str) -> None:
    """Python's own `data` filter as a second guard; absent before 3.11.4 (older pod images)."""
    data_filter = getattr(tarfile, "data_filter", None)
    if data_filter is None:
        return
    try:
        data_filter(member, dest)
    except tarfile.FilterError as exc:
        raise BundleError(member.name, Refusal.FILTER, str(exc)) from None


def _read_and_hash(
    tar: tarfile.TarFile, member: tarfile.TarInfo, sink: io.BufferedWriter | None
) -> str:
    digest = hashlib.sha256()
    stream = tar.extractfile(member)
    assert stream is not None
    while chunk := stream.read(CHUNK_BYTES):
        digest.update(chunk)
        if sink is not None:
            sink.write(chunk)
    return digest.hexdigest()


def verify_bundle(
    path: str | os.PathLike[str], max_total_size: int = DEFAULT_MAX_TOTAL_SIZE
) -> Manifest:
    """Check a whole bundle without writing anything; BundleError on the first problem."""
    return _iterate_checked(
        path,
        max_total_size,
        lambda tar, member, _: _read_and_hash(tar, member, None),
        "/nonexistent-bundle-root",
    )


def extract_bundle(
    path: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    max_total_size: int = DEFAULT_MAX_TOTAL_SIZE,
) -> Manifest:
    """Verify and extract a bundle into `dest` (creating `dest/code`, `dest/data`).

    Existing `code/` and `data/` in `dest` are replaced. On any refusal nothing
    in `dest` changes.
    """
    dest_dir = Path(dest)
    dest_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".extract-", dir=dest_dir))
    try:
        new_root = staging / "new"
        new_root.mkdir()

        def write_member(
            tar: tarfile.TarFile, member: tarfile.TarInfo, _entry: ManifestEntry
        ) -> str:
            target = new_root / member.name
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "xb") as sink:
                digest = _read_and_hash(tar, member, sink)
            os.chmod(target, 0o755 if member.mode & stat.S_IXUSR else 0o644)
            return digest

        manifest = _iterate_checked(path, max_total_size, write_member, str(new_root))
        for top in TOP_DIRS:
            (new_root / top).mkdir(exist_ok=True)
        _swap_into_place(new_root, staging / "old", dest_dir)
        return manifest
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _swap_into_place(new_root: Path, old_root: Path, dest_dir: Path) -> None:
    """Move new code/ and data/ into dest, the old ones aside; undo on failure."""
    old_root.mkdir()
    moved: list[str] = []
    try:
        for top in TOP_DIRS:
            if (dest_dir / top).exists() or (dest_dir / top).is_symlink():
                os.rename(dest_dir / top, old_root / top)
            os.rename(new_root / top, dest_dir / top)
            moved.append(top)
    except OSError:
        for top in moved:
            os.rename(dest_dir / top, new_root / top)
        for top in TOP_DIRS:
            if (old_root / top).exists() and not (dest_dir / top).exists():
                os.rename(old_root / top, dest_dir / top)
        raise


def iter_manifest_paths(manifest: Manifest) -> Iterator[str]:
    return (entry.path for entry in manifest.files)
