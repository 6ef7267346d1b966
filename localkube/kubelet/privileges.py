"""Dropping a container process's privileges right before it execs: user, groups,
capabilities, no_new_privs and seccomp.

Why a module of its own: the same steps must run in two processes, the shim's child (pid 1 of
the container) and the process a `pods/exec` session or a lifecycle hook enters the container
with (enter.py), so that both run as the container's user. They run after everything that
needs root (setns, mounts, chroot) and just before execve. Standard library only: both
processes run as `python -I -S`.

The profile is a plain dict built by the kubelet (securitycontext.build_security_profile):
`uid`, `gid`, `groups` (supplementary gids), `capabilities` (capability numbers the bounding
set keeps), `noNewPrivs`, `seccomp` ("RuntimeDefault" or None).

What the process ends up with follows the kernel's execve rules, as under runc: the bounding
set is cut to `capabilities`, the inheritable and ambient sets are emptied and keepcaps stays
off; for uid 0 the permitted and effective sets after execve equal the bounding set, for any
other uid they are empty (setuid away from 0 clears them). So `drop: [ALL]` gives CapEff,
CapPrm and CapBnd 0 even to root, and `add` puts capabilities back (usable by root; only in
the bounding set for a non-root uid, as with containerd, which sets no ambient capabilities).
"""

import ctypes
import os

from localkube.kubelet.seccomp import build_runtime_default_filter

PR_SET_PDEATHSIG = 1
PR_SET_KEEPCAPS = 8
PR_SET_SECCOMP = 22
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SECCOMP_MODE_FILTER = 2
LINUX_CAPABILITY_VERSION_3 = 0x20080522
CAP_LAST_CAP_FILE = "/proc/sys/kernel/cap_last_cap"
DEFAULT_UMASK = 0o022  # what containerd gives a container's process

libc = ctypes.CDLL(None, use_errno=True)


class CapabilityHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class CapabilityData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def check_call(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def call_prctl(option: int, arg2: int = 0, arg3: int = 0, what: str = "prctl") -> None:
    rc = libc.prctl(
        ctypes.c_int(option),
        ctypes.c_ulong(arg2),
        ctypes.c_ulong(arg3),
        ctypes.c_ulong(0),
        ctypes.c_ulong(0),
    )
    check_call(rc, what)


def read_last_capability() -> int:
    try:
        with open(CAP_LAST_CAP_FILE) as f:
            return int(f.read())
    except (OSError, ValueError):
        return 40  # CAP_CHECKPOINT_RESTORE, the last one of Linux 5.9+


def read_permitted_mask() -> int:
    header = CapabilityHeader(LINUX_CAPABILITY_VERSION_3, 0)
    data = (CapabilityData * 2)()
    check_call(libc.capget(ctypes.byref(header), data), "capget")
    return data[0].permitted | (data[1].permitted << 32)


def set_capability_sets(effective: int, permitted: int, inheritable: int) -> None:
    header = CapabilityHeader(LINUX_CAPABILITY_VERSION_3, 0)
    data = (CapabilityData * 2)()
    for word in range(2):
        shift = 32 * word
        data[word].effective = (effective >> shift) & 0xFFFFFFFF
        data[word].permitted = (permitted >> shift) & 0xFFFFFFFF
        data[word].inheritable = (inheritable >> shift) & 0xFFFFFFFF
    check_call(libc.capset(ctypes.byref(header), data), "capset")


def install_seccomp_filter(program: bytes) -> None:
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = SockFprog(len(program) // 8, ctypes.addressof(buffer))
    call_prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), "seccomp filter")


def apply_privileges(profile: dict) -> None:
    """Become the profile's user with its capabilities, no_new_privs and seccomp filter.

    Must be called as root with full capabilities, in a single-threaded process, right before
    execve; raises OSError naming the step that failed."""
    if profile.get("seccomp"):
        program = build_runtime_default_filter()
        if program is not None:
            # installed while CAP_SYS_ADMIN is still held, so it also works without
            # no_new_privs (as runc does); the syscalls below are not filtered
            install_seccomp_filter(program)
    keep = set(profile.get("capabilities") or ())
    for cap in range(read_last_capability() + 1):
        if cap not in keep:
            call_prctl(PR_CAPBSET_DROP, cap, what=f"dropping capability {cap}")
    uid, gid = int(profile.get("uid") or 0), int(profile.get("gid") or 0)
    os.setgroups([int(g) for g in profile.get("groups") or [gid]])
    os.setgid(gid)
    call_prctl(PR_SET_KEEPCAPS, 0, what="clearing keepcaps")
    os.setuid(uid)
    keep_mask = sum(1 << cap for cap in keep) if uid == 0 else 0
    keep_mask &= read_permitted_mask()
    set_capability_sets(keep_mask, keep_mask, 0)
    call_prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, what="clearing ambient capabilities")
    if profile.get("noNewPrivs"):
        call_prctl(PR_SET_NO_NEW_PRIVS, 1, what="setting no_new_privs")
    os.umask(DEFAULT_UMASK)


def die_with_parent(sig: int) -> None:
    """Get `sig` when the parent dies (set after the uid change, which clears it)."""
    call_prctl(PR_SET_PDEATHSIG, sig, what="setting the parent-death signal")
