"""A seccomp filter for sandboxed runs, as classic BPF built here (host code, standard library).

Kernel-mode runs install it in the child after `PR_SET_NO_NEW_PRIVS`; every process the run
starts inherits it. It allows every system call except those that widen what the code can reach
or that add kernel attack surface no test program needs, which fail with `EPERM`:

* namespaces and mounts: `unshare`, `setns`, `clone` with a namespace flag (so no user namespace,
  whose capabilities would reopen the mount and network interfaces), `mount` and the new mount
  API, `umount2`, `pivot_root`, `chroot`;
* kernel keyrings (`keyctl`, `add_key`, `request_key`): they are per user, not per namespace, so
  two runs as the same user could pass data through them;
* tracing and other processes' memory (`ptrace`, `process_vm_readv`/`writev`), `bpf`,
  `perf_event_open`, `userfaultfd`, `io_uring`, file handles (`open_by_handle_at`), modules,
  `kexec`, swap, `reboot`, `acct`.

`clone3` fails with `ENOSYS` (its flags are in memory a filter cannot read), so the C library falls
back to `clone`, whose flags it can. A call from another ABI than the interpreter's (x32, or
32-bit calls on x86-64) fails with `ENOSYS`. Only x86-64 and AArch64 are covered; elsewhere
`program()` returns None and no filter is installed.
"""

import errno
import struct

_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_NAMESPACE_FLAGS = (0x10000000 | 0x00020000 | 0x40000000 | 0x20000000 | 0x08000000 | 0x04000000
                    | 0x02000000)  # NEWUSER, NEWNS, NEWNET, NEWPID, NEWIPC, NEWUTS, NEWCGROUP
_DENIED = ("unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "keyctl", "add_key",
           "request_key", "ptrace", "process_vm_readv", "process_vm_writev", "bpf",
           "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
           "io_uring_register", "open_by_handle_at", "name_to_handle_at", "init_module",
           "finit_module", "delete_module", "kexec_load", "kexec_file_load", "swapon", "swapoff",
           "reboot", "acct", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick",
           "mount_setattr")
# machine -> (AUDIT_ARCH, syscall numbers).
_TABLES = {
    "x86_64": (0xC000003E, {
        "unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155,
        "chroot": 161, "keyctl": 250, "add_key": 248, "request_key": 249, "ptrace": 101,
        "process_vm_readv": 310, "process_vm_writev": 311, "bpf": 321, "perf_event_open": 298,
        "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "open_by_handle_at": 304, "name_to_handle_at": 303,
        "init_module": 175, "finit_module": 313, "delete_module": 176, "kexec_load": 246,
        "kexec_file_load": 320, "swapon": 167, "swapoff": 168, "reboot": 169, "acct": 163,
        "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
        "fspick": 433, "mount_setattr": 442, "clone": 56, "clone3": 435}),
    "aarch64": (0xC00000B7, {
        "unshare": 97, "setns": 268, "mount": 40, "umount2": 39, "pivot_root": 41,
        "chroot": 51, "keyctl": 219, "add_key": 217, "request_key": 218, "ptrace": 117,
        "process_vm_readv": 270, "process_vm_writev": 271, "bpf": 280, "perf_event_open": 241,
        "userfaultfd": 282, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "open_by_handle_at": 265, "name_to_handle_at": 264,
        "init_module": 105, "finit_module": 273, "delete_module": 106, "kexec_load": 104,
        "kexec_file_load": 294, "swapon": 224, "swapoff": 225, "reboot": 142, "acct": 89,
        "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
        "fspick": 433, "mount_setattr": 442, "clone": 220, "clone3": 435}),
}


def _op(code, k, jt=0, jf=0):
  return struct.pack("=HBBI", code, jt, jf, k)


def program(machine: str) -> bytes | None:
  """The filter (`struct sock_filter` array) for `machine` (`os.uname().machine`), or None."""
  if machine not in _TABLES:
    return None
  arch, numbers = _TABLES[machine]
  enosys, eperm = _op(_RET, _ERRNO | errno.ENOSYS), _op(_RET, _ERRNO | errno.EPERM)
  ops = [_op(_LD_W_ABS, 4),                                  # seccomp_data.arch
         _op(_JEQ, arch, 1, 0), enosys,
         _op(_LD_W_ABS, 0)]                                  # seccomp_data.nr
  if machine == "x86_64":  # x32 calls set bit 30 of the number.
    ops += [_op(_JGE, 0x40000000, 0, 1), enosys]
  ops += [_op(_JEQ, numbers["clone3"], 0, 1), enosys]
  for name in _DENIED:
    ops += [_op(_JEQ, numbers[name], 0, 1), eperm]
  # clone: its flags are the first argument (low 32 bits at offset 16 on little-endian).
  ops += [_op(_JEQ, numbers["clone"], 0, 3), _op(_LD_W_ABS, 16),
          _op(_JSET, _NAMESPACE_FLAGS, 0, 1), eperm]
  ops.append(_op(_RET, _ALLOW))
  return b"".join(ops)
