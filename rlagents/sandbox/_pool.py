"""A pool of pre-started kernel sandboxes, for many short runs (host code, Linux).

A kernel-mode run (`run_python`) spends most of its wall time not on the CPU but waiting: for
`unshare` and a fresh interpreter to start, for the kernel to make the namespaces and mount the
new root, and, after the code ends, for them to be torn down. A `SandboxPool` moves that waiting
off the caller's path:

* it keeps `size` workers started ahead: each is a whole kernel sandbox, built as a fresh
  run's (`_init.py` as process 1 of fresh pid, mount, network, IPC and UTS namespaces, the new
  root, a private directory, per-run memory and pids cgroups), stopped just before it forks the
  child, waiting for a run. Workers are forked by the pool's zygote (`_Zygote`: `_init.py`
  started once) rather than started by `unshare` + a fresh interpreter, which was most of a
  pooled run's CPU;
* a run takes one worker, writes its files into the worker's directory, and sends the run's
  settings (pinned files, which process 1 then bind-mounts read-only; the environment; the
  limits; the seccomp filter; the cgroup limits); process 1 forks the child exactly as in a
  fresh run (cgroups, rlimits, `nobody`, no new privileges, seccomp, the bootstrap's audit hook);
* the result is read as soon as process 1 reports the child's status (every process of the run
  is dead by then), and the worker's teardown (namespace exit, cgroups, directory) happens in the
  background while the next run goes on.

Every worker serves one run and is thrown away: a run never sees another run's directory,
processes, files or interpreter state. The limits, the pinned-file hashes, the violations and the
verdict are those of `run_python` (the same collection code); only the waiting moves.

    with sandbox.SandboxPool(size=4) as pool:
      result = pool.run_python("print(1)", limits=limits)
      verdict = pool.run_tests(solution, tests, limits=limits)
"""

import concurrent.futures
import contextlib
import marshal
import os
import pwd
import queue
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Mapping

from rlagents.sandbox import _sandbox
from rlagents.sandbox import _verdict

_MAX_STDIN = 60 * 1024  # Below a pipe's buffer: written whole before the run starts.
_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
# The descriptor numbers a worker's process 1 has (`_init.WORKER_FDS`).
_WORKER_FDS = {"stdin": 0, "stdout": 1, "stderr": 2, "report": 3, "channel": 4, "status": 5,
               "go": 6}
# The limit files of a worker's cgroups (v2 and v1 names), written per run.
_LIMIT_FILES = ("memory.max", "memory.swap.max", "memory.limit_in_bytes", "pids.max")


class _Zygote:
  """The pool's worker factory: `_init.py zygote`, started once, forks every worker (new
  namespaces, then process 1 builds the root as a fresh sandbox's does). A fork of a started
  interpreter costs about a millisecond; a fresh `unshare` + interpreter start cost ~20 ms of CPU
  per worker, most of a pooled run's cost."""

  def __init__(self):
    self._lock = threading.Lock()  # one command and its answer at a time
    self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with theirs:
      self.process = subprocess.Popen(
          [sys.executable, "-I", "-S", "-B", _sandbox._INIT, "zygote", str(theirs.fileno()),  # pylint: disable=protected-access
           _verdict._DRIVER],  # pylint: disable=protected-access
          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
          env=_ENV, start_new_session=True, pass_fds=(theirs.fileno(),))

  def spawn(self, spec: dict, fds: list[int]) -> int:
    """Starts a worker; returns the pid of its process group."""
    with self._lock:
      socket.send_fds(self.sock, [marshal.dumps(spec)], fds)
      reply = self.sock.recv(256).decode(errors="replace")
    if not reply:
      raise OSError(f"the sandbox zygote ended (status {self.process.poll()})")
    if reply.startswith("error"):
      raise OSError(f"the sandbox zygote could not fork a worker: {reply[6:]}")
    return int(reply)

  def close(self) -> None:
    self.sock.close()  # the zygote ends when it reads the end of its socket
    try:
      self.process.wait(timeout=_sandbox._HOST_GRACE_SECONDS)  # pylint: disable=protected-access
    except subprocess.TimeoutExpired:
      _sandbox._kill_group(self.process)  # pylint: disable=protected-access


class _Spawned:
  """A worker's process group, made by the zygote (not this process's child): waited for by the
  end of its lifeline pipe, which only its intermediate process holds."""

  def __init__(self, pid: int, lifeline: int):
    self.pid = pid
    self._lifeline = lifeline

  def wait(self, timeout: float | None = None) -> None:
    if self._lifeline < 0:
      return
    ready, _, _ = select.select([self._lifeline], [], [], timeout)
    if not ready:
      raise subprocess.TimeoutExpired("sandbox worker", timeout)
    os.close(self._lifeline)
    self._lifeline = -1


