"""Kernel isolation: what the audit hook cannot see is still contained.

Every program here starts its processes through `_posixsubprocess.fork_exec`, which raises no
audit event, so the hook never refuses them: shells, sleepers in new sessions, double forks and
a second interpreter without the hook. What stops them is the kernel: the pid, mount and network
namespaces, the unprivileged user and the cgroup. One test runs the same escape in the weaker
"hook" mode and shows it leaving a process behind, so these tests can fail.
"""

import dataclasses
import os
import random
import shutil
import tempfile
import threading
import time

import pytest

from rlagents import sandbox

pytestmark = pytest.mark.skipif(
    sandbox.kernel_isolation_problem() is not None,
    reason=f"kernel isolation needs {sandbox.kernel_isolation_problem()}")

LIMITS = sandbox.SandboxLimits(cpu_seconds=2, wall_seconds=6, memory_bytes=256 * 2**20,
                               max_processes=16, max_output_bytes=2**16)

# Starts `argv` past the audit hook; `session=True` puts it in a new session (setsid).
_SPAWN = """
import _posixsubprocess, os
def spawn(argv, session=False, wait=False):
  read, write = os.pipe()
  common = (argv, [os.fsencode(argv[0])], True, (), None, None, -1, -1, -1, -1, -1, -1, read,
            write, False, session)
  for tail in ((-1, None, None, None, -1, None, False), (-1, None, None, None, -1, None)):
    try:
      pid = _posixsubprocess.fork_exec(*common, *tail)
      break
    except TypeError:
      continue
  os.close(write)
  os.read(read, 64)  # exec happened (the pipe closes on exec)
  if wait:
    os.waitpid(pid, 0)
  return pid
def shell(command):
  return spawn(['/bin/sh', '-c', command], wait=True)
"""


@pytest.fixture(autouse=True)
def private_tempdir(monkeypatch, tmp_path_factory):
  tmp_path_factory.getbasetemp()  # pytest's own temp dirs stay where they are
  private = tempfile.mkdtemp(prefix="rlagents_isolation_test_")
  os.chmod(private, 0o711)
  monkeypatch.setattr(tempfile, "tempdir", private)
  monkeypatch.setenv("TMPDIR", private)  # run directories follow TMPDIR where it is set
  yield private
  assert os.listdir(private) == [], "a sandbox directory was left behind"
  shutil.rmtree(private, ignore_errors=True)


@pytest.fixture
def canary(tmp_path):
  path = tmp_path / "canary.txt"
  path.write_text("untouched")
  os.chmod(tmp_path, 0o777)
  os.chmod(path, 0o666)
  yield path
  assert path.read_text() == "untouched"
  assert sorted(os.listdir(tmp_path)) == ["canary.txt"]


def _marker():
  """A sleep duration no other process on the host uses: it names our sleepers in /proc."""
  return f"{300 + random.randrange(10**6) / 10**3:.3f}"


def _host_pids_with(marker):
  pids = []
  for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
      with open(f"/proc/{pid}/cmdline", "rb") as f:
        if marker.encode() in f.read():
          pids.append(int(pid))
    except OSError:
      pass
  return pids


def _run(code, **kwargs):
  return sandbox.run_python(_SPAWN + code, limits=kwargs.pop("limits", LIMITS), **kwargs)


def test_the_run_says_which_mode_ran():
  result = _run("print('hi')")
  assert result.ok, result
  assert result.isolation == sandbox.isolation_mode(LIMITS)
  assert result.isolation.startswith("kernel")
  assert result.network_isolated


def test_the_code_meets_a_fresh_interpreter():
  # The child runs in process 1's forked interpreter: none of process 1's state may show, and a
  # printed stack (which reads process 1's source) is no violation.
  result = _run("import sys, traceback\n"
                "print('ctypes' in sys.modules, sys.flags.isolated, sys.flags.no_site, __name__)\n"
                "traceback.print_stack()\n"
                "raise SystemExit(7)\n")
  assert result.stdout == "False 1 1 __main__\n", result
  assert result.returncode == 7 and not result.violations, result
  assert 'File "main.py", line' in result.stderr and 'print_stack' in result.stderr


def test_new_session_and_double_forked_processes_do_not_survive_the_run():
  session, double = _marker(), _marker()
  code = (f"spawn(['/bin/sleep', '{session}'], session=True)\n"
          f"shell('(/bin/sleep {double} &) ; exit 0')\n"
          "print('started', flush=True)\n")
  result = _run(code)
  assert result.ok and result.stdout == "started\n", result
  # By the time run_python returns, process 1 of the namespace and everything in it is gone.
  assert _host_pids_with(session) == [] and _host_pids_with(double) == []


def test_the_hook_mode_leaves_such_a_process_behind():
  """The weaker mode, as documented: a new-session process outlives the run there."""
  marker = _marker()
  limits = sandbox.SandboxLimits(cpu_seconds=2, wall_seconds=6, memory_bytes=256 * 2**20,
                                 max_processes=16, isolation="hook")
  result = _run(f"spawn(['/bin/sleep', '{marker}'], session=True)\n", limits=limits)
  assert result.isolation == "hook"
  deadline = time.monotonic() + 2  # its exec may still be finishing on a busy machine
  while not (survivors := _host_pids_with(marker)) and time.monotonic() < deadline:
    time.sleep(0.05)
  for pid in survivors:
    os.kill(pid, 9)
  assert survivors, ("expected the weaker mode to leak the sleeper", result)


