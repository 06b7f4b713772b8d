"""The sandbox pool: each run gets a fresh, fully limited sandbox; results equal fresh runs'.

(Every other sandbox test also runs through a pool: see conftest.py.)
"""

import concurrent.futures
import os
import shutil
import tempfile

import pytest

from rlagents import sandbox

pytestmark = pytest.mark.skipif(
    sandbox.kernel_isolation_problem() is not None,
    reason=f"the pool needs kernel isolation: {sandbox.kernel_isolation_problem()}")

LIMITS = sandbox.SandboxLimits(cpu_seconds=1, wall_seconds=3, memory_bytes=128 * 2**20,
                               max_processes=16, max_open_files=32, max_output_bytes=2**14)
TESTS = {"test_solution.py": "from solution import f\n\ndef test_a():\n  assert f(2) == 3\n"}


@pytest.fixture
def pool(monkeypatch):
  private = tempfile.mkdtemp(prefix="rlagents_pool_test_")
  os.chmod(private, 0o711)
  monkeypatch.setattr(tempfile, "tempdir", private)
  monkeypatch.setenv("TMPDIR", private)  # run directories follow TMPDIR where it is set
  try:
    with sandbox.SandboxPool(size=2) as made:
      yield made
    assert os.listdir(private) == [], "a worker's directory was left behind"
  finally:
    shutil.rmtree(private, ignore_errors=True)


def test_results_equal_a_fresh_runs(pool):
  code = "import sys\nprint('out')\nprint('err', file=sys.stderr)\nopen('left.txt', 'w').write('x')"
  pooled, fresh = pool.run_python(code, limits=LIMITS), sandbox.run_python(code, limits=LIMITS)
  for field in ("returncode", "stdout", "stderr", "violations", "files", "isolation",
                "network_isolated"):
    assert getattr(pooled, field) == getattr(fresh, field), field
  assert pool.run_tests("def f(n):\n  return n+1\n", TESTS, limits=LIMITS).ok
  failed = pool.run_tests("def f(n):\n  return n\n", TESTS, limits=LIMITS)
  assert (failed.passed, failed.total, failed.flags) == (0, 1, ())


@pytest.mark.parametrize("code, kind", [
    ("while True: pass", "cpu"),
    ("import time\ntime.sleep(30)", "timeout"),
    ("x = bytearray(512 * 2**20)", "memory"),
    ("import os\nwhile True: os.fork()", "process"),
    ("import socket\nsocket.socket()", "network"),
    ("fs = [open(f'f{i}', 'w') for i in range(64)]", None),
    ("print('x' * 2**20)", "output"),
    ("open('/etc/hostname').read()", "filesystem"),
])
def test_every_limit_holds_per_run(pool, code, kind):
  result = pool.run_python(code, limits=LIMITS)
  assert not result.ok
  if kind is not None:
    assert kind in result.violation_kinds, result
  else:
    assert "Too many open files" in result.stderr, result


def test_each_run_starts_clean(pool):
  first = pool.run_python("import os\nopen('mine.txt', 'w').write('secret')\nprint(os.getcwd())",
                          limits=LIMITS)
  second = pool.run_python("import os\nprint(os.getcwd(), sorted(os.listdir('.')))\n"
                           "print(os.getpid())",
                           limits=LIMITS)
  assert first.ok and second.ok
  directory, listing = second.stdout.splitlines()[0].split(" ", 1)
  assert listing == "['main.py']"  # no file of the first run, in a directory of its own
  assert first.stdout.strip() == directory == "<sandbox>"
  # The first process after its own process 1: a fresh pid namespace.
  assert second.stdout.splitlines()[1] == "2"


def test_a_pinned_file_stays_read_only_and_hashed(pool):
  pinned = {"tests/test_x.py": "x = 1\n"}
  result = pool.run_python("import os\nopen('tests/test_x.py', 'w').write('x = 2')",
                           pinned=pinned, limits=LIMITS)
  assert "pinned_file" in result.violation_kinds


def test_concurrent_runs_from_threads(pool):
  code = "import os\nprint(sum(range(10**5)))"
  with concurrent.futures.ThreadPoolExecutor(4) as threads:
    results = list(threads.map(lambda _: pool.run_python(code, limits=LIMITS), range(8)))
  assert all(r.ok and r.stdout == f"{sum(range(10**5))}\n" for r in results)
  assert pool.runs == 8


def test_pooled_routes_every_kernel_run(pool):
  with sandbox.pooled(pool):
    assert sandbox.run_python("print(1)", limits=LIMITS).stdout == "1\n"
    assert sandbox.run_tests("def f(n):\n  return n+1\n", TESTS, limits=LIMITS).ok
    hook = sandbox.run_python("print(1)", limits=sandbox.SandboxLimits(isolation="hook"))
  assert hook.isolation == "hook"
  assert pool.runs == 2


def test_bad_use_is_a_clear_error(pool):
  with pytest.raises(ValueError, match="kernel-mode"):
    pool.run_python("pass", limits=sandbox.SandboxLimits(isolation="hook"))
  with pytest.raises(ValueError, match="size"):
    sandbox.SandboxPool(size=0)
  pool.close()
  with pytest.raises(RuntimeError, match="closed"):
    pool.run_python("pass", limits=LIMITS)


_INTERPRETER_STATE = (
    "import os, sys\n"
    "fds = []\n"
    "for fd in range(256):\n"
    "  try:\n"
    "    os.fstat(fd)\n"
    "  except OSError:\n"
    "    continue\n"
    "  fds.append(fd)\n"
    "print(fds)\n"
    "print(sorted(sys.modules))\n"
    "print(os.getpid(), os.getuid(), sorted(os.environ))\n")


def test_a_pooled_run_meets_what_a_fresh_one_does(pool):
  # Workers are forked from the pool's zygote, not started as fresh interpreters: the run must
  # not find any of the zygote's descriptors (its socket, other workers' pipes) or modules.
  pooled = pool.run_python(_INTERPRETER_STATE, limits=LIMITS, channel=True)
  fresh = sandbox.run_python(_INTERPRETER_STATE, limits=LIMITS, channel=True)
  assert pooled.ok and fresh.ok, (pooled, fresh)
  (pooled_fds, *pooled_rest), (fresh_fds, *fresh_rest) = (
      r.stdout.splitlines() for r in (pooled, fresh))
  assert pooled_rest == fresh_rest  # modules, pid, user, environment
  # The same descriptors (under other numbers): stdin, stdout, stderr, the report, the channel.
  assert len(eval(pooled_fds)) == len(eval(fresh_fds)) == 5, (pooled_fds, fresh_fds)  # pylint: disable=eval-used


def test_closing_the_pool_ends_its_zygote(monkeypatch):
  made = sandbox.SandboxPool(size=1)
  zygote = made._zygote.process  # pylint: disable=protected-access
  assert made.run_python("print(1)", limits=LIMITS).stdout == "1\n"
  assert zygote.poll() is None
  made.close()
  assert zygote.poll() is not None
