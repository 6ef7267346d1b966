"""The bundle format and the one bundle safety check: the public surface.

A bundle is `<name>.tar.gz` whose first member is `MANIFEST.json`, followed by
regular files under `code/` and `data/`. The manifest lists every file with
its size and sha256, so a reader can check the archive in one streaming pass.

Bundles cross a trust boundary twice (laptop -> S3 -> every pod), so reading
one is done in one place only: tshell, Airflow and the pod's init container
all call `verify_bundle` / `extract_bundle`, which share one streaming check.
It refuses, naming the member and the reason: absolute paths, `..`, paths
outside `code/`/`data/`, a path that is both a file and a directory, every
link (symbolic or hard, wherever it points: `write_bundle` stores link targets
as plain files, so a well-formed bundle never has one), device files, fifos
and sparse files, a total size over the caller's limit, members that are not
in the manifest or do not match its size/sha256, manifest files that are
missing, pax or GNU extended headers over 64 KiB, data after the end of the
archive, and corrupt or truncated archives. Python's tarfile `data`
extraction filter runs on every member as a second, independent guard.
Memory stays bounded whatever the archive holds.

Extraction writes into a temporary directory inside the destination (the
destination may be a mount point, e.g. a pod's emptyDir, which cannot be
renamed) and moves `code/` and `data/` into place only after the whole
archive verified, so a refused bundle leaves nothing half-extracted.

The module is split along its seams: `bundleformat.py` (manifest, path rules,
refusals), `bundleread.py` (the streaming check, verify and extract) and this
file (writing, and the names everyone imports). Standard library only: the
runtime package is shipped to pods.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import stat
import tarfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from runtime.bundleformat import (
    ARCHIVE_MEMBER,
    CHUNK_BYTES,
    DEFAULT_MAX_COMPRESSED_SIZE,
    DEFAULT_MAX_TOTAL_SIZE,
    FORMAT_VERSION,
    MANIFEST_NAME,
    MAX_MANIFEST_BYTES,
    TOP_DIRS,
    BundleError,
    Manifest,
    ManifestEntry,
    Refusal,
    check_file_dir_conflicts,
    check_member_path,
    parse_manifest,
)
from runtime.bundleread import (
    MAX_EXTENDED_HEADER_BYTES,
    apply_data_filter,
    check_member_kind,
    extract_bundle,
    verify_bundle,
)

__all__ = [
    "ARCHIVE_MEMBER",
    "CHUNK_BYTES",
    "DEFAULT_COMPRESSLEVEL",
    "DEFAULT_MAX_COMPRESSED_SIZE",
    "DEFAULT_MAX_TOTAL_SIZE",
    "FORMAT_VERSION",
    "LARGE_FILE_BYTES",
    "MANIFEST_NAME",
    "MAX_EXTENDED_HEADER_BYTES",
    "MAX_MANIFEST_BYTES",
    "TOP_DIRS",
    "BundleError",
    "BundleInfo",
    "Manifest",
    "ManifestEntry",
    "ProgressCallback",
    "Refusal",
    "apply_data_filter",
    "check_file_dir_conflicts",
    "check_member_kind",
    "check_member_path",
    "collect_source_files",
    "extract_bundle",
    "hash_file",
    "iter_manifest_paths",
    "parse_manifest",
    "verify_bundle",
    "write_bundle",
]

EXCLUDED_DIR_NAMES = frozenset({".git", "__pycache__"})
EXCLUDED_SUFFIXES = (".pyc",)
LARGE_FILE_BYTES = 100 * 1000 * 1000
DEFAULT_COMPRESSLEVEL = 1  # bundles are mostly data: level 1 is ~3x faster than 6 for a few % size

ProgressCallback = Callable[[int, int], None]
"""Called as progress(done_bytes, total_bytes) while reading or writing."""


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
                    if len(body) > MAX_MANIFEST_BYTES:
                        raise BundleError(
                            MANIFEST_NAME,
                            Refusal.BAD_SOURCE,
                            f"{len(body)} bytes for {len(entries)} files; at most "
                            f"{MAX_MANIFEST_BYTES} (about 60,000 files): pack many small files "
                            "into fewer (TFRecord or tar shards)",
                        )
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


def iter_manifest_paths(manifest: Manifest) -> Iterator[str]:
    return (entry.path for entry in manifest.files)
