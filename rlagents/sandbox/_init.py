"""The first process of a sandbox's namespaces (standard library only; runs as root).

    unshare --pid --mount --net --ipc --uts --fork --kill-child -- python -I -S _init.py SPEC

(SPEC: the run's settings, `marshal`led and hex-encoded. The script imports only what a run
needs, and `_signal` rather than `signal`, to keep the cost of every run's start low.)

`unshare` has made fresh pid, mount, network, IPC and UTS namespaces; this script is process 1
of the pid namespace. It builds the run's filesystem and then stays as the namespace's init:

1. A private tmpfs becomes the new root. Into it go read-only bind mounts of what the
   interpreter needs (its prefixes, `/usr`, the bootstrap file), the host's `/bin`, `/lib`, ...
   symlinks, four device nodes (`null`, `zero`, `random`, `urandom`), a fresh `/proc` of the new
   pid namespace (other users' processes hidden), and the run directory, the only writable place.
   Each pinned file is bind-mounted read-only onto itself, so the kernel refuses writes, renames
   and removals of it. `pivot_root` then detaches the host's root: nothing else of the host is
   reachable from the namespace, by any interface.
2. It forks the child, which joins the run's cgroups (memory, pids) when the host made them
   (process 1 stays out, so their OOM killer cannot end the run without a status), reads its
   settings from process 1 on a pipe, sets the resource limits, drops to the unprivileged user
   (groups cleared, `PR_SET_NO_NEW_PRIVS`, so no set-uid program or file capability can raise
   it again), installs the seccomp filter of
   `_seccomp.py` where the host gave one, takes the run's environment and runs the bootstrap in
   the interpreter it already is (started with the child's flags, `-I -S -B`), which saves a
   second interpreter start on every run.
3. It reaps every process of the namespace until the child exits or the wall clock runs out, then
   kills whatever is left (double-forked or new-session processes included: they are all in this
   pid namespace, and the kernel kills them all when process 1 exits) and writes the child's
   status on its status channel, which the child never holds.

A pre-started worker of a `SandboxPool` (`_pool.py`) is given `go_fd` instead of its run: it
builds the root and forks the child (which joins the cgroups and waits for its settings), then
waits for the run's settings (pinned files, environment, limits, seccomp filter; the host has
set the cgroups' limits), pins the files and hands the child its part. A pool's workers are not
started by `unshare`: the pool starts this script once as its zygote (`_init.py zygote FD`),
which receives each worker's spec and descriptors on a socket and forks an intermediate process
that makes the same five namespaces (`unshare(2)`) and forks their process 1; that process drops
the zygote's modules and descriptors (the worker's land on fixed numbers, `WORKER_FDS`) and goes
on as above. A fork costs about a millisecond where a fresh interpreter costs ~20 ms of CPU. The
zygote compiles the bootstrap and the host's test driver once, for every worker. It sees worker
specs only (paths, the read-only view), never a run's code, files or settings; the runs of one
pool share its interpreter's hash seed.

Any failure to set up is written on the status channel as `error <what>` and ends the run before
the child starts; the host raises `SandboxUnavailable` with it.
"""

import _signal as signal
import ctypes
import marshal
import os
import resource
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
# pivot_root has no libc wrapper; its number per architecture (chroot where unknown).
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}
_LIBC = ctypes.CDLL(None, use_errno=True)


class _Timeout(Exception):
  pass


def _check(result, what):
  if result != 0:
    errno = ctypes.get_errno()
    raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source, target, fstype, flags, data=None):
  _check(_LIBC.mount(source and source.encode(), target.encode(), fstype and fstype.encode(),
                     ctypes.c_ulong(flags), data and data.encode()),
         f"mount {source or ''} on {target}")


def _bind(source, target, *, read_only, extra=MS_NOSUID | MS_NODEV):
  if os.path.isdir(source):
    os.makedirs(target, mode=0o755, exist_ok=True)
  else:
    os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
    if not os.path.exists(target):
      os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o444))
  _mount(source, target, None, MS_BIND | MS_REC)
  _mount(None, target, None, MS_REMOUNT | MS_BIND | extra | (MS_RDONLY if read_only else 0))