def test_no_host_file_is_reachable_by_any_interface(canary):
  code = (f"shell('cat {canary}; echo tampered >> {canary}; echo new > {canary.parent}/new.txt;"
          " cat /etc/passwd; ls /; touch /usr/x /x; echo shell-done')\n"
          # A second interpreter, started past the hook, has no audit hook at all.
          "import sys\n"
          f"spawn([sys.executable, '-I', '-c', 'print(open(\"/etc/passwd\").read())'],"
          " wait=True)\n"
          f"spawn([sys.executable, '-I', '-c', 'open(\"{canary}\", \"a\").write(\"x\")'],"
          " wait=True)\n")
  result = _run(code)
  assert "shell-done" in result.stdout, result
  assert "untouched" not in result.stdout
  assert "root:" not in result.stdout
  listing = set(result.stdout.split())
  assert not listing & {"etc", "home", "var", "boot", "opt"}, result.stdout
  assert {"usr", "proc", "dev"} <= listing
  for text in ("No such file", "Read-only file system"):
    assert text in result.stderr, result.stderr
  assert "FileNotFoundError" in result.stderr  # the hook-free interpreter could not open it


def test_a_pinned_file_is_read_only_to_the_kernel_too():
  pinned = {"test_add.py": "def test_add():\n  assert 1 == 1\n"}
  result = _run("shell('echo x > test_add.py; rm -f test_add.py; mv test_add.py x.py;"
                " chmod 666 test_add.py; cat test_add.py')\n", pinned=pinned)
  assert "assert 1 == 1" in result.stdout
  assert "pinned_file" not in result.violation_kinds  # refused by the kernel: nothing changed
  assert "Read-only file system" in result.stderr or "busy" in result.stderr


def test_the_hosts_proc_is_not_visible():
  result = _run("shell('ls /proc; cat /proc/[0-9]*/cmdline; echo; cat /proc/1/cmdline')\n")
  pids = [int(p) for p in result.stdout.split() if p.isdigit()]
  assert pids and max(pids) < 100 and len(pids) < 10, result.stdout
  assert "pytest" not in result.stdout
  assert "_init.py" not in result.stdout  # process 1 (root) is hidden from the run's user


def test_the_environment_is_minimal(monkeypatch):
  monkeypatch.setenv("RLAGENTS_HOST_SECRET", "s3cret-value")
  result = _run("import os\nprint(sorted(os.environ), flush=True)\nshell('env')\n")
  allowed = {"PATH", "LANG", "HOME", "TMPDIR", "PYTHONHASHSEED", "PWD", "SHLVL", "_"}
  names = {line.split("=")[0] for line in result.stdout.splitlines()[1:]}
  assert names <= allowed, names
  assert "s3cret" not in result.stdout
  assert eval(result.stdout.splitlines()[0]) == ["HOME", "LANG", "PATH", "PYTHONHASHSEED",
                                                 "TMPDIR"]


def test_a_runs_directory_and_processes_are_invisible_to_a_concurrent_run(private_tempdir):
  marker = _marker()
  first = {}

  def run_first():
    first["result"] = _run(f"open('secret.txt', 'w').write('first run')\n"
                           f"spawn(['/bin/sleep', '{marker}'], session=True)\n"
                           "import time\ntime.sleep(3)\n")

  thread = threading.Thread(target=run_first)
  thread.start()
  deadline = time.monotonic() + 5
  directory = None
  while directory is None and time.monotonic() < deadline:
    names = [n for n in os.listdir(private_tempdir) if n.startswith("rlagents_sandbox_")]
    if names and _host_pids_with(marker):
      directory = os.path.join(private_tempdir, names[0])
    time.sleep(0.05)
  assert directory is not None, "the first run did not start"
  second = _run(f"shell('cat {directory}/work/secret.txt; ls {private_tempdir};"
                " cat /proc/[0-9]*/cmdline')\n")
  thread.join()
  assert "first run" not in second.stdout
  assert marker not in second.stdout
  assert "No such file" in second.stderr
  assert first["result"].files == {"secret.txt": b"first run"}
  assert _host_pids_with(marker) == []


def test_the_network_is_unreachable_past_the_hook():
  result = _run("shell('echo x > /dev/tcp/127.0.0.1/80 || echo refused')\n"
                "import sys\n"
                "spawn([sys.executable, '-I', '-c', 'import socket; socket.create_connection("
                "(\"127.0.0.1\", 80), timeout=1)'], wait=True)\n")
  assert "Network is unreachable" in result.stderr or "Errno 101" in result.stderr, result


@pytest.mark.skipif(not sandbox.isolation_mode(LIMITS).endswith("+cgroup"),
                    reason="this machine gives the sandbox no cgroup")
