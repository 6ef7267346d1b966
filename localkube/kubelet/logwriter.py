"""The container log writer of the shim: CRI-format lines, rotated by size as a kubelet does.

Each output line becomes `<RFC3339Nano> <stdout|stderr> <F|P> <text>`; a line longer than
PARTIAL_LINE_LIMIT is cut into P lines closed by an F line. The current file
(`<restart>.log`) never grows past `max_bytes` by more than one such line: before a write
would pass it, the file is renamed `<restart>.log.<UTC time>` and a new one is started, and
only the newest `max_files - 1` rotated files are kept (containerLogMaxSize and
containerLogMaxFiles of a kubelet; rotated files are not compressed here). Rotating is a
rename and an unlink in the writing loop itself: nothing waits for a sweeper, so a container
writing faster than any sweep cannot outgrow the cap.

The writer never stops relaying: a write that fails (a full disk) drops those lines, so the
container's pipe keeps draining and its program is never blocked by the log.

Imported by the shim (`python -I -S`): the standard library's cheapest modules only.
"""

import os
import time

PARTIAL_LINE_LIMIT = 16384
ROTATED_SUFFIX_FORMAT = "%Y%m%d-%H%M%S"


def format_timestamp(ns: int) -> str:
    secs, frac = divmod(ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{frac:09d}Z"


def rotated_name(path: str, ns: int) -> str:
    """`<path>.<YYYYmmdd-HHMMSS>.<nanoseconds>`: sorts by time, unique per rotation."""
    secs, frac = divmod(ns, 1_000_000_000)
    return f"{path}.{time.strftime(ROTATED_SUFFIX_FORMAT, time.gmtime(secs))}.{frac:09d}"


def list_rotated(path: str) -> list[str]:
    """The rotated files of the log file `path`, oldest first."""
    directory, base = os.path.split(path)
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    prefix = base + "."
    return sorted(
        os.path.join(directory, n)
        for n in names
        if n.startswith(prefix) and n[len(prefix) : len(prefix) + 1].isdigit()
    )


def remove_log_files(path: str) -> None:
    """The log file `path` and its rotated files (before a run writes `path` afresh)."""
    for name in [path, path + ".new", *list_rotated(path)]:
        try:
            os.unlink(name)
        except FileNotFoundError:
            pass


def remove_earlier_runs(path: str, restart: int) -> None:
    """The log files of runs before `restart - 1` in `path`'s directory: a container keeps its
    current run's log and the previous one's (`pods/log?previous=true`), as a kubelet keeps
    one dead container per container, so a crash loop does not pile up logs."""
    directory = os.path.dirname(path)
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        number = name.split(".", 1)[0]
        if number.isdigit() and int(number) < restart - 1 and name.startswith(number + ".log"):
            try:
                os.unlink(os.path.join(directory, name))
            except FileNotFoundError:
                pass


class LogWriter:
    """Writes one container run's output as CRI lines into `path`, rotating it by size.

    `max_bytes` 0 turns rotation off; `max_files` counts the current file too (at least 2)."""

    def __init__(self, path: str, max_bytes: int = 0, max_files: int = 2) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.max_files = max(max_files, 2)
        self.file = open(path, "ab", buffering=0)
        self.size = self.file.tell()
        self.pending: dict[str, bytes] = {"stdout": b"", "stderr": b""}
        self.dropped_bytes = 0

    def feed(self, stream: str, data: bytes) -> None:
        stamp = format_timestamp(time.time_ns()).encode()
        full = b"%s %s F " % (stamp, stream.encode())
        part = b"%s %s P " % (stamp, stream.encode())
        pieces = (self.pending[stream] + data).split(b"\n")
        rest = pieces.pop()
        out = []
        if pieces and max(map(len, pieces)) <= PARTIAL_LINE_LIMIT:
            out.append(full + (b"\n" + full).join(pieces) + b"\n")  # one join: `yes` is cheap
        else:
            for line in pieces:
                start = 0
                while len(line) - start > PARTIAL_LINE_LIMIT:
                    out.append(part + line[start : start + PARTIAL_LINE_LIMIT] + b"\n")
                    start += PARTIAL_LINE_LIMIT
                out.append(full + line[start:] + b"\n")
        start = 0
        while len(rest) - start >= PARTIAL_LINE_LIMIT:
            out.append(part + rest[start : start + PARTIAL_LINE_LIMIT] + b"\n")
            start += PARTIAL_LINE_LIMIT
        self.pending[stream] = rest[start:]
        if out:
            self.write_lines(b"".join(out))

    def flush_stream(self, stream: str) -> None:
        buf = self.pending[stream]
        if buf:
            stamp = format_timestamp(time.time_ns()).encode()
            self.write_lines(b"%s %s F %s\n" % (stamp, stream.encode(), buf))
            self.pending[stream] = b""

    def write_lines(self, data: bytes) -> None:
        """Append whole lines, rotating first whenever the next one would pass max_bytes."""
        while data:
            room = self.max_bytes - self.size if self.max_bytes else len(data)
            if len(data) <= room:
                self.append(data)
                return
            cut = data.rfind(b"\n", 0, max(room, 0)) + 1  # the lines that still fit
            if cut == 0 and self.size == 0:
                cut = data.find(b"\n") + 1 or len(data)  # one line longer than the cap
            if cut:
                self.append(data[:cut])
                data = data[cut:]
            self.rotate()

    def append(self, data: bytes) -> None:
        try:
            self.file.write(data)
            self.size += len(data)
        except OSError:
            self.dropped_bytes += len(data)  # a full disk: keep relaying, lose these lines

    def rotate(self) -> None:
        """Keep the full file under its rotated name and put an empty one at `path` in one
        rename: a reader opening `path` always finds a file."""
        fresh = self.path + ".new"
        try:
            os.link(self.path, rotated_name(self.path, time.time_ns()))
            new = open(fresh, "wb", buffering=0)
            os.replace(fresh, self.path)
            for old in list_rotated(self.path)[: -(self.max_files - 1)]:
                os.unlink(old)
        except OSError:
            self.file.truncate(0)  # cannot rotate: start the file over rather than outgrow it
            self.size = 0
            return
        self.file.close()
        self.file, self.size = new, 0
