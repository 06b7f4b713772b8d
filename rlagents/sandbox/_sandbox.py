"""Runs untrusted Python in a separate, isolated, limited process (host code, Linux).

Two modes (`SandboxLimits.isolation`); `SandboxResult.isolation` says which one ran.

"kernel" (the default) puts every run in its own namespaces, built by `unshare` and a small setup
script (`_init.py`) that stays as the run's process 1:

* pid namespace: the run sees only its own processes, and every process it starts (in a new
  session, double-forked, whatever) is killed when the run ends, by the kernel.
* mount namespace: a fresh root holding read-only views of what the interpreter needs (its
  prefixes and `/usr`), four device nodes, a fresh `/proc` and the run's private directory, the
  only writable place; the host's tree is detached (`pivot_root`), so no file outside the
  directory can be opened by any interface (child shells and native code included). Pinned
  files are read-only bind mounts: the kernel refuses writes, renames and removals.
* network namespace: only a loopback that is down; IPC and UTS namespaces (no System V shared
  memory or message queues shared with the host or with other runs).
* the unprivileged user (`nobody`), groups cleared, `PR_SET_NO_NEW_PRIVS`, and a seccomp filter
  (`_seccomp.py`: no namespaces, mounts, keyrings, tracing, bpf, io_uring, ...) on x86-64 and
  AArch64 (`isolation` then has "+seccomp").
* kernel resource limits (`setrlimit`) on CPU time, address space, processes, open files and
  output size, and, where this machine lets it create cgroups, a memory and pids cgroup per run
  (`isolation` then has "+cgroup": "kernel+seccomp+cgroup" with both).
* wall clock: process 1 kills the whole namespace at `wall_seconds`.

Where the namespaces or the user change cannot be applied the run raises `SandboxUnavailable`
naming what is missing. The seccomp filter and the cgroup are applied where this machine has them
(`SandboxLimits.seccomp`/`cgroup="require"` makes either mandatory), and the mode's name says
whether they were. A user who accepts less asks for "hook": the audit hook, rlimits, the unprivileged user and (where allowed)
the network namespace only, with no mount or pid namespace, so the child can see the host's
world-readable files through interfaces the hook does not watch and leave processes behind.

In both modes an audit hook in the child refuses, and reports, sockets, new processes, native code
and file access outside the directory: an early, friendly refusal with a clear violation, not the
wall. Pinned files (tests) are hashed before and after the run; any change is a violation.

Each refusal or exceeded limit is a `Violation` in the result, so the caller can zero a reward
and flag the episode.
"""

import dataclasses
import functools
import hashlib
import marshal
import os
import pwd
import resource
import select
import shutil
import signal
import site
import subprocess
import sys
import tempfile
import time
from typing import Mapping

from rlagents.sandbox import _seccomp

_HERE = os.path.dirname(os.path.realpath(__file__))
_BOOTSTRAP = os.path.join(_HERE, "_bootstrap.py")
_INIT = os.path.join(_HERE, "_init.py")
ISOLATION_MODES = ("kernel", "hook")
_DEVICES = ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom")
_ROOT_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_MAX_FILES_LEFT = 256  # Files of a run's directory returned in `SandboxResult.files`.
# Seconds the host waits past the wall clock for process 1 to end the run itself.
_HOST_GRACE_SECONDS = 5.0
_PINNED_DIR_MODE = 0o755
_RLIMITS = {
    "cpu_seconds": "RLIMIT_CPU",
    "memory_bytes": "RLIMIT_AS",
    "max_processes": "RLIMIT_NPROC",
    "max_open_files": "RLIMIT_NOFILE",
    "max_output_bytes": "RLIMIT_FSIZE",
}
VIOLATIONS = ("timeout", "cpu", "memory", "output", "network", "filesystem", "process",
              "native", "pinned_file", "report_channel", "forged_verdict")


