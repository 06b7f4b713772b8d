"""Runs untrusted Python in a separate, limited process (host code, Linux).

What is enforced, and how:

* CPU time, address space, processes, open files and output size: kernel resource limits
  (`setrlimit`) set in the child before it starts. The process limit counts per user, so a run
  started as root drops to an unprivileged user (`nobody`) for it to apply.
* Wall-clock timeout: the child leads its own process group (`setsid`); on timeout the whole
  group is killed.
* Private temporary directory: the code runs in a fresh directory that is deleted afterwards; an
  audit hook in the child refuses opens outside it (reads of the interpreter's own files
  excepted) and every write outside it. As the unprivileged user the rest of the machine is also
  protected by file permissions.
* No network: a fresh network namespace (`unshare -n`, only a loopback that is down) when the OS
  allows it, and the audit hook refuses every socket.
* Pinned files (tests): written read-only, owned by root in a directory the child cannot write,
  and hashed before and after the run; any change is a violation.

Each refusal or exceeded limit is a `Violation` in the result, so the caller can zero a reward
and flag the episode. A limit that cannot be applied here raises `SandboxUnavailable`, naming it.
"""

import dataclasses
import hashlib
import os
import pwd
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Mapping

_BOOTSTRAP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bootstrap.py")
_PINNED_DIR_MODE = 0o755
_RLIMITS = {
    "cpu_seconds": "RLIMIT_CPU",
    "memory_bytes": "RLIMIT_AS",
    "max_processes": "RLIMIT_NPROC",
    "max_open_files": "RLIMIT_NOFILE",
    "max_output_bytes": "RLIMIT_FSIZE",
}
VIOLATIONS = ("timeout", "cpu", "memory", "output", "network", "filesystem", "process",
              "native", "pinned_file", "report_channel")


class SandboxUnavailable(RuntimeError):
  """A requested isolation measure cannot be applied on this OS."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class SandboxLimits:
  """Limits of one run.

  Attributes:
    cpu_seconds: CPU time before the kernel stops the child (SIGXCPU).
    wall_seconds: wall-clock time before the whole process group is killed.
    memory_bytes: address-space limit of the child.
    max_processes: processes the sandbox user may have (fork bombs stop here).
    max_open_files: file descriptors per process.
    max_output_bytes: bytes kept of stdout and of stderr, and the largest file it may write.
    network_namespace: "require" (fail if `unshare -n` is unavailable), "auto" (use it when
      available) or "off". Sockets are refused by the audit hook in every case.
    drop_to_user: unprivileged user to run as when started as root ("" to stay root, which
      leaves the process limit unenforced by the kernel).
  """
  cpu_seconds: float = 2.0
  wall_seconds: float = 5.0
  memory_bytes: int = 256 * 2**20
  max_processes: int = 32
  max_open_files: int = 64
  max_output_bytes: int = 64 * 2**10
  network_namespace: str = "auto"
  drop_to_user: str = "nobody"

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
    files: the files the code left in its directory (name -> bytes), pinned ones excluded.
    wall_seconds: how long it ran.
    network_isolated: whether it ran in its own network namespace.
  """
  returncode: int
  stdout: str
  stderr: str
  violations: tuple[Violation, ...]
  files: Mapping[str, bytes]
  wall_seconds: float
  network_isolated: bool

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


