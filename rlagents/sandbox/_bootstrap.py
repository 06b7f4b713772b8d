"""Runs inside the sandboxed child before the agent's code (standard library only).

    python -I -S _bootstrap.py ROOT REPORT_FD SCRIPT SITE_DIRS

The interpreter starts without `site` (`-S`): the host's site directories (`SITE_DIRS`, joined
by `os.pathsep`) are put on `sys.path` here, without running their `.pth` hooks, which would
import host-only code (an editable install's finder) at a cost of tens of milliseconds a run.

Installs an audit hook that refuses, and reports on `REPORT_FD`, every socket, every new process
and every file access outside `ROOT` (reads of the interpreter's own files excepted), then runs
`SCRIPT` as `__main__`. An audit hook is a tripwire, not a wall: code that reaches native calls
(ctypes is refused for that reason) could step past it, which is why the kernel limits, the
unprivileged user and the network namespace are applied too.
"""

import os
import sys


def _main():
  root, report_fd, script = sys.argv[1], int(sys.argv[2]), sys.argv[3]
  site_dirs = [p for p in sys.argv[4].split(os.pathsep) if p]
  sys.path.extend(site_dirs)
  root = os.path.realpath(root)
  readable = tuple({os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                                  sys.base_exec_prefix, *site_dirs)}) + (
      # This file and the kernel mode's process 1 (whose frame is under the code's in that
      # mode): a printed stack reads their source.
      os.path.realpath(__file__), os.path.join(os.path.dirname(os.path.realpath(__file__)),
                                               "_init.py"))
  pinned = frozenset(os.path.realpath(os.path.join(root, p))
                     for p in os.environ.pop("SANDBOX_PINNED", "").split("\0") if p)
  reports = [0]

  def report(kind, detail):
    reports[0] += 1
    try:
      os.write(report_fd, f"{kind}\t{detail}\n".encode(errors="replace")[:512])
    except OSError:
      os._exit(97)  # The report channel was closed: stop rather than run unreported.
    if reports[0] > 64:
      os._exit(98)
    raise PermissionError(f"sandbox: {kind} refused: {detail}")

  def inside(path, roots):
    return any(path == r or path.startswith(r + os.sep) for r in roots)

  def resolve(path):
    if isinstance(path, int):
      return None
    if isinstance(path, bytes):
      path = os.fsdecode(path)
    return os.path.realpath(os.path.join(os.getcwd(), str(path)))

  writing_events = {"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown",
                    "os.symlink", "os.link", "os.truncate", "os.utime", "shutil.rmtree"}
  process_events = {"os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec",
                    "os.system", "os.kill", "os.killpg", "subprocess.Popen", "pty.spawn",
                    "os.startfile"}

  def hook(event, args):
    if event.startswith("socket.") and event != "socket.getdefaulttimeout":
      report("network", event)
    elif event in process_events:
      report("process", event)
    elif event.startswith("ctypes."):
      report("native", event)
    elif event == "open":
      path, mode, flags = args
      target = resolve(path)
      if target is None:
        return
      writes = (mode is not None and any(c in str(mode) for c in "wax+")) or (
          flags is not None and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC))
      if writes and target in pinned:
        report("pinned_file", f"write {target}")
      if writes and not inside(target, (root,)):
        report("filesystem", f"write {target}")
      if not writes and not inside(target, (root,) + readable):
        report("filesystem", f"read {target}")
    elif event in writing_events:
      targets = [resolve(a) for a in args[:2] if isinstance(a, (str, bytes, os.PathLike))]
      for target in targets:
        if target in pinned:
          report("pinned_file", f"{event} {target}")
        if not inside(target, (root,)):
          report("filesystem", f"{event} {target}")
    elif event in ("os.listdir", "os.scandir", "os.chdir"):
      target = resolve(args[0] if args and args[0] is not None else ".")
      if target is not None and not inside(target, (root,) + readable):
        report("filesystem", f"{event} {target}")

  os.chdir(root)
  sys.path[:0] = [root]
  with open(script, "rb") as f:
    source = f.read()
  # A pool's zygote compiled the host's own scripts (the test driver) once; a run whose script
  # is byte for byte one of them skips the parser (~2.5 ms a run).
  code = globals().get("__sandbox_compiled__", {}).get(source)
  sys.addaudithook(hook)
  sys.argv = [script]
  # As `runpy.run_path` would, without importing it (and `typing`, `re`, ...) on every run.
  main = type(sys)("__main__")
  main.__file__ = script
  main.__builtins__ = __builtins__
  sys.modules["__main__"] = main
  exec(code or compile(source, script, "exec"), vars(main))  # pylint: disable=exec-used


_main()