class SandboxUnavailable(RuntimeError):
  """A requested isolation measure cannot be applied on this OS."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class SandboxLimits:
  """Limits of one run.

  Attributes:
    cpu_seconds: CPU time before the kernel stops the child (SIGXCPU).
    wall_seconds: wall-clock time before every process of the run is killed (the namespace in
      the kernel mode, the process group in the hook mode).
    memory_bytes: address-space limit of each process, and, with a cgroup, the memory of the
      whole run.
    max_processes: processes the sandbox user may have (fork bombs stop here); with a cgroup,
      also the run's own process count.
    max_open_files: file descriptors per process.
    max_output_bytes: bytes kept of stdout and of stderr, and the largest file it may write.
    network_namespace: "require" (fail if `unshare -n` is unavailable), "auto" (use it when
      available) or "off". Sockets are refused by the audit hook in every case.
    drop_to_user: unprivileged user to run as when started as root ("" to stay root, which
      leaves the process limit unenforced by the kernel; only with isolation="hook").
    isolation: "kernel" (pid, mount and network namespaces, the unprivileged user; raises
      `SandboxUnavailable` where this machine cannot apply them) or "hook" (the weaker mode: an
      audit hook and limits only; see the module docstring for what it does not stop).
    cgroup: "auto" (a memory and pids cgroup per run where this machine allows it), "require"
      (`SandboxUnavailable` where it does not) or "off". Only with isolation="kernel".
    seccomp: "auto" (the `_seccomp.py` filter where there is one for this architecture),
      "require" or "off". Only with isolation="kernel".
  """
  cpu_seconds: float = 2.0
  wall_seconds: float = 5.0
  memory_bytes: int = 256 * 2**20
  max_processes: int = 32
  max_open_files: int = 64
  max_output_bytes: int = 64 * 2**10
  network_namespace: str = "auto"
  drop_to_user: str = "nobody"
  isolation: str = "kernel"
  cgroup: str = "auto"
  seccomp: str = "auto"

  def __post_init__(self):
    for name in ("cpu_seconds", "wall_seconds", "memory_bytes", "max_processes",
                 "max_open_files", "max_output_bytes"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"SandboxLimits.{name} must be a positive number, got {value!r}")
    if self.max_open_files < 8:
      raise ValueError("SandboxLimits.max_open_files must be >= 8 (the interpreter needs some)")
    if self.network_namespace not in ("require", "auto", "off"):
      raise ValueError(f"SandboxLimits.network_namespace must be 'require', 'auto' or 'off', "
                       f"got {self.network_namespace!r}")
    if self.isolation not in ISOLATION_MODES:
      raise ValueError(f"SandboxLimits.isolation must be one of {ISOLATION_MODES}, got "
                       f"{self.isolation!r}")
    for name in ("cgroup", "seccomp"):
      if getattr(self, name) not in ("require", "auto", "off"):
        raise ValueError(f"SandboxLimits.{name} must be 'require', 'auto' or 'off', got "
                         f"{getattr(self, name)!r}")
    if self.isolation == "kernel":
      if self.network_namespace == "off":
        raise ValueError("SandboxLimits.network_namespace='off' needs isolation='hook' (the "
                         "kernel mode always gives a run its own network namespace)")
      if not self.drop_to_user:
        raise ValueError("SandboxLimits.drop_to_user='' needs isolation='hook' (the kernel mode "
                         "always runs the code as an unprivileged user)")
    else:
      for name in ("cgroup", "seccomp"):
        if getattr(self, name) == "require":
          raise ValueError(f"SandboxLimits.{name}='require' needs isolation='kernel'")


@dataclasses.dataclass(frozen=True)
class Violation:
  kind: str    # one of VIOLATIONS
  detail: str


@dataclasses.dataclass(frozen=True)
class SandboxResult:
  """What came of one run.

  Attributes:
    returncode: the child's exit status (negative: killed by that signal).
    stdout: at most `max_output_bytes` of its standard output.
    stderr: at most `max_output_bytes` of its standard error.
    violations: every refusal and exceeded limit, in the order seen.
    files: the regular files the code left in its directory (name -> bytes, each capped at
      `max_output_bytes`, at most 256; symlinks and pinned files left out).
    wall_seconds: how long it ran.
    network_isolated: whether it ran in its own network namespace.
    isolation: the mode that ran: "hook", or "kernel" with "+seccomp" and "+cgroup" where
      they applied (`isolation_mode`).
    channel: what the child wrote on its result channel (`run_python(channel=True)`).
  """
  returncode: int
  stdout: str
  stderr: str
  violations: tuple[Violation, ...]
  files: Mapping[str, bytes]
  wall_seconds: float
  network_isolated: bool
  isolation: str = "hook"
  channel: bytes = b""

  @property
  def ok(self) -> bool:
    """Exited with status 0 and broke no rule."""
    return self.returncode == 0 and not self.violations

  @property
  def violation_kinds(self) -> frozenset[str]:
    return frozenset(v.kind for v in self.violations)


_NETNS_AVAILABLE: bool | None = None


def network_namespace_available() -> bool:
  """Whether `unshare -n` works here (probed once)."""
  global _NETNS_AVAILABLE
  if _NETNS_AVAILABLE is None:
    unshare = shutil.which("unshare")
    try:
      _NETNS_AVAILABLE = bool(unshare) and subprocess.run(
          [unshare, "-n", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
      _NETNS_AVAILABLE = False
  return _NETNS_AVAILABLE


def _rlimit_values(limits: SandboxLimits) -> list[tuple[int, int, int]]:
  """`(resource, soft, hard)` for every limit; raises `SandboxUnavailable` naming one that
  this OS lacks or that is above the hard limit this process may grant."""
  values = []
  for field, name in _RLIMITS.items():
    number = getattr(resource, name, None)
    if number is None:
      raise SandboxUnavailable(f"SandboxLimits.{field} needs {name}, which this OS lacks")
    value = int(getattr(limits, field))
    if field == "cpu_seconds":
      value = max(1, int(-(-limits.cpu_seconds // 1)))
    _, hard = resource.getrlimit(number)
    if hard != resource.RLIM_INFINITY and value > hard and os.geteuid() != 0:
      raise SandboxUnavailable(f"SandboxLimits.{field}={value} is above this OS's hard limit "
                               f"{hard} for {name}")
    # The CPU hard limit one second later turns an ignored SIGXCPU into SIGKILL.
    values.append((number, value, value + 1 if field == "cpu_seconds" else value))
  return values


def _user_id(limits: SandboxLimits) -> int:
  if not limits.drop_to_user or os.geteuid() != 0:
    return -1
  if shutil.which("setpriv") is None:
    raise SandboxUnavailable("SandboxLimits.drop_to_user needs `setpriv`, which this OS lacks")
  try:
    return pwd.getpwnam(limits.drop_to_user).pw_uid
  except KeyError as e:
    raise SandboxUnavailable(f"SandboxLimits.drop_to_user: no user {limits.drop_to_user!r} on "
                             "this OS") from e


def sha256_of(data: bytes) -> str:
  return hashlib.sha256(data).hexdigest()


def _safe_name(name: str) -> str:
  normal = os.path.normpath(name)
  if os.path.isabs(normal) or normal.startswith("..") or not normal or normal == ".":
    raise ValueError(f"sandbox file name {name!r} must be a relative path inside the sandbox")
  return normal


_KERNEL_PROBLEM: list[str | None] = []


def kernel_isolation_problem() -> str | None:
  """Why the "kernel" mode cannot run here (None when it can); probed once.

  It needs Linux, root (to make the pid and mount namespaces and drop to the unprivileged
  user), util-linux `unshare`, and a trial namespace that really starts.
  """
  if not _KERNEL_PROBLEM:
    _KERNEL_PROBLEM.append(_probe_kernel())
  return _KERNEL_PROBLEM[0]


def _probe_kernel() -> str | None:
  if not sys.platform.startswith("linux"):
    return f"Linux namespaces, which {sys.platform} lacks"
  if os.geteuid() != 0:
    return ("root, to create pid and mount namespaces and drop to the unprivileged user "
            "(this process runs as uid {})".format(os.geteuid()))
  unshare = shutil.which("unshare")
  if unshare is None:
    return "util-linux `unshare`, which this OS lacks"
  try:
    probe = subprocess.run([unshare, "--pid", "--mount", "--net", "--ipc", "--uts", "--fork",
                            "--kill-child", "--", "true"], capture_output=True, timeout=10)
  except (OSError, subprocess.TimeoutExpired) as e:
    return f"`unshare --pid --mount --net --ipc --uts`, which failed here ({e})"
  if probe.returncode != 0:
    return ("`unshare --pid --mount --net --ipc --uts`, which this OS refused: "
            + probe.stderr.decode(errors="replace").strip())
  return None


def _cgroup_roots() -> dict[str, str] | None:
  """Where to make per-run cgroups: {"v2": dir} or {"memory": dir, "pids": dir}, or None."""
  unified = "/sys/fs/cgroup"
  controllers = os.path.join(unified, "cgroup.controllers")
  if os.path.exists(controllers):
    with open(controllers) as f:
      available = f.read().split()
    if {"memory", "pids"} <= set(available) and os.access(unified, os.W_OK):
      return {"v2": unified}
    return None
  roots = {name: os.path.join(unified, name) for name in ("memory", "pids")}
  if all(os.path.isdir(d) and os.access(d, os.W_OK) for d in roots.values()):
    return roots
  return None


def _write_text(path: str, text: str) -> None:
  with open(path, "w") as f:
    f.write(text)


def _make_cgroups(limits: SandboxLimits) -> list[str]:
  """Makes this run's cgroups with its memory and process limits; returns their directories
  (empty where this machine does not allow them and `limits.cgroup` is not "require")."""
  if limits.cgroup == "off" or limits.isolation != "kernel":
    return []
  roots = _cgroup_roots()
  made = []
  try:
    if roots is None:
      raise OSError("no writable cgroup hierarchy with the memory and pids controllers")
    name = "rlagents_sandbox_" + os.urandom(8).hex()
    if "v2" in roots:
      directory = os.path.join(roots["v2"], name)
      os.mkdir(directory)
      made.append(directory)
      _write_text(os.path.join(directory, "memory.max"), str(int(limits.memory_bytes)))
      _write_text(os.path.join(directory, "memory.swap.max"), "0")
      _write_text(os.path.join(directory, "pids.max"), str(int(limits.max_processes)))
    else:
      memory = os.path.join(roots["memory"], name)
      os.mkdir(memory)
      made.append(memory)
      _write_text(os.path.join(memory, "memory.limit_in_bytes"), str(int(limits.memory_bytes)))
      pids = os.path.join(roots["pids"], name)
      os.mkdir(pids)
      made.append(pids)
      _write_text(os.path.join(pids, "pids.max"), str(int(limits.max_processes)))
  except OSError as e:
    _remove_cgroups(made)
    if limits.cgroup == "require":
      raise SandboxUnavailable(f"SandboxLimits.cgroup='require' but no cgroup could be made "
                               f"here: {e}") from e
    return []
  return made


def _cgroup_ran_out_of_memory(directories: list[str]) -> bool:
  for directory in directories:
    for name, key in (("memory.events", "oom_kill"), ("memory.failcnt", None)):
      path = os.path.join(directory, name)
      if not os.path.exists(path):
        continue
      with open(path) as f:
        text = f.read()
      if key is None and int(text.strip() or 0) > 0:
        return True
      if key is not None and any(line.split()[:1] == [key] and int(line.split()[1]) > 0
                                 for line in text.splitlines()):
        return True
  return False


def _remove_cgroups(directories: list[str]) -> None:
  for directory in directories:
    for _ in range(50):
      try:
        os.rmdir(directory)
        break
      except FileNotFoundError:
        break
      except OSError:
        time.sleep(0.01)  # The last processes of the run are still being freed.


def isolation_mode(limits: SandboxLimits = SandboxLimits()) -> str:
  """The mode a run with `limits` gets here: "hook", or "kernel" with "+seccomp" and "+cgroup"
  where they apply (e.g. "kernel+seccomp+cgroup").

  Raises:
    SandboxUnavailable: "kernel" was asked for and cannot run here, or a required seccomp
      filter or cgroup cannot be had (naming what is missing).
  """
  if limits.isolation == "hook":
    return "hook"
  _require_kernel()
  directories = _make_cgroups(limits)
  _remove_cgroups(directories)
  return _mode_name(_seccomp_program(limits) is not None, bool(directories))


def _mode_name(seccomp: bool, cgroup: bool) -> str:
  return "kernel" + ("+seccomp" if seccomp else "") + ("+cgroup" if cgroup else "")


def _seccomp_program(limits: SandboxLimits) -> bytes | None:
  if limits.seccomp == "off":
    return None
  program = _seccomp.program(os.uname().machine)
  if program is None and limits.seccomp == "require":
    raise SandboxUnavailable(f"SandboxLimits.seccomp='require' but there is no filter for "
                             f"{os.uname().machine} (only x86_64 and aarch64)")
  return program


def _require_kernel() -> None:
  problem = kernel_isolation_problem()
  if problem is not None:
    raise SandboxUnavailable(f"SandboxLimits.isolation='kernel' needs {problem}; pass "
                             "isolation='hook' to accept the weaker mode (audit hook and limits "
                             "only)")


# Pools that kernel-mode runs go to (`_pool.pooled`), newest last.
_ROUTES: list = []


def run_python(code: str, *, files: Mapping[str, str | bytes] | None = None,
               pinned: Mapping[str, str | bytes] | None = None,
               limits: SandboxLimits = SandboxLimits(), stdin: str = "",
               channel: bool = False) -> SandboxResult:
  """Runs `code` as `main.py` in a fresh directory with `files` and read-only `pinned` files.

  Args:
    code: the Python source to run.
    files: extra files the code may read and change (relative name -> content).
    pinned: files the code must not change (tests): read-only, checked by sha256 after the run.
    limits: the limits and isolation mode of the run.
    stdin: text fed to the child's standard input.
    channel: give the child a result channel: a file descriptor, named by the environment
      variable `SANDBOX_CHANNEL_FD`, on a file outside its directory; what it writes there (up
      to `max_output_bytes`) comes back as `SandboxResult.channel`.

  Raises:
    SandboxUnavailable: a limit or isolation measure cannot be applied on this OS.
    ValueError: a file name that leaves the sandbox directory.
  """
  if _ROUTES and limits.isolation == "kernel":
    return _ROUTES[-1].run_python(code, files=files, pinned=pinned, limits=limits, stdin=stdin,
                                  channel=channel)
  rlimits = _rlimit_values(limits)
  if limits.isolation == "kernel":
    _require_kernel()
  uid = _user_id(limits)
  use_netns = limits.isolation == "kernel" or (
      limits.network_namespace != "off" and network_namespace_available())
  if limits.network_namespace == "require" and not use_netns:
    raise SandboxUnavailable("SandboxLimits.network_namespace='require' but `unshare -n` is "
                             "not permitted on this OS")
  pinned_bytes = {_safe_name(k): (v.encode() if isinstance(v, str) else v)
                  for k, v in (pinned or {}).items()}
  digests = {name: sha256_of(data) for name, data in pinned_bytes.items()}
  root = _make_run_directory()
  try:
    return _run_in(root, code, files or {}, pinned_bytes, digests, limits, rlimits, uid,
                   use_netns, stdin, channel)
  finally:
    _make_removable(root)
    shutil.rmtree(root, ignore_errors=True)


_SCRATCH_MIN_FREE = 1 << 30


@functools.lru_cache(maxsize=1)
def _shared_memory_parent() -> str | None:
  """`/dev/shm` where it is a writable tmpfs with at least 1 GiB free, else None."""
  try:
    with open("/proc/self/mounts") as f:
      tmpfs = any(line.split()[1:3] == ["/dev/shm", "tmpfs"] for line in f)
    stats = os.statvfs("/dev/shm")
  except OSError:
    return None
  if tmpfs and os.access("/dev/shm", os.W_OK | os.X_OK) and (
      stats.f_bavail * stats.f_frsize >= _SCRATCH_MIN_FREE):
    return "/dev/shm"
  return None


def _make_run_directory() -> str:
  """A new private directory for one run: in the temporary directory (`tempfile`) where the
  environment names one (`TMPDIR`), else on the shared-memory tmpfs (`/dev/shm`) where it is
  writable with at least 1 GiB free, else in the system's temporary directory.

  Making and removing a run's few files on a disk file system (ext4 here) cost ~1.8 ms a run,
  a quarter of a pooled run. On a tmpfs the files a run writes are memory, charged to the run's
  memory cgroup where it has one, so they count against its memory limit."""
  return tempfile.mkdtemp(prefix="rlagents_sandbox_",
                          dir=None if "TMPDIR" in os.environ else _shared_memory_parent())


def _make_removable(root: str) -> None:
  for directory, _, _ in os.walk(root):
    try:
      os.chmod(directory, 0o755)
    except OSError:
      pass


def _write(path: str, data: bytes, mode: int) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "wb") as f:
    f.write(data)
  os.chmod(path, mode)


def _stdin_source(root: str, data: bytes):
  """A readable file object holding `data`: a pipe (not seekable, so what the child read is
  gone) when it fits the pipe's buffer, else a file in `root`."""
  if len(data) <= 4096:  # POSIX guarantees at least this much pipe buffer.
    read, write = os.pipe()
    os.write(write, data)
    os.close(write)
    return os.fdopen(read, "rb")
  path = os.path.join(root, "stdin")
  _write(path, data, 0o600)
  return open(path, "rb")