class _Worker:
  """One pre-started sandbox, waiting for its run."""

  def __init__(self, uid: int, zygote: _Zygote):
    self.root = _sandbox._make_run_directory()  # pylint: disable=protected-access
    self.work = os.path.join(self.root, "work")
    os.mkdir(self.work)
    self.new_root = os.path.join(self.root, "root")
    os.mkdir(self.new_root, 0o755)
    self.cgroups = _sandbox._make_cgroups(_sandbox.SandboxLimits())  # pylint: disable=protected-access
    self.limit_files = [os.path.join(d, n) for d in self.cgroups for n in _LIMIT_FILES
                        if os.path.exists(os.path.join(d, n))]
    self.report_read, report_write = os.pipe()
    os.set_blocking(self.report_read, False)
    self.status_read, status_write = os.pipe()
    go_read, self.go_write = os.pipe()
    stdin_read, self.stdin_write = os.pipe()
    lifeline_read, lifeline_write = os.pipe()
    channel_fd = os.open(os.path.join(self.root, "channel"),
                         os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    read_only, links = _sandbox._read_only_view()  # pylint: disable=protected-access
    spec = {
        "new_root": self.new_root, "work": self.work, "read_only": read_only,
        "symlinks": links, "cwd": self.root,
        "devices": [d for d in _sandbox._DEVICES if os.path.exists(d)],  # pylint: disable=protected-access
        "pinned": [], "argv": _sandbox._child_argv(self.work, _WORKER_FDS["report"]),  # pylint: disable=protected-access
        "env": {}, "rlimits": [], "uid": uid, "gid": pwd.getpwuid(uid).pw_gid,
        "wall_seconds": 1.0, "seccomp": None, "status_fd": _WORKER_FDS["status"],
        "go_fd": _WORKER_FDS["go"],
        "cgroup_procs": [os.path.join(d, "cgroup.procs") for d in self.cgroups]}
    self.process = None
    try:
      with open(os.path.join(self.root, "stdout"), "wb") as out, open(
          os.path.join(self.root, "stderr"), "wb") as err:
        fds = [stdin_read, out.fileno(), err.fileno(), report_write, channel_fd, status_write,
               go_read, lifeline_write]
        self.process = _Spawned(zygote.spawn(spec, fds), lifeline_read)
    finally:
      for fd in (report_write, channel_fd, status_write, go_read, stdin_read, lifeline_write):
        os.close(fd)
      if self.process is None:
        os.close(lifeline_read)
        for name in ("go_write", "stdin_write", "status_read", "report_read"):
          self.close_fd(name)
    if uid >= 0:
      os.chown(self.work, uid, uid)

  def close_fd(self, name: str) -> None:
    """Closes the descriptor held in attribute `name` once (a number closed twice could by then
    name another thread's file)."""
    fd = getattr(self, name)
    if fd >= 0:
      setattr(self, name, -1)
      os.close(fd)

  def discard(self) -> None:
    """Ends the worker (an empty message: it exits without running anything) and cleans up."""
    self.close_fd("go_write")
    self.close_fd("stdin_write")
    self.finish()

  def finish(self) -> None:
    """Waits for the worker's processes to end, then removes its cgroups and directory."""
    try:
      self.process.wait(timeout=_sandbox._HOST_GRACE_SECONDS)  # pylint: disable=protected-access
    except subprocess.TimeoutExpired:
      # Still running, so its group's number is still its own (once it has ended, the zygote
      # reaps it and the number may name another process group).
      _sandbox._kill_group(self.process)  # pylint: disable=protected-access
    for name in ("go_write", "stdin_write", "status_read", "report_read"):
      self.close_fd(name)
    _sandbox._remove_cgroups(self.cgroups)  # pylint: disable=protected-access
    _sandbox._make_removable(self.root)  # pylint: disable=protected-access
    shutil.rmtree(self.root, ignore_errors=True)


def _set_cgroup_limits(files: list[str], limits: _sandbox.SandboxLimits | None) -> None:
  """The run's memory and process limits in the worker's cgroup `files` (its child is already in
  the cgroups); none (`None`: a run with `cgroup="off"`) where the run has none."""
  if limits is None:
    values = {"memory.max": "max", "memory.swap.max": "max", "memory.limit_in_bytes": -1,
              "pids.max": "max"}
  else:
    values = {"memory.max": int(limits.memory_bytes), "memory.swap.max": 0,
              "memory.limit_in_bytes": int(limits.memory_bytes),
              "pids.max": int(limits.max_processes)}
  for path in files:
    _sandbox._write_text(path, str(values[os.path.basename(path)]))  # pylint: disable=protected-access


class SandboxPool:
  """Pre-started kernel sandboxes; `run_python` and `run_tests` as the module's functions.

  Args:
    size: workers kept started ahead (and runs that may go on at once).

  Raises:
    SandboxUnavailable: the kernel mode cannot run here (`run_python`'s message).
  """

  def __init__(self, size: int = 4):
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
      raise ValueError(f"SandboxPool.size must be an int >= 1, got {size!r}")
    _sandbox._require_kernel()  # pylint: disable=protected-access
    self.size = size
    self._uid = _sandbox._user_id(_sandbox.SandboxLimits())  # pylint: disable=protected-access
    self._zygote = _Zygote()
    self._ready: queue.Queue = queue.Queue()
    self._starter = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sandbox-start")
    self._cleaner = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sandbox-clean")
    self._lock = threading.Lock()
    self._closed = False
    self.runs = 0  # runs served (each by a worker of its own)
    self._busy = 0  # workers being started or torn down
    for _ in range(size):
      self._submit(self._starter, self._start_one)

  def _start_one(self) -> None:
    try:
      with self._lock:
        if self._closed:
          return
      try:
        self._ready.put(_Worker(self._uid, self._zygote))
      except BaseException as e:  # pylint: disable=broad-except
        self._ready.put(e)
    finally:
      self._done()

  def _done(self) -> None:
    with self._lock:
      self._busy -= 1

  def _submit(self, executor, fn) -> None:
    with self._lock:
      self._busy += 1
    executor.submit(fn)

  def _finish(self, worker: _Worker) -> None:
    try:
      worker.finish()
    finally:
      self._done()

  def wait_idle(self, timeout: float = 60.0) -> None:
    """Waits until every worker is started and every finished one torn down (a benchmark
    counts this work in the runs that caused it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
      with self._lock:
        if self._busy == 0:
          return
      time.sleep(0.005)

  def _take(self) -> _Worker:
    with self._lock:
      if self._closed:
        raise RuntimeError("the sandbox pool is closed")
    worker = self._ready.get()
    self._submit(self._starter, self._start_one)
    if isinstance(worker, BaseException):
      raise _sandbox.SandboxUnavailable(f"a pool worker could not start: {worker}")
    return worker

  def run_python(self, code: str, *, files: Mapping[str, str | bytes] | None = None,
                 pinned: Mapping[str, str | bytes] | None = None,
                 limits: _sandbox.SandboxLimits = _sandbox.SandboxLimits(), stdin: str = "",
                 channel: bool = False) -> _sandbox.SandboxResult:
    """As `sandbox.run_python`, in a pre-started worker (kernel mode only).

    Args:
      code: the Python source to run.
      files: extra files the code may read and change.
      pinned: files the code must not change, read-only, checked by sha256 after the run.
      limits: the run's limits; `isolation` must be "kernel" (the pool's workers are).
      stdin: text fed to the child's standard input (at most 60 KiB).
      channel: give the child a result channel (see `run_python`).

    Raises:
      ValueError: `limits.isolation` is not "kernel", stdin is too long, or a bad file name.
      SandboxUnavailable: as `run_python`.
    """
    if limits.isolation != "kernel":
      raise ValueError("SandboxPool runs kernel-mode sandboxes; use sandbox.run_python for "
                       f"isolation={limits.isolation!r}")
    _sandbox._require_kernel()  # pylint: disable=protected-access
    data = stdin.encode()
    if len(data) > _MAX_STDIN:
      raise ValueError(f"SandboxPool takes at most {_MAX_STDIN} bytes of stdin")
    rlimits = _sandbox._rlimit_values(limits)  # pylint: disable=protected-access
    seccomp = _sandbox._seccomp_program(limits)  # pylint: disable=protected-access
    pinned_bytes = {_sandbox._safe_name(k): (v.encode() if isinstance(v, str) else v)  # pylint: disable=protected-access
                    for k, v in (pinned or {}).items()}
    digests = {name: _sandbox.sha256_of(value) for name, value in pinned_bytes.items()}
    worker = self._take()
    with self._lock:
      self.runs += 1
    try:
      return self._run(worker, code, files or {}, pinned_bytes, digests, limits, rlimits,
                       seccomp, data, channel)
    finally:
      self._submit(self._cleaner, lambda: self._finish(worker))

  def _run(self, worker, code, files, pinned_bytes, digests, limits, rlimits, seccomp, stdin,
           channel):
    use_cgroup = limits.cgroup != "off" and bool(worker.cgroups)
    if limits.cgroup == "require" and not worker.cgroups:
      worker.discard()
      raise _sandbox.SandboxUnavailable("SandboxLimits.cgroup='require' but no cgroup could be "
                                        "made here")
    _sandbox._prepare_work(worker.work, code, files, pinned_bytes, self._uid, worker.root)  # pylint: disable=protected-access
    _set_cgroup_limits(worker.limit_files, limits if use_cgroup else None)
    env = _sandbox._child_env(worker.work, pinned_bytes)  # pylint: disable=protected-access
    if channel:
      env["SANDBOX_CHANNEL_FD"] = str(_WORKER_FDS["channel"])
    os.write(worker.stdin_write, stdin)
    worker.close_fd("stdin_write")
    message = marshal.dumps({
        "pinned": [os.path.join(worker.work, n) for n in pinned_bytes], "env": env,
        "rlimits": rlimits, "wall_seconds": float(limits.wall_seconds), "seccomp": seccomp})
    start = time.monotonic()
    os.write(worker.go_write, message)
    worker.close_fd("go_write")
    # Process 1 reports once the child has ended and every process of the run is dead; the
    # namespaces' teardown after that is the worker's `finish`, off this path.
    ready, _, _ = select.select([worker.status_read], [], [],
                                limits.wall_seconds + _sandbox._HOST_GRACE_SECONDS)  # pylint: disable=protected-access
    violations = []
    if not ready:
      _sandbox._kill_group(worker.process)  # pylint: disable=protected-access
    status = b""
    while not status.endswith(b"\n"):
      chunk = os.read(worker.status_read, 4096)
      if not chunk:
        break
      status += chunk
    wall = time.monotonic() - start
    kind, value, cpu_used = _sandbox._parse_status(status.decode(errors="replace").strip())  # pylint: disable=protected-access
    if kind == "timeout" or not ready:
      violations.append(_sandbox.Violation("timeout", f"over {limits.wall_seconds} s wall clock"))
      code_ = -signal.SIGKILL
    elif kind == "exit":
      code_ = int(value)
    elif kind == "signal":
      code_ = -int(value)
    elif kind == "error":
      raise _sandbox.SandboxUnavailable(f"the kernel sandbox could not be set up here: {value}")
    else:
      worker.process.wait()
      raise _sandbox.SandboxUnavailable(
          "the kernel sandbox ended without a status: " + _sandbox._read_capped(  # pylint: disable=protected-access
              os.path.join(worker.root, "stderr"), 2000).strip()[-500:])
    out_of_memory = _sandbox._cgroup_ran_out_of_memory(worker.cgroups)  # pylint: disable=protected-access
    isolation = _sandbox._mode_name(seccomp is not None, use_cgroup)  # pylint: disable=protected-access
    report_read = os.dup(worker.report_read)
    return _sandbox._collect(worker.root, worker.work, limits, digests, violations, code_, wall,  # pylint: disable=protected-access
                             isolation, out_of_memory, True, report_read, cpu_used)

  def run_tests(self, solution: str, tests: Mapping[str, str], *,
                limits: _sandbox.SandboxLimits = _sandbox.SandboxLimits()
                ) -> _verdict.TestVerdict:
    """As `sandbox.run_tests`, in a pre-started worker.

    Args:
      solution: the source of `solution.py`.
      tests: pinned test modules (`assert <expression> == <literal>` tests).
      limits: the run's limits (kernel mode).
    """
    return _verdict.run_tests(solution, tests, limits=limits, runner=self.run_python)

  def close(self) -> None:
    """Ends the waiting workers and waits for every teardown."""
    with self._lock:
      self._closed = True
    self._starter.shutdown(wait=True)
    self._cleaner.shutdown(wait=True)
    while not self._ready.empty():
      worker = self._ready.get()
      if isinstance(worker, _Worker):
        worker.discard()
    self._zygote.close()

  def __enter__(self) -> "SandboxPool":
    return self

  def __exit__(self, *exc) -> None:
    self.close()


@contextlib.contextmanager
def pooled(pool: SandboxPool):
  """Within the block, every kernel-mode `sandbox.run_python` (and so `run_tests`) of this
  process, in any thread, runs in `pool` (e.g. to run a test suite through it).

  Args:
    pool: the pool to route runs to.
  """
  _sandbox._ROUTES.append(pool)  # pylint: disable=protected-access
  try:
    yield pool
  finally:
    _sandbox._ROUTES.remove(pool)  # pylint: disable=protected-access
