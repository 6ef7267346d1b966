"""A container's root filesystem as an image would hold it, built by the shim before chroot.

Why: there is no container engine, so an "image" is a view of the host that the shim
mounts, and a pod must see no more of the host than an image would hold. The root is a
tmpfs (the container's writable layer) holding only:

- read only (also nosuid, nodev): /usr and the merged-usr links (/bin, /sbin, /lib, /lib64),
  an allow-list of /etc (`ETC_ENTRIES`: name resolution, the dynamic linker, TLS
  certificates, users and groups, alternatives, time zone), a fresh sysfs, and the image's
  installation directories (the venv and the interpreter it comes from, images.py) at their
  own paths, below parent directories made here that can be passed through but not listed
  (0711), so nothing else of the checkout or of the host's home is there;
- private to the container (tmpfs, size = the container's memory limit, else
  `DEFAULT_SCRATCH_BYTES`): /tmp and /var/tmp (1777), /dev/shm (1777, noexec), /run (0755);
  their pages are charged to the container's memory cgroup, as an emptyDir of medium Memory;
- a minimal /dev (tmpfs, nosuid, noexec): the host's null, zero, full, random, urandom and tty
  bound one by one, fd/stdin/stdout/stderr links into /proc/self/fd, a new devpts instance at
  /dev/pts with /dev/ptmx linking to its ptmx, and /dev/shm;
- a fresh /proc, the pod's /etc/hosts and /etc/hostname, and the pod's volumes.

Everything is mounted in the container's own mount namespace, so it all goes with the
container's last process: nothing is left on the host to clean up. Standard library only
(the shim imports it).
"""

import ctypes
import os

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
READ_ONLY = MS_RDONLY | MS_NOSUID | MS_NODEV

DEFAULT_SCRATCH_BYTES = 64 * 2**20  # a container without a memory limit: Docker's /dev/shm size
ROOT_MODE = "mode=755"
DEV_SIZE = "size=64k"  # device nodes and links only
PASS_THROUGH_MODE = 0o711  # parents of the installation: searchable, not listable
SYSTEM_DIRS = ("usr",)
# Links into /usr on a merged-usr host; where one is a directory it is bound read-only.
SYSTEM_TOP_LEVEL = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
ETC_ENTRIES = (
    "alternatives",
    "bash.bashrc",
    "ca-certificates.conf",
    "debian_version",
    "environment",
    "ethertypes",
    "fonts",
    "gai.conf",
    "group",
    "host.conf",
    "inputrc",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "locale.alias",
    "localtime",
    "mime.types",
    "mtab",
    "networks",
    "nsswitch.conf",
    "os-release",
    "passwd",
    "profile",
    "protocols",
    "resolv.conf",
    "rpc",
    "services",
    "shells",
    "ssl/certs",
    "ssl/openssl.cnf",
    "terminfo",
    "timezone",
)
EMPTY_DIRS = ("home", "media", "mnt", "opt", "srv")
DEVICE_NODES = ("null", "zero", "full", "random", "urandom", "tty")
DEV_LINKS = {
    "fd": "/proc/self/fd",
    "stdin": "/proc/self/fd/0",
    "stdout": "/proc/self/fd/1",
    "stderr": "/proc/self/fd/2",
}
TTY_GID = 5  # Debian's `tty` group, which owns pseudo-terminals
DEVPTS_OPTIONS = f"newinstance,ptmxmode=0666,mode=0620,gid={TTY_GID}"
VAR_LINKS = {"run": "/run", "lock": "/run/lock"}

libc = ctypes.CDLL(None, use_errno=True)


def mount(
    source: str, target: str, fstype: str | None, flags: int, data: str | None = None
) -> None:
    rc = libc.mount(
        source.encode() if source else None,
        target.encode(),
        fstype.encode() if fstype else None,
        ctypes.c_ulong(flags),
        data.encode() if data else None,
    )
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