def _site_dirs() -> list[str]:
  """This interpreter's site-packages directories (the child starts without `site`)."""
  return [p for p in site.getsitepackages() if os.path.isdir(p)]


def _read_only_view() -> tuple[list[str], dict[str, str]]:
  """(directories and files bound read-only into a kernel-mode run, root symlinks to copy)."""
  wanted = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                          sys.base_exec_prefix, os.path.dirname(sys.executable))}
  wanted |= {"/usr", os.path.realpath(_BOOTSTRAP), os.path.realpath(_INIT)}
  links = {}
  for name in _ROOT_LINKS:
    if os.path.islink(name):
      links[name] = os.readlink(name)
    elif os.path.isdir(name):
      wanted.add(name)
  ordered = sorted(wanted)
  # A path inside another one is already in view.
  kept = [p for p in ordered
          if not any(p != q and p.startswith(q.rstrip("/") + "/") for q in ordered)]
  return kept, links


def _prepare_work(work, code, files, pinned_bytes, uid, root):
  """Writes the run's files into its directory `work` (pinned ones read-only and root's)."""
  for name, data in files.items():
    _write(os.path.join(work, _safe_name(name)), data.encode() if isinstance(data, str) else data,
           0o644)
  _write(os.path.join(work, "main.py"), code.encode(), 0o644)
  for name, data in pinned_bytes.items():
    _write(os.path.join(work, name), data, 0o444)
  if uid >= 0:
    # The child owns its directory but not the pinned files nor their directories.
    pinned_dirs = {os.path.join(work, os.path.dirname(n)) for n in pinned_bytes}
    for directory, _, names in os.walk(work):
      if directory not in pinned_dirs or directory == work:
        os.chown(directory, uid, uid)
      for name in names:
        path = os.path.join(directory, name)
        if os.path.relpath(path, work) not in pinned_bytes:
          os.chown(path, uid, uid)
    for directory in pinned_dirs - {work}:
      os.chmod(directory, _PINNED_DIR_MODE)
    os.chmod(root, 0o711)