def run_python(code: str, *, files: Mapping[str, str | bytes] | None = None,
               pinned: Mapping[str, str | bytes] | None = None,
               limits: SandboxLimits = SandboxLimits(), stdin: str = "") -> SandboxResult:
  """Runs `code` as `main.py` in a fresh directory with `files` and read-only `pinned` files.

  Args:
    code: the Python source to run.
    files: extra files the code may read and change (relative name -> content).
    pinned: files the code must not change (tests): checked by sha256 after the run.
    limits: the limits of the run.
    stdin: text fed to the child's standard input.

  Raises:
    SandboxUnavailable: a limit or isolation measure cannot be applied on this OS.
    ValueError: a file name that leaves the sandbox directory.
  """
  rlimits = _rlimit_values(limits)
  uid = _user_id(limits)
  use_netns = limits.network_namespace != "off" and network_namespace_available()
  if limits.network_namespace == "require" and not use_netns:
    raise SandboxUnavailable("SandboxLimits.network_namespace='require' but `unshare -n` is "
                             "not permitted on this OS")
  pinned_bytes = {_safe_name(k): (v.encode() if isinstance(v, str) else v)
                  for k, v in (pinned or {}).items()}
  digests = {name: sha256_of(data) for name, data in pinned_bytes.items()}
  root = tempfile.mkdtemp(prefix="rlagents_sandbox_")
  try:
    return _run_in(root, code, files or {}, pinned_bytes, digests, limits, rlimits, uid,
                   use_netns, stdin)
  finally:
    _make_removable(root)
    shutil.rmtree(root, ignore_errors=True)


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


def _run_in(root, code, files, pinned_bytes, digests, limits, rlimits, uid, use_netns, stdin):
  work = os.path.join(root, "work")
  os.mkdir(work)
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
  stdout_path, stderr_path = os.path.join(root, "stdout"), os.path.join(root, "stderr")
  report_read, report_write = os.pipe()
  os.set_blocking(report_read, False)

  def preexec():
    os.setsid()
    for number, soft, hard in rlimits:
      resource.setrlimit(number, (soft, hard))

  argv = [sys.executable, "-I", "-B", _BOOTSTRAP, work, str(report_write), "main.py"]
  if uid >= 0:
    argv = [shutil.which("setpriv"), f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
            "--"] + argv
  if use_netns:
    argv = [shutil.which("unshare"), "-n", "--"] + argv
  env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0",
         "HOME": work, "TMPDIR": work, "SANDBOX_PINNED": "\0".join(pinned_bytes)}
  start = time.monotonic()
  violations = []
  with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
    process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=out, stderr=err, env=env,
                               cwd=work, preexec_fn=preexec, pass_fds=(report_write,))
    os.close(report_write)
    try:
      process.communicate(stdin.encode(), timeout=limits.wall_seconds)
    except subprocess.TimeoutExpired:
      violations.append(Violation("timeout", f"over {limits.wall_seconds} s wall clock"))
    finally:
      _kill_group(process)
  wall = time.monotonic() - start
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
  code_ = process.returncode
  if code_ in (97, 98):
    violations.append(Violation("report_channel", "child closed or flooded its report channel"))
  if code_ in (-signal.SIGXCPU, -signal.SIGKILL) and not any(
      v.kind == "timeout" for v in violations):
    violations.append(Violation("cpu", f"over {limits.cpu_seconds} s CPU time"))
  # A write past RLIMIT_FSIZE fails with EFBIG ("File too large"), or kills with SIGXFSZ.
  if code_ == -signal.SIGXFSZ or "[Errno 27]" in stderr or any(os.path.getsize(p) >= limits.max_output_bytes
                                     for p in (stdout_path, stderr_path)):
    violations.append(Violation("output", f"over {limits.max_output_bytes} bytes of output"))
  if "MemoryError" in stderr:
    violations.append(Violation("memory", f"over {limits.memory_bytes} bytes of memory"))
  if "BlockingIOError" in stderr and "fork" in stderr:
    violations.append(Violation("process", f"over {limits.max_processes} processes"))
  for name, digest in digests.items():
    path = os.path.join(work, name)
    try:
      with open(path, "rb") as f:
        changed = sha256_of(f.read()) != digest
    except OSError:
      changed = True
    if changed:
      violations.append(Violation("pinned_file", f"{name} changed or removed"))
  files_left = {}
  for directory, _, names in os.walk(work):
    for name in names:
      path = os.path.join(directory, name)
      relative = os.path.relpath(path, work)
      if relative not in digests and relative != "main.py" and os.path.isfile(path):
        files_left[relative] = _read_capped(path, limits.max_output_bytes).encode()
  return SandboxResult(returncode=code_, stdout=stdout, stderr=stderr,
                       violations=tuple(dict.fromkeys(violations)), files=files_left,
                       wall_seconds=wall, network_isolated=use_netns)


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