def bind_read_only(source: str, target: str) -> None:
    """One host file or directory, not what is mounted below it, read-only."""
    mount(source, target, None, MS_BIND)
    mount(source, target, None, MS_BIND | MS_REMOUNT | READ_ONLY)


def bind_file_or_dir(source: str, target: str, read_only: bool) -> None:
    mount(source, target, None, MS_BIND | MS_REC)
    if read_only:
        mount(source, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_REC)


def mount_scratch(target: str, size: int, mode: str, flags: int = 0) -> None:
    mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV | flags, f"mode={mode},size={size}")


def is_under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


class RootBuilder:
    """Builds a container root without ever creating anything on the host's root.

    Directories are created freely on the root tmpfs and its private mounts and in the
    pod's volumes; a host directory that needs a new entry (a mountPath below /usr) is first
    covered by an overlay whose upper layer lives in the pod's scratch area.
    """

    def __init__(self, newroot: str, scratch: str) -> None:
        self.newroot = newroot
        self.scratch = scratch
        self.private_mounts = {newroot}
        self.host_mounts: set[str] = set()

    def inside(self, path: str) -> str:
        return os.path.join(self.newroot, path.lstrip("/"))

    def is_private(self, path: str) -> bool:
        while True:
            if path in self.private_mounts:
                return True
            if path in self.host_mounts or path == "/":
                return False
            path = os.path.dirname(path)

    def make_entry(self, parent: str, name: str, is_dir: bool) -> str:
        target = os.path.join(parent, name)
        if os.path.lexists(target):
            return target
        if not self.is_private(parent):
            self.cover_with_overlay(parent)
            if os.path.lexists(target):
                return target
        if is_dir:
            os.mkdir(target)
        else:
            open(target, "w").close()
        return target

    def ensure_dir(self, path: str) -> str:
        current = self.newroot
        for part in [p for p in path.split("/") if p]:
            current = self.make_entry(current, part, True)
        return current

    def cover_with_overlay(self, directory: str) -> None:
        key = os.path.relpath(directory, self.newroot).replace("/", "_")
        upper = os.path.join(self.scratch, "upper", key)
        work = os.path.join(self.scratch, "work", key)
        os.makedirs(upper, exist_ok=True)
        os.makedirs(work, exist_ok=True)
        opts = f"lowerdir={directory},upperdir={upper},workdir={work}"
        mount("overlay", directory, "overlay", 0, opts)
        self.private_mounts.add(directory)

    def add_host_entry(self, host_path: str) -> None:
        """A host file, directory or link at the same path, read-only; skipped when missing."""
        if not os.path.lexists(host_path):
            return
        parent = self.ensure_dir(os.path.dirname(host_path))
        target = os.path.join(parent, os.path.basename(host_path))
        if os.path.islink(host_path):
            os.symlink(os.readlink(host_path), target)
            return
        if os.path.isdir(host_path):
            os.mkdir(target)
        elif os.path.isfile(host_path):
            open(target, "w").close()
        else:
            return
        bind_read_only(host_path, target)
        self.host_mounts.add(target)

    def add_system(self) -> None:
        for name in (*SYSTEM_DIRS, *SYSTEM_TOP_LEVEL):
            self.add_host_entry("/" + name)
        for name in ETC_ENTRIES:
            self.add_host_entry("/etc/" + name)
        for name in EMPTY_DIRS:
            os.mkdir(self.inside(name))
        os.mkdir(self.inside("root"), 0o700)
        sys_dir = self.ensure_dir("/sys")
        mount("sysfs", sys_dir, "sysfs", READ_ONLY | MS_NOEXEC)
        self.host_mounts.add(sys_dir)

    def add_scratch(self, size: int) -> None:
        """/tmp, /var/tmp and /run: tmpfs of the container's own, charged to its memory."""
        for path, mode in (("/tmp", "1777"), ("/var/tmp", "1777"), ("/run", "755")):
            target = self.ensure_dir(path)
            mount_scratch(target, size, mode, MS_NOEXEC if path == "/run" else 0)
            self.private_mounts.add(target)
        os.mkdir(self.inside("/run/lock"))
        os.chmod(self.inside("/run/lock"), 0o1777)
        for name, link in VAR_LINKS.items():
            os.symlink(link, self.inside("/var/" + name))

    def add_dev(self, size: int) -> None:
        """The minimal /dev of a container (what runc gives one), with its own /dev/shm."""
        dev = self.ensure_dir("/dev")
        mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, f"{ROOT_MODE},{DEV_SIZE}")
        self.private_mounts.add(dev)
        for name in DEVICE_NODES:
            if not os.path.exists("/dev/" + name):
                continue
            target = os.path.join(dev, name)
            open(target, "w").close()
            mount("/dev/" + name, target, None, MS_BIND)
            mount("/dev/" + name, target, None, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NOEXEC)
        for name, link in DEV_LINKS.items():
            os.symlink(link, os.path.join(dev, name))
        pts = os.path.join(dev, "pts")
        os.mkdir(pts)
        mount("devpts", pts, "devpts", MS_NOSUID | MS_NOEXEC, DEVPTS_OPTIONS)
        os.symlink("pts/ptmx", os.path.join(dev, "ptmx"))
        shm = os.path.join(dev, "shm")
        os.mkdir(shm)
        mount_scratch(shm, size, "1777", MS_NOEXEC)
        self.private_mounts.add(shm)

    def add_installation(self, host_dir: str) -> None:
        """An image's installation directory (the venv, its interpreter) at its own path."""
        if any(is_under(host_dir, "/" + name) for name in SYSTEM_DIRS):
            return  # already there
        seen = self.inside(host_dir)
        if os.path.isdir(seen) and os.path.samefile(seen, host_dir):
            return  # inside another installation directory
        current = self.newroot
        for part in [p for p in os.path.dirname(host_dir).split("/") if p]:
            current = os.path.join(current, part)
            if not os.path.lexists(current):
                os.mkdir(current, PASS_THROUGH_MODE)
                os.chmod(current, PASS_THROUGH_MODE)
            elif self.is_private(current) and not os.path.islink(current):
                os.chmod(current, os.stat(current).st_mode & 0o7777 | 0o111)
        target = self.make_entry(current, os.path.basename(host_dir), True)
        bind_read_only(host_dir, target)
        self.host_mounts.add(target)

    def bind_volume(self, source: str, target_path: str, read_only: bool) -> None:
        if os.path.isdir(source):
            target = self.ensure_dir(target_path)
        else:
            parent = self.ensure_dir(os.path.dirname(target_path))
            target = self.make_entry(parent, os.path.basename(target_path), False)
        bind_file_or_dir(source, target, read_only)
        self.private_mounts.add(target)


def build_root(spec: dict) -> None:
    """Mount the container's root at spec["root"] (in the container's mount namespace)."""
    newroot = spec["root"]
    size = int(spec.get("scratch_bytes") or DEFAULT_SCRATCH_BYTES)
    os.umask(0o022)  # what the skeleton directories on the root tmpfs get: 0755
    mount("none", "/", None, MS_REC | MS_PRIVATE)
    mount("tmpfs", newroot, "tmpfs", MS_NOSUID | MS_NODEV, f"{ROOT_MODE},size={size}")
    builder = RootBuilder(newroot, spec["scratch_dir"])
    builder.add_system()
    builder.add_scratch(size)
    builder.add_dev(size)
    for host_dir in sorted(spec.get("host_dirs") or (), key=len):
        builder.add_installation(host_dir)
    for m in spec["mounts"]:
        builder.bind_volume(m["source"], m["target"], bool(m.get("readOnly")))
    proc = builder.ensure_dir("/proc")
    mount("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    builder.ensure_dir(spec.get("workingDir") or "/")