def _build_root(spec):
  new = spec["new_root"]
  _mount(None, "/", None, MS_REC | MS_PRIVATE)
  _mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
  for path in spec["read_only"]:
    _bind(path, new + path, read_only=True)
  for name, target in spec["symlinks"].items():
    os.symlink(target, new + name)
  for device in spec["devices"]:
    _bind(device, new + device, read_only=False, extra=MS_NOSUID | MS_NOEXEC)
  work = spec["work"]
  _bind(work, new + work, read_only=False)
  for path in spec["pinned"]:
    _bind(path, new + path, read_only=True)
  os.makedirs(new + "/proc", mode=0o555)
  _mount("proc", new + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2")
  os.chdir(new)
  number = SYS_PIVOT_ROOT.get(os.uname().machine)
  if number is not None:
    # The old root is stacked under the new one, then detached: the host's tree is gone.
    _check(_LIBC.syscall(ctypes.c_long(number), b".", b"."), "pivot_root")
    _check(_LIBC.umount2(b".", MNT_DETACH), "detach the host's root")
  else:
    os.chroot(".")
  os.chdir("/")
  _mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _fork_child(spec, status_fd, cgroup_fds):
  """Forks the run's child, which joins the run's cgroups and then waits for its settings (the
  resource limits, the seccomp filter, the environment) on a pipe; returns (its pid, the pipe's
  writing end). A pool's worker forks it ahead, while it waits for its run, so neither the fork
  nor the cgroup join is on the run's path; an empty message ends the child unstarted."""
  settings_read, settings_write = os.pipe()
  pid = os.fork()
  if pid:
    os.close(settings_read)
    return pid, settings_write
  try:
    os.close(settings_write)
    os.close(status_fd)
    if "go_fd" in spec:
      os.close(spec["go_fd"])
    for fd in cgroup_fds:  # Everything the child starts is counted there too.
      os.write(fd, b"0")
      os.close(fd)
    message = _read_to_end(settings_read)
    os.close(settings_read)
    if not message:
      os._exit(0)
    spec.update(marshal.loads(message))
    os.chdir(spec["work"])
    for number, soft, hard in spec["rlimits"]:
      resource.setrlimit(number, (soft, hard))
    uid, gid = spec["uid"], spec["gid"]
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    _check(_LIBC.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    if os.getuid() != uid or os.geteuid() != uid:
      os._exit(125)
    if spec["seccomp"]:
      _install_seccomp(spec["seccomp"])
    os.environ.clear()
    os.environ.update(spec["env"])
  except BaseException as e:  # pylint: disable=broad-except
    os.write(2, f"sandbox init: {e}\n".encode())
    os._exit(126)
  os._exit(_run_bootstrap(spec["argv"][4:]))


def _read_to_end(fd):
  chunks = []
  while True:
    chunk = os.read(fd, 65536)
    if not chunk:
      return b"".join(chunks)
    chunks.append(chunk)


class _Program(ctypes.Structure):
  _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _install_seccomp(program):
  """Installs the `_seccomp.py` filter (a `struct sock_filter` array) on this process."""
  buffer = ctypes.create_string_buffer(program, len(program))
  fprog = _Program(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
  _check(_LIBC.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0),
         "prctl(PR_SET_SECCOMP)")


# Compiled ahead by a pool's zygote, as compiling in each forked child cost ~2 ms a run (the
# parser's allocations fault in copied pages): the bootstrap's code by path, and the host's
# scripts (the test driver) by their bytes as the bootstrap reads its `main.py`.
_COMPILED = {}
_SCRIPTS = {}


def _compile(path):
  with open(path, "rb") as f:
    return compile(f.read(), path, "exec")


def _run_bootstrap(argv):
  """Runs the bootstrap in this (forked, unprivileged) interpreter, as `python argv` would.

  The interpreter was started with the child's flags (-I -S -B) and hash seed, so starting a
  second one for the child would only add its start-up time to every run. Returns the exit
  status the interpreter would have given.
  """
  sys.argv = list(argv)
  # The code must meet what it would in a fresh interpreter: ctypes not loaded (importing it
  # opens a library, which the bootstrap's audit hook refuses).
  for name in [n for n in sys.modules if n == "ctypes" or n.startswith("ctypes.")]:
    del sys.modules[name]
  status = 0
  try:
    code = _COMPILED.get(argv[0])
    if code is None:
      code = _compile(argv[0])
    namespace = {"__name__": "__sandbox_bootstrap__", "__file__": argv[0],
                 "__builtins__": __builtins__, "__sandbox_compiled__": _SCRIPTS}
    exec(code, namespace)  # pylint: disable=exec-used
  except SystemExit as e:
    if e.code is None:
      status = 0
    elif isinstance(e.code, int):
      status = e.code & 0xFF
    else:
      print(e.code, file=sys.stderr)
      status = 1
  except BaseException as e:  # pylint: disable=broad-except
    # From the bootstrap's frame on, as the interpreter would print it (this file's frame would
    # have its source looked up, outside what the run may read).
    e = e.with_traceback(e.__traceback__.tb_next)
    sys.excepthook(type(e), e, e.__traceback__)
    status = 1
  # What the interpreter does on its way out: wait for threads, run atexit, flush.
  try:
    if "threading" in sys.modules:
      sys.modules["threading"]._shutdown()  # pylint: disable=protected-access
    import atexit  # pylint: disable=g-import-not-at-top
    atexit._run_exitfuncs()  # pylint: disable=protected-access
  except BaseException:  # pylint: disable=broad-except
    pass
  for stream in (sys.stdout, sys.stderr):
    try:
      stream.flush()
    except BaseException:  # pylint: disable=broad-except
      status = status or 120
  return status


def _supervise(child, wall_seconds):
  """Reaps until `child` exits; returns its status line: `exit CODE CPU` or `signal NUMBER CPU`
  (CPU the child's seconds of CPU time), or `timeout`."""

  def alarm(signum, frame):
    del signum, frame
    raise _Timeout()

  signal.signal(signal.SIGALRM, alarm)
  signal.setitimer(signal.ITIMER_REAL, wall_seconds)
  try:
    while True:
      pid, status, usage = os.wait4(-1, 0)
      if pid == child:
        break
  except _Timeout:
    return "timeout"
  finally:
    signal.setitimer(signal.ITIMER_REAL, 0)
  # The child's CPU time tells a CPU-limit kill from one by the kernel's out-of-memory killer.
  cpu = usage.ru_utime + usage.ru_stime
  if os.WIFSIGNALED(status):
    return f"signal {os.WTERMSIG(status)} {cpu:.3f}"
  return f"exit {os.WEXITSTATUS(status)} {cpu:.3f}"


def _kill_all():
  """Kills every other process of the namespace and reaps them."""
  try:
    os.kill(-1, signal.SIGKILL)
  except ProcessLookupError:
    pass
  while True:
    try:
      os.wait()
    except ChildProcessError:
      return


def _wait_for_run(spec):
  """A pre-started worker (`_pool.py`): waits, its root built and its child forked, for the
  run's settings on `go_fd`, then pins the run's files; ends without running anything on an
  empty message (its child then reads an empty one too)."""
  message = _read_to_end(spec["go_fd"])
  os.close(spec["go_fd"])
  if not message:
    os._exit(0)
  spec.update(marshal.loads(message))
  for path in spec["pinned"]:
    _bind(path, path, read_only=True)


def _main(spec):
  status_fd = spec["status_fd"]
  os.set_inheritable(status_fd, False)
  try:
    if os.getpid() != 1:
      raise OSError("the pid namespace is not in effect (this is not process 1)")
    os.umask(0o022)
    # Opened now, while the host's /sys is still in view; the child joins them. Process 1 stays
    # out, so the cgroup's OOM killer can never end the run without its status.
    cgroup_fds = [os.open(path, os.O_WRONLY) for path in spec["cgroup_procs"]]
    _build_root(spec)
    child, settings = _fork_child(spec, status_fd, cgroup_fds)
    for fd in cgroup_fds:
      os.close(fd)
    if "go_fd" in spec:
      _wait_for_run(spec)
    os.write(settings, marshal.dumps(
        {"rlimits": spec["rlimits"], "seccomp": spec["seccomp"], "env": spec["env"]}))
    os.close(settings)
  except OSError as e:
    os.write(status_fd, f"error {e}\n".encode())
    os._exit(1)
  line = _supervise(child, spec["wall_seconds"])
  _kill_all()
  os.write(status_fd, (line + "\n").encode())
  os._exit(0)


# The zygote (`_pool.py`): a process started once per pool, which makes every worker by `fork`
# instead of `unshare` + a fresh interpreter (whose start-up was most of a worker's cost).
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
PR_SET_PDEATHSIG = 1
SOL_SOCKET, SCM_RIGHTS = 1, 1
# A worker's descriptors inside its namespaces, whatever their numbers on the host.
WORKER_FDS = {"stdin": 0, "stdout": 1, "stderr": 2, "report": 3, "channel": 4, "status": 5,
              "go": 6}
_LIFELINE = 7  # held by the intermediate process only: its end tells the host the worker ended
_FIRST_FREE = 8


def _receive(sock, ancillary_size):
  """One command: (the spec, its descriptors), or None when the host has closed the socket."""
  data, ancillary, _, _ = sock.recvmsg(1 << 20, ancillary_size)
  if not data:
    return None
  fds = []
  for level, kind, payload in ancillary:
    if level == SOL_SOCKET and kind == SCM_RIGHTS:
      fds += [int.from_bytes(payload[i:i + 4], sys.byteorder)
              for i in range(0, len(payload) - len(payload) % 4, 4)]
  return marshal.loads(data), fds


def _place(fds):
  """Moves the received descriptors to their fixed numbers and closes every other one."""
  high = [_LIBC.fcntl(fd, 1030, 256) for fd in fds]  # F_DUPFD_CLOEXEC above any fixed number
  if min(high) < 0:
    raise OSError(ctypes.get_errno(), "fcntl(F_DUPFD_CLOEXEC)")
  names = list(WORKER_FDS) + ["lifeline"]
  for number, fd in zip([WORKER_FDS.get(n, _LIFELINE) for n in names], high):
    os.dup2(fd, number, inheritable=True)  # as `pass_fds` leaves them
  os.closerange(_FIRST_FREE, 1 << 16)


def _spawn(spec, fds, modules):
  """In the zygote's child: new pid, mount, network, IPC and UTS namespaces, then process 1 of
  them runs a worker as `_main` would in a fresh interpreter (which `unshare --fork` started)."""
  placed = False
  try:
    os.setsid()
    _place(fds)
    placed = True
    os.chdir(spec["cwd"])
    _check(_LIBC.unshare(CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS),
           "unshare")
    first = os.fork()
  except BaseException as e:  # pylint: disable=broad-except
    try:
      if placed:  # else the host reads the status pipe's end: a worker that ended unstarted
        os.write(WORKER_FDS["status"], f"error {e}\n".encode())
    finally:
      os._exit(1)
  if first == 0:
    os.close(_LIFELINE)
    _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # as `unshare --kill-child`
    # What a fresh interpreter running this file would hold, and nothing of the zygote's.
    for name in [n for n in sys.modules if n not in modules]:
      del sys.modules[name]
    _main(spec)
  for fd in range(_LIFELINE):  # the worker's pipes are its process 1's alone
    os.close(fd)
  _, status = os.waitpid(first, 0)
  os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def _zygote(sock_fd, scripts):
  """Serves the pool: each command is a worker's spec and descriptors; answers the pid of the
  worker's process group (its intermediate process) or `error <what>`; ends when the host does.
  `scripts`: files a run may be given as its `main.py`, compiled here once."""
  bootstrap = os.path.join(os.path.dirname(os.path.realpath(__file__)), "_bootstrap.py")
  _COMPILED[bootstrap] = _compile(bootstrap)
  for path in scripts:
    with open(path, "rb") as f:
      source = f.read()
    _SCRIPTS[source] = compile(source, "main.py", "exec")
  modules = set(sys.modules)
  import _socket  # pylint: disable=g-import-not-at-top
  sock = _socket.socket(fileno=sock_fd)
  signal.signal(signal.SIGCHLD, signal.SIG_DFL)
  while True:
    while True:  # reap the intermediate processes that have ended
      try:
        if os.waitpid(-1, os.WNOHANG)[0] == 0:
          break
      except ChildProcessError:
        break
    command = _receive(sock, _socket.CMSG_SPACE(4 * 16))
    if command is None:
      os._exit(0)
    spec, fds = command
    try:
      if len(fds) != len(WORKER_FDS) + 1:
        raise OSError(f"{len(fds)} descriptors, {len(WORKER_FDS) + 1} expected")
      pid = os.fork()
    except OSError as e:
      for fd in fds:
        os.close(fd)
      sock.send(f"error {e}".encode())
      continue
    if pid == 0:
      sock.close()
      _spawn(spec, fds, modules)
    for fd in fds:
      os.close(fd)
    sock.send(str(pid).encode())


if sys.argv[1] == "zygote":
  _zygote(int(sys.argv[2]), sys.argv[3:])
else:
  _main(marshal.loads(bytes.fromhex(sys.argv[1])))