def test_memory_spread_over_processes_is_stopped_by_the_cgroup():
  # Each process stays under its own RLIMIT_AS; together they are far over the run's memory.
  limits = sandbox.SandboxLimits(cpu_seconds=2, wall_seconds=6, memory_bytes=96 * 2**20,
                                 max_processes=16)
  hog = "x = bytearray(60 * 2**20); import time; time.sleep(3)"
  result = _run("import sys\n"
                f"pids = [spawn([sys.executable, '-I', '-S', '-c', {hog!r}]) for _ in range(6)]\n"
                "import os\nfor pid in pids:\n  os.waitpid(pid, 0)\n", limits=limits)
  assert "memory" in result.violation_kinds, result


def test_a_run_without_a_cgroup_has_no_cgroup_limit():
  # cgroup="off": only the per-process limits hold (a pool's worker has a cgroup ahead of its
  # run, which must then limit nothing).
  limits = sandbox.SandboxLimits(cpu_seconds=2, wall_seconds=6, memory_bytes=96 * 2**20,
                                 max_processes=16, cgroup="off")
  hog = "x = bytearray(60 * 2**20); import time; time.sleep(0.5)"
  result = _run("import sys\n"
                f"pids = [spawn([sys.executable, '-I', '-S', '-c', {hog!r}]) for _ in range(3)]\n"
                "import os\nprint([os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in pids])\n",
                limits=limits)
  assert result.ok and result.stdout == "[0, 0, 0]\n", result
  assert "cgroup" not in result.isolation


def test_kernel_mode_that_cannot_run_here_is_a_clear_error(monkeypatch):
  monkeypatch.setattr(sandbox._sandbox, "_KERNEL_PROBLEM", ["root, to create namespaces"])
  with pytest.raises(sandbox.SandboxUnavailable, match="isolation='kernel' needs root.*"
                     "isolation='hook'"):
    sandbox.run_python("pass")
  with pytest.raises(sandbox.SandboxUnavailable, match="needs root"):
    sandbox.isolation_mode()
  weaker = sandbox.SandboxLimits(isolation="hook")
  assert sandbox.isolation_mode(weaker) == "hook"
  assert sandbox.run_python("print(1)", limits=weaker).isolation == "hook"


@pytest.mark.parametrize("kwargs, message", [
    ({"isolation": "none"}, "isolation must be one of"),
    ({"network_namespace": "off"}, "network_namespace='off' needs isolation='hook'"),
    ({"drop_to_user": ""}, "drop_to_user='' needs isolation='hook'"),
    ({"cgroup": "maybe"}, "cgroup must be"),
    ({"cgroup": "require", "isolation": "hook"}, "cgroup='require' needs isolation='kernel'"),
    ({"seccomp": "always"}, "seccomp must be"),
    ({"seccomp": "require", "isolation": "hook"}, "seccomp='require' needs isolation='kernel'")])
def test_isolation_settings_are_checked(kwargs, message):
  with pytest.raises(ValueError, match=message):
    sandbox.SandboxLimits(**kwargs)


def test_system_v_ipc_is_private_to_the_run():
  # A message queue made by one run (past the hook: `ipcmk` from util-linux) is not there for
  # the next, nor on the host.
  first = _run("shell('ipcmk -Q; ipcs -q')\n")
  assert "Message queue id" in first.stdout, first
  second = _run("shell('ipcs -q')\n")
  assert "0x" not in second.stdout.split("Message Queues")[-1], second.stdout


def test_links_left_in_the_directory_are_not_followed_by_the_host(canary):
  result = _run(f"shell('ln -s {canary} link.txt; ln -s /etc/passwd passwd.txt;"
                f" ln {canary} hard.txt; mkdir d; ln -s / d/root; echo kept > own.txt')\n")
  assert result.files == {"own.txt": b"kept\n"}, result.files


def test_many_files_left_are_cut_and_reported():
  result = _run("for i in range(300):\n  open(f'f{i:03d}', 'w').write('x')\n")
  assert len(result.files) == 256
  assert "output" in result.violation_kinds


_SYSCALL_PROBE = ("import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
                  # keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER_KEYRING, create=1)
                  "r = libc.syscall(250, 0, -4, 1); print('keyctl', r, ctypes.get_errno())")


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the probe uses x86_64's numbers")
def test_the_seccomp_filter_refuses_user_namespaces_and_keyrings():
  code = ("import sys, threading\n"
          "t = threading.Thread(target=lambda: print('thread ok', flush=True))\n"
          "t.start()\nt.join()\n"
          "shell('unshare --user true; echo userns=$?')\n"
          f"spawn([sys.executable, '-I', '-c', {_SYSCALL_PROBE!r}], wait=True)\n")
  result = _run(code)
  assert "+seccomp" in result.isolation
  assert result.stdout == "thread ok\nuserns=1\nkeyctl -1 1\n", result  # EPERM for both
  # Without the filter both work, so the test above can fail.
  open_ = _run(code, limits=dataclasses.replace(LIMITS, seccomp="off"))
  assert "+seccomp" not in open_.isolation
  assert "userns=0" in open_.stdout and "keyctl -1" not in open_.stdout, open_
