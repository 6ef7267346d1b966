"""Reading a bundle: the one streaming pass behind `verify_bundle` and `extract_bundle`.

Both functions run the same pass (`_iterate_checked`) and differ only in what
they do with a file's bytes (hash them, or hash and write them), so a bundle
that verifies also extracts, and the refusal is the same in both.

Memory stays bounded whatever the input (the archive comes from a user):

- Decompression is our own (`_GzipMemberReader`): at most CHUNK_BYTES of
  output at a time, the gzip CRC and length checked, and whatever follows the
  one gzip member seen (and refused) instead of ignored.
- tarfile reads the whole payload of a pax or GNU long-name header into memory
  before returning the member (Python 3.11: a 261 KB .tar.gz with a 256 MiB pax
  comment grew a reader by ~770 MiB). `_BoundedTarInfo` checks the size in the
  header block first and refuses payloads over MAX_EXTENDED_HEADER_BYTES, long
  chains of extended headers (tarfile recurses once per header), a growing set
  of global headers and GNU sparse maps (also read unbounded).
- Members are not kept: tarfile's stream mode appends every TarInfo to
  `members`, which we empty after each one.

Standard library only: shipped to pods.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tarfile
import tempfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from runtime.bundleformat import (
    ARCHIVE_MEMBER,
    CHUNK_BYTES,
    DEFAULT_MAX_TOTAL_SIZE,
    MANIFEST_NAME,
    MAX_MANIFEST_BYTES,
    TOP_DIRS,
    BundleError,
    Manifest,
    ManifestEntry,
    Refusal,
    check_directory_member,
    check_member_path,
    parse_manifest,
)

# write_bundle writes at most one pax header per member; 64 KiB is ~100 long paths.
MAX_EXTENDED_HEADER_BYTES = 64 * 1024
MAX_EXTENDED_HEADER_CHAIN = 8
# tar pads the end to its record size (10 KiB for GNU tar and Python's tarfile).
MAX_END_PADDING_BYTES = 1024 * 1024

FileHandler = Callable[[tarfile.TarFile, tarfile.TarInfo, ManifestEntry], str]
"""Reads a regular file member (and may write it somewhere); returns its sha256."""


class _GzipMemberReader:
    """The decompressed bytes of exactly one gzip member, a bounded piece at a time."""

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)  # gzip wrapper: CRC checked
        self._buffer = b""
        self._offset = 0

    def read(self, size: int = -1) -> bytes:
        if self._offset >= len(self._buffer):
            self._buffer = self._inflate_more()
            self._offset = 0
        end = len(self._buffer) if size < 0 else self._offset + size
        data = self._buffer[self._offset : end]
        self._offset += len(data)
        return data

    def _inflate_more(self) -> bytes:
        while not self._inflate.eof:
            compressed = self._inflate.unconsumed_tail or self._raw.read(CHUNK_BYTES)
            data = self._inflate.decompress(compressed, CHUNK_BYTES)
            if data:
                return data
            if not compressed and not self._inflate.eof:
                raise EOFError("the compressed data ends before the gzip trailer")
        return b""

    def has_trailing_bytes(self) -> bool:
        """Whether anything follows the gzip member (call once the member is read)."""
        return bool(self._inflate.unused_data) or bool(self._raw.read(1))


class _BundleTarFile(tarfile.TarFile):
    """tarfile in stream mode with the state `_BoundedTarInfo` keeps per archive."""

    extended_depth = 0
    global_header_bytes = 0
    end_reason: type[tarfile.HeaderError] | None = None


class _BoundedTarInfo(tarfile.TarInfo):
    """Checks an extended header's size before tarfile reads its payload (see module doc)."""

    @classmethod
    def fromtarfile(cls, archive: _BundleTarFile) -> tarfile.TarInfo:  # type: ignore[override]
        try:
            return super().fromtarfile(archive)
        except tarfile.HeaderError as exc:  # how the archive ended: a zero block, nothing, junk
            archive.end_reason = type(exc)
            raise

    def _proc_gnulong(self, archive: _BundleTarFile) -> tarfile.TarInfo:  # type: ignore[override]
        return self._bounded(archive, "GNU long-name header", super()._proc_gnulong)

    def _proc_pax(self, archive: _BundleTarFile) -> tarfile.TarInfo:  # type: ignore[override]
        if self.type == tarfile.XGLTYPE:
            archive.global_header_bytes += max(self.size, 0)
            if archive.global_header_bytes > MAX_EXTENDED_HEADER_BYTES:
                raise BundleError(
                    ARCHIVE_MEMBER,
                    Refusal.EXTENDED_HEADER,
                    f"global pax headers add up to over {MAX_EXTENDED_HEADER_BYTES} bytes",
                )
        return self._bounded(archive, "pax header", super()._proc_pax)

    def _bounded(
        self,
        archive: _BundleTarFile,
        kind: str,
        proceed: Callable[[_BundleTarFile], tarfile.TarInfo],
    ) -> tarfile.TarInfo:
        if not 0 <= self.size <= MAX_EXTENDED_HEADER_BYTES:
            raise BundleError(
                ARCHIVE_MEMBER,
                Refusal.EXTENDED_HEADER,
                f"{kind} {self.name!r} of {self.size} bytes; at most {MAX_EXTENDED_HEADER_BYTES}",
            )
        if archive.extended_depth >= MAX_EXTENDED_HEADER_CHAIN:
            raise BundleError(
                ARCHIVE_MEMBER,
                Refusal.EXTENDED_HEADER,
                f"more than {MAX_EXTENDED_HEADER_CHAIN} extended headers in a row",
            )
        archive.extended_depth += 1
        try:
            return proceed(archive)
        finally:
            archive.extended_depth -= 1

    def _proc_sparse(self, archive: _BundleTarFile) -> tarfile.TarInfo:  # type: ignore[override]
        raise BundleError(self.name, Refusal.SPECIAL_FILE, "GNU sparse file")

    def _refuse_pax_sparse(self, next_member: tarfile.TarInfo, *_: object) -> None:
        raise BundleError(next_member.name, Refusal.SPECIAL_FILE, "GNU sparse file")

    _proc_gnusparse_00 = _proc_gnusparse_01 = _proc_gnusparse_10 = _refuse_pax_sparse


