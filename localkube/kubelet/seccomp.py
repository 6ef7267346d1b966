"""The RuntimeDefault seccomp filter: a small BPF program refusing what container runtimes refuse.

Why: `seccompProfile: {type: RuntimeDefault}` is part of the restricted Pod Security Standard,
and a pod that asks for it should really run filtered, as under containerd. containerd's
default profile is an allow-list of ~350 syscalls with argument filters; this filter is its
complement reduced to the syscalls that profile refuses outright to a container without
extra capabilities (kernel modules, kexec, reboot, mount and namespace changes, keyrings,
BPF, perf, clock changes, swap, io_uring, the new mount API, x32 syscalls). They fail with
EPERM, as with containerd. Only x86_64 has the table: on another architecture
`build_runtime_default_filter` returns None and the process runs unfiltered (the kubelet logs
nothing about it; localkube/kubelet/README.md says so).

Standard library only: imported by the shim and by the exec entry (python -I -S).
"""

import errno
import os
import struct

AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
BPF_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
BPF_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
BPF_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
BPF_RET_K = 0x06  # BPF_RET | BPF_K
OFFSET_NR = 0  # struct seccomp_data.nr
OFFSET_ARCH = 4  # struct seccomp_data.arch

# x86_64 numbers of the syscalls containerd's default profile refuses without capabilities.
REFUSED_X86_64 = {
    "uselib": 134,
    "ustat": 136,
    "sysfs": 139,
    "vhangup": 153,
    "pivot_root": 155,
    "_sysctl": 156,
    "acct": 163,
    "settimeofday": 164,
    "mount": 165,
    "umount2": 166,
    "swapon": 167,
    "swapoff": 168,
    "reboot": 169,
    "iopl": 172,
    "ioperm": 173,
    "create_module": 174,
    "init_module": 175,
    "delete_module": 176,
    "get_kernel_syms": 177,
    "query_module": 178,
    "quotactl": 179,
    "nfsservctl": 180,
    "lookup_dcookie": 212,
    "clock_settime": 227,
    "kexec_load": 246,
    "add_key": 248,
    "request_key": 249,
    "keyctl": 250,
    "unshare": 272,
    "perf_event_open": 298,
    "name_to_handle_at": 303,
    "open_by_handle_at": 304,
    "clock_adjtime": 305,
    "setns": 308,
    "finit_module": 313,
    "kexec_file_load": 320,
    "bpf": 321,
    "userfaultfd": 323,
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
}


def pack_instruction(code: int, jt: int, jf: int, k: int) -> bytes:
    """One `struct sock_filter`."""
    return struct.pack("HBBI", code, jt, jf, k)


def build_runtime_default_filter() -> bytes | None:
    """The BPF program (packed sock_filter array), or None on an architecture without a table."""
    if os.uname().machine != "x86_64":
        return None
    refused = sorted(REFUSED_X86_64.values())
    program = [
        (BPF_LD_W_ABS, 0, 0, OFFSET_ARCH),
        (BPF_JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
        None,  # foreign architecture (i386 via int 0x80): refuse
        (BPF_LD_W_ABS, 0, 0, OFFSET_NR),
        None,  # x32 ABI: refuse
        *[None] * len(refused),
        (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
        (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.EPERM),
    ]
    refuse_at = len(program) - 1
    program[2] = (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.EPERM)
    program[4] = (BPF_JGE_K, refuse_at - 5, 0, X32_SYSCALL_BIT)
    for i, number in enumerate(refused):
        index = 5 + i
        program[index] = (BPF_JEQ_K, refuse_at - index - 1, 0, number)
    return b"".join(pack_instruction(*instruction) for instruction in program)