def _child_env(work, pinned_bytes):
  return {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0",
          "HOME": work, "TMPDIR": work, "SANDBOX_PINNED": "\0".join(pinned_bytes)}


def _child_argv(work, report_fd):
  return [sys.executable, "-I", "-S", "-B", os.path.realpath(_BOOTSTRAP), work, str(report_fd),
          "main.py", os.pathsep.join(_site_dirs())]


def _run_in(root, code, files, pinned_bytes, digests, limits, rlimits, uid, use_netns, stdin,
            channel):
  work = os.path.join(root, "work")
  os.mkdir(work)
  _prepare_work(work, code, files, pinned_bytes, uid, root)
  stdout_path, stderr_path = os.path.join(root, "stdout"), os.path.join(root, "stderr")
  report_read, report_write = os.pipe()
  os.set_blocking(report_read, False)
  env = _child_env(work, pinned_bytes)
  channel_path = os.path.join(root, "channel")
  channel_fd = os.open(channel_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
  if channel:
    env["SANDBOX_CHANNEL_FD"] = str(channel_fd)
  extra_fds = (report_write, channel_fd) if channel else (report_write,)
  child_argv = _child_argv(work, report_write)
  violations = []
  with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err, os.fdopen(
      channel_fd, "rb", closefd=True) as _, _stdin_source(root, stdin.encode()) as stdin_file:
    if limits.isolation == "kernel":
      code_, wall, isolation, out_of_memory, cpu_used = _launch_kernel(
          root, work, child_argv, env, pinned_bytes, limits, rlimits, uid, extra_fds,
          stdin_file, out, err, violations)
    else:
      code_, wall = _launch_hook(child_argv, env, work, limits, rlimits, uid, use_netns,
                                 extra_fds, stdin_file, out, err, violations)
      isolation, out_of_memory, cpu_used = "hook", False, None
  return _collect(root, work, limits, digests, violations, code_, wall, isolation,
                  out_of_memory, use_netns, report_read, cpu_used)


def _collect(root, work, limits, digests, violations, code_, wall, isolation, out_of_memory,
             use_netns, report_read, cpu_used=None) -> "SandboxResult":
  """The result of a finished run from what it left in `root` (every process of it is gone);
  `cpu_used` is the child's CPU seconds where process 1 reported them."""
  stdout_path, stderr_path = os.path.join(root, "stdout"), os.path.join(root, "stderr")
  with open(os.path.join(root, "channel"), "rb") as f:
    channel_bytes = f.read(limits.max_output_bytes)
  reports = _read_all(report_read)
  os.close(report_read)

  def scrub(text: str) -> str:
    # The directory name is random; results must not depend on it (replay compares them).
    return text.replace(work, "<sandbox>")

  for line in reports.decode(errors="replace").splitlines():
    kind, _, detail = line.partition("\t")
    violations.append(Violation(kind if kind in VIOLATIONS else "report_channel", scrub(detail)))
  stdout, stderr = (scrub(_read_capped(p, limits.max_output_bytes))
                    for p in (stdout_path, stderr_path))
  if code_ in (97, 98):
    violations.append(Violation("report_channel", "child closed or flooded its report channel"))
  timed_out = any(v.kind == "timeout" for v in violations)
  if out_of_memory:
    violations.append(Violation("memory", f"over {limits.memory_bytes} bytes of memory (cgroup)"))
  elif (code_ == -signal.SIGKILL and not timed_out and cpu_used is not None
        and cpu_used < limits.cpu_seconds):
    # Under the CPU limit, SIGKILL comes from the kernel's out-of-memory killer (or from the
    # program itself): a killer outside this run's cgroup (the host's or a container's) leaves
    # no count in it, and on a loaded host it may act before RLIMIT_AS does.
    violations.append(Violation("memory", f"killed (SIGKILL) after {cpu_used:.2f} s CPU, under "
                                          "the CPU limit: most likely out of memory"))
  elif code_ in (-signal.SIGXCPU, -signal.SIGKILL) and not timed_out:
    violations.append(Violation("cpu", f"over {limits.cpu_seconds} s CPU time"))
  # A write past RLIMIT_FSIZE fails with EFBIG ("File too large"), or kills with SIGXFSZ.
  if code_ == -signal.SIGXFSZ or "[Errno 27]" in stderr or any(
      os.path.getsize(p) >= limits.max_output_bytes for p in (stdout_path, stderr_path)):
    violations.append(Violation("output", f"over {limits.max_output_bytes} bytes of output"))
  if "MemoryError" in stderr:
    violations.append(Violation("memory", f"over {limits.memory_bytes} bytes of memory"))
  if "BlockingIOError" in stderr and "fork" in stderr:
    violations.append(Violation("process", f"over {limits.max_processes} processes"))
  for name, digest in digests.items():
    path = os.path.join(work, name)
    try:
      with open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as f:
        changed = sha256_of(f.read()) != digest
    except OSError:
      changed = True
    if changed:
      violations.append(Violation("pinned_file", f"{name} changed or removed"))
  files_left = {}
  for directory, _, names in os.walk(work):  # Symlinked directories are not entered.
    for name in sorted(names):
      path = os.path.join(directory, name)
      relative = os.path.relpath(path, work)
      # Read here, as root, a symlink would be followed on the host: links are left out.
      if (relative in digests or relative == "main.py" or os.path.islink(path)
          or not os.path.isfile(path)):
        continue
      if len(files_left) == _MAX_FILES_LEFT:
        violations.append(Violation("output", f"over {_MAX_FILES_LEFT} files left behind"))
        break
      files_left[relative] = _read_capped(path, limits.max_output_bytes).encode()
  return SandboxResult(returncode=code_, stdout=stdout, stderr=stderr,
                       violations=tuple(dict.fromkeys(violations)), files=files_left,
                       wall_seconds=wall, network_isolated=use_netns, isolation=isolation,
                       channel=channel_bytes)


def _launch_hook(child_argv, env, work, limits, rlimits, uid, use_netns, fds, stdin,
                 out, err, violations):
  """The weaker mode: the child in its own process group, limits set before it starts."""

  def preexec():
    os.setsid()
    for number, soft, hard in rlimits:
      resource.setrlimit(number, (soft, hard))

  argv = child_argv
  if uid >= 0:
    argv = [shutil.which("setpriv"), f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
            "--"] + argv
  if use_netns:
    argv = [shutil.which("unshare"), "-n", "--"] + argv
  start = time.monotonic()
  process = subprocess.Popen(argv, stdin=stdin, stdout=out, stderr=err, env=env,
                             cwd=work, preexec_fn=preexec, pass_fds=fds)
  os.close(fds[0])
  try:
    if not _wait_for(process, limits.wall_seconds):
      violations.append(Violation("timeout", f"over {limits.wall_seconds} s wall clock"))
  finally:
    _kill_group(process)
  return process.returncode, time.monotonic() - start


def _launch_kernel(root, work, child_argv, env, pinned_bytes, limits, rlimits, uid,
                   fds, stdin, out, err, violations):
  """The kernel mode: `unshare` makes the namespaces, `_init.py` is their process 1."""
  new_root = os.path.join(root, "root")
  os.mkdir(new_root, 0o755)
  read_only, links = _read_only_view()
  seccomp = _seccomp_program(limits)
  cgroups = _make_cgroups(limits)
  status_read, status_write = os.pipe()
  spec = {
      "new_root": new_root, "work": work, "read_only": read_only, "symlinks": links,
      "devices": [d for d in _DEVICES if os.path.exists(d)],
      "pinned": [os.path.join(work, n) for n in pinned_bytes],
      "argv": child_argv, "env": env, "rlimits": rlimits, "uid": uid,
      "gid": pwd.getpwuid(uid).pw_gid, "wall_seconds": float(limits.wall_seconds),
      "seccomp": seccomp, "status_fd": status_write,
      "cgroup_procs": [os.path.join(d, "cgroup.procs")
                                                  for d in cgroups]}
  argv = [shutil.which("unshare"), "--pid", "--mount", "--net", "--ipc", "--uts", "--fork",
          "--kill-child", "--",
          sys.executable, "-I", "-S", "-B", _INIT, marshal.dumps(spec).hex()]
  start = time.monotonic()
  try:
    process = subprocess.Popen(argv, stdin=stdin, stdout=out, stderr=err,
                               env={"PATH": env["PATH"], "LANG": env["LANG"]},
                               cwd=root, start_new_session=True,
                               pass_fds=fds + (status_write,))
    os.close(fds[0])
    os.close(status_write)
    try:
      # Process 1 ends the run at the wall clock; past the grace, the host ends it.
      host_timeout = not _wait_for(process, limits.wall_seconds + _HOST_GRACE_SECONDS)
    finally:
      _kill_group(process)
    wall = time.monotonic() - start
    with os.fdopen(status_read, "rb") as f:
      status = f.read().decode(errors="replace").strip()
    out_of_memory = _cgroup_ran_out_of_memory(cgroups)
  finally:
    _remove_cgroups(cgroups)
  kind, value, cpu_used = _parse_status(status)
  if kind == "timeout" or host_timeout:
    violations.append(Violation("timeout", f"over {limits.wall_seconds} s wall clock"))
    code_ = -signal.SIGKILL
  elif kind == "exit":
    code_ = int(value)
  elif kind == "signal":
    code_ = -int(value)
  elif kind == "error":
    raise SandboxUnavailable(f"the kernel sandbox could not be set up here: {value}")
  else:
    err.flush()
    raise SandboxUnavailable(f"the kernel sandbox ended without a status (unshare exit "
                             f"{process.returncode}): "
                             + _read_capped(err.name, 2000).strip()[-500:])
  return code_, wall, _mode_name(seccomp is not None, bool(cgroups)), out_of_memory, cpu_used


def _parse_status(status: str) -> tuple[str, str, float | None]:
  """`(kind, value, cpu_seconds)` from process 1's status line (`_init._supervise`); the CPU
  seconds are None where the line has none (a timeout or a set-up error)."""
  kind, _, rest = status.partition(" ")
  if kind not in ("exit", "signal"):
    return kind, rest, None
  value, _, cpu = rest.partition(" ")
  try:
    return kind, value, float(cpu)
  except ValueError:
    return kind, value, None


def _wait_for(process: subprocess.Popen, timeout: float) -> bool:
  """Whether `process` ended within `timeout` seconds (woken by its exit, not by polling)."""
  try:
    pidfd = os.pidfd_open(process.pid)
  except (AttributeError, OSError):  # Before Linux 5.3: Popen's polling wait.
    try:
      process.wait(timeout)
      return True
    except subprocess.TimeoutExpired:
      return False
  try:
    ready, _, _ = select.select([pidfd], [], [], timeout)
  finally:
    os.close(pidfd)
  return bool(ready)


def _kill_group(process: subprocess.Popen) -> None:
  try:
    os.killpg(process.pid, signal.SIGKILL)
  except ProcessLookupError:
    pass
  process.wait()


def _read_all(fd: int) -> bytes:
  chunks = []
  while True:
    try:
      chunk = os.read(fd, 65536)
    except BlockingIOError:
      break
    if not chunk:
      break
    chunks.append(chunk)
  return b"".join(chunks)


def _read_capped(path: str, cap: int) -> str:
  with open(path, "rb") as f:
    return f.read(cap).decode(errors="replace")