def check_member_kind(member: tarfile.TarInfo) -> None:
    if member.issym() or member.islnk():
        raise BundleError(member.name, Refusal.LINK, f"points to {member.linkname!r}")
    if not (member.isfile() or member.isdir()):
        raise BundleError(member.name, Refusal.SPECIAL_FILE)


def apply_data_filter(member: tarfile.TarInfo, dest: str) -> None:
    """Python's own `data` filter as a second guard; absent before 3.11.4 (older pod images)."""
    data_filter = getattr(tarfile, "data_filter", None)
    if data_filter is None:
        return
    try:
        data_filter(member, dest)
    except tarfile.FilterError as exc:
        raise BundleError(member.name, Refusal.FILTER, str(exc)) from None


def _read_manifest(tar: tarfile.TarFile, max_total_size: int) -> Manifest:
    first = tar.next()
    if first is None or first.name != MANIFEST_NAME or not first.isfile():
        got = "nothing" if first is None else repr(first.name)
        raise BundleError(
            MANIFEST_NAME, Refusal.BAD_MANIFEST, f"must be the first member; found {got}"
        )
    if first.size > MAX_MANIFEST_BYTES:
        raise BundleError(
            MANIFEST_NAME, Refusal.BAD_MANIFEST, f"{first.size} bytes; at most {MAX_MANIFEST_BYTES}"
        )
    body = tar.extractfile(first).read()  # type: ignore[union-attr]
    return parse_manifest(body, max_total_size)


def _check_archive_end(tar: _BundleTarFile, reader: _GzipMemberReader) -> None:
    """After the last member: only zero padding, then the end of the one gzip member."""
    if tar.end_reason not in (tarfile.EOFHeaderError, tarfile.EmptyHeaderError):
        raise BundleError(
            ARCHIVE_MEMBER, Refusal.CORRUPT, "a block after the last member is not a tar header"
        )
    padding = 0
    while chunk := tar.fileobj.read(CHUNK_BYTES):  # type: ignore[union-attr]
        if chunk.count(0) != len(chunk):
            raise BundleError(
                ARCHIVE_MEMBER,
                Refusal.TRAILING_DATA,
                "non-zero bytes after the end-of-archive block",
            )
        padding += len(chunk)
        if padding > MAX_END_PADDING_BYTES:
            raise BundleError(
                ARCHIVE_MEMBER,
                Refusal.TRAILING_DATA,
                f"over {MAX_END_PADDING_BYTES} bytes of padding after the end-of-archive block",
            )
    if reader.has_trailing_bytes():
        raise BundleError(
            ARCHIVE_MEMBER,
            Refusal.TRAILING_DATA,
            "bytes after the end of the gzip stream (a second gzip member?)",
        )


def _iterate_checked(
    path: str | os.PathLike[str], max_total_size: int, on_file: FileHandler, filter_dest: str
) -> Manifest:
    """Stream the archive once, checking every member; `on_file` reads each regular file."""
    current = ARCHIVE_MEMBER
    try:
        with open(path, "rb") as raw:
            reader = _GzipMemberReader(raw)
            with _BundleTarFile.open(fileobj=reader, mode="r|", tarinfo=_BoundedTarInfo) as tar:
                manifest = _read_manifest(tar, max_total_size)
                expected = {e.path: e for e in manifest.files}
                seen: set[str] = set()
                total = 0
                while (member := tar.next()) is not None:
                    tar.members.clear()  # stream mode keeps every TarInfo otherwise
                    current = member.name
                    _check_member(member, expected, seen, filter_dest)
                    if member.isdir():
                        current = ARCHIVE_MEMBER
                        continue
                    entry = expected[member.name]
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
                _check_archive_end(tar, reader)  # type: ignore[arg-type]
        missing = sorted(set(expected) - seen)
        if missing:
            more = f"and {len(missing) - 1} more" if len(missing) > 1 else ""
            raise BundleError(missing[0], Refusal.MISSING, more)
        return manifest
    except BundleError:
        raise
    # ValueError, OverflowError: tarfile lets a few escape on malformed pax records.
    except (tarfile.TarError, EOFError, zlib.error, ValueError, OverflowError) as exc:
        raise BundleError(current, Refusal.CORRUPT, f"{type(exc).__name__}: {exc}") from None


def _check_member(
    member: tarfile.TarInfo, expected: dict[str, ManifestEntry], seen: set[str], filter_dest: str
) -> None:
    check_member_path(member.name)
    check_member_kind(member)
    apply_data_filter(member, filter_dest)
    if member.isdir():
        check_directory_member(member.name, expected)
        return
    if member.name not in expected:
        raise BundleError(member.name, Refusal.NOT_IN_MANIFEST)
    if member.name in seen:
        raise BundleError(member.name, Refusal.DUPLICATE)
    seen.add(member.name)


def _read_and_hash(tar: tarfile.TarFile, member: tarfile.TarInfo, sink: BinaryIO | None) -> str:
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
    """Check a whole bundle without writing anything; BundleError on the first problem.

    An OSError reading `path` itself (absent, unreadable) is raised as it is.
    """
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
    in `dest` changes. Every OSError (disk full, permissions, reading the
    archive) is a BundleError too, so the pod's init container always reports
    a refusal rather than a traceback.
    """
    dest_dir = Path(dest)
    staging: Path | None = None
    try:
        dest_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".extract-", dir=dest_dir))
        new_root = staging / "new"
        new_root.mkdir()

        def write_member(tar: tarfile.TarFile, member: tarfile.TarInfo, _: ManifestEntry) -> str:
            target = new_root / member.name
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                with open(target, "xb") as sink:
                    digest = _read_and_hash(tar, member, sink)
                os.chmod(target, 0o755 if member.mode & stat.S_IXUSR else 0o644)
            except OSError as exc:
                raise BundleError(member.name, Refusal.EXTRACT_FAILED, _describe(exc)) from None
            return digest

        manifest = _iterate_checked(path, max_total_size, write_member, str(new_root))
        for top in TOP_DIRS:
            (new_root / top).mkdir(exist_ok=True)
        _swap_into_place(new_root, staging / "old", dest_dir)
        return manifest
    except OSError as exc:
        raise BundleError(ARCHIVE_MEMBER, Refusal.EXTRACT_FAILED, _describe(exc)) from None
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)


def _describe(exc: OSError) -> str:
    where = f": {exc.filename}" if exc.filename else ""
    return f"{type(exc).__name__}: {exc.strerror or exc}{where}"


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
