r"""Cost of one sandboxed run: kernel isolation (now) vs the sandbox before it, and the sandbox
pool vs a fresh sandbox per run, side by side.

    python benchmarks/sandbox.py --json=/tmp/sandbox.json

"before" is the sandbox module as it was at `--before_commit` (the commit before kernel
isolation), read from git into a temporary directory outside the repository and imported from
there: `unshare -n` + `setpriv` + the audit-hook bootstrap. "after" is this checkout's sandbox
with its defaults (`isolation="kernel"`: pid, mount and network namespaces built by process 1,
the unprivileged user, a memory and pids cgroup where allowed). "after, hook" is this checkout's
weaker mode, as context. "pool" is this checkout's `sandbox.SandboxPool` (`--pool_size`
pre-started kernel sandboxes, one per run, every limit on); its block ends with
`pool.wait_idle()`, so the starts and teardowns its runs caused are inside its time. Same limits
on every side. Two workloads:

- `run`: `run_python("print(1)")`, the fixed cost of a run;
- `verdict`: one code-fix task's 3 pinned tests on its reference fix. before: the unit-test
  runner of `--before_commit` (read from its `tools/_builtins.py`), which ran the test module in
  the sandbox and trusted the exit status; after: `sandbox.run_tests`, judged on the host.

The sides run one after the other in interleaved rounds (before, after, after-hook, pool,
before, ...), `--runs` runs a block. Figure: runs per second of each block, and the per-round
ratios after / before (below 1: the isolated run is slower) and pool / after (the pool's
speed-up over a fresh sandbox per run); median [min, max] over `--rounds` rounds. The
`verdict_threads` workload runs the verdict from `--threads` caller threads at once, fresh
sandboxes (after) against the pool (as the bug-fix suite scores a batch).
Prints the figures and writes them to `--json`; never fails on a time.
"""

import ast
import concurrent.futures
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

from rlagents import sandbox
from rlagents.metrics import cpu_model
from rlagents.tasks import codefix

_ROUNDS = flags.DEFINE_integer("rounds", 5, "Interleaved rounds.")
_RUNS = flags.DEFINE_integer("runs", 10, "Sandbox runs per side per round.")
_BEFORE = flags.DEFINE_string("before_commit", "f309aae4798070e73553f22c1a2dd5696eeba2c4",
                              "The commit whose sandbox is 'before'.")
_JSON = flags.DEFINE_string("json", None, "Also write the figures to this JSON file.")
_POOL_SIZE = flags.DEFINE_integer("pool_size", 4, "Pre-started sandboxes of the pool.")
_THREADS = flags.DEFINE_integer("threads", 4, "Caller threads of the verdict_threads workload.")

_LIMITS = dict(cpu_seconds=2, wall_seconds=5, memory_bytes=256 * 2**20)
_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _git_show(commit, path):
  return subprocess.run(["git", "-C", _REPO, "show", f"{commit}:{path}"], check=True,
                        capture_output=True, text=True).stdout


def _load_before(commit, directory):
  """The sandbox module and the unit-test runner source of `commit`, from `directory`."""
  for name in ("_sandbox.py", "_bootstrap.py"):
    with open(os.path.join(directory, name), "w") as f:
      f.write(_git_show(commit, f"rlagents/sandbox/{name}"))
  spec = importlib.util.spec_from_file_location("sandbox_before",
                                                os.path.join(directory, "_sandbox.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  tree = ast.parse(_git_show(commit, "rlagents/tools/_builtins.py"))
  runner = next(node.value.value for node in tree.body if isinstance(node, ast.Assign)
                and getattr(node.targets[0], "id", "") == "_TEST_RUNNER")
  return module, runner


def _threaded(fn, threads):
  """`fn` run `threads` times at once; True when every run succeeded."""
  with concurrent.futures.ThreadPoolExecutor(threads) as pool:
    return all(pool.map(lambda _: fn(), range(threads)))


def _workloads(before, runner, pool):
  task = codefix.generate_suite(codefix.CodeFixSuiteConfig(num_tasks=10))["train"][0]
  tests = {codefix.TEST_FILE: task.tests}
  old_limits = before.SandboxLimits(**_LIMITS)
  now, hook = sandbox.SandboxLimits(**_LIMITS), sandbox.SandboxLimits(**_LIMITS, isolation="hook")
  # As the unit-test tool of that commit called its runner.
  old_code = ("import sys, runpy\nsys.argv = ['runner'] + " + repr([n[:-3] for n in tests]) +
              "\nexec(compile(" + repr(runner) + ", 'runner', 'exec'))\n")
  workloads = {
      "run": {"before": lambda: before.run_python("print(1)", limits=old_limits).ok,
              "after": lambda: sandbox.run_python("print(1)", limits=now).ok,
              "after_hook": lambda: sandbox.run_python("print(1)", limits=hook).ok},
      "verdict": {
          "before": lambda: before.run_python(old_code, files={"solution.py": task.reference_fix},
                                              pinned=tests, limits=old_limits).ok,
          "after": lambda: sandbox.run_tests(task.reference_fix, tests, limits=now).ok,
          "after_hook": lambda: sandbox.run_tests(task.reference_fix, tests, limits=hook).ok},
  }
  workloads["run"]["pool"] = lambda: pool.run_python("print(1)", limits=now).ok
  workloads["verdict"]["pool"] = lambda: pool.run_tests(task.reference_fix, tests, limits=now).ok
  threads = _THREADS.value
  workloads["verdict_threads"] = {
      "after": lambda: _threaded(workloads["verdict"]["after"], threads),
      "pool": lambda: _threaded(workloads["verdict"]["pool"], threads)}
  return workloads


def _block(fn, runs, pool=None, calls_per_run=1):
  """Runs per second of `runs` calls of `fn` (each `calls_per_run` sandbox runs); a pool's
  block includes the starts and teardowns its runs caused."""
  if pool is not None:
    pool.wait_idle()
  start = time.perf_counter()
  for _ in range(runs):
    if not fn():
      raise RuntimeError("a benchmark run did not succeed; the figures would be meaningless")
  if pool is not None:
    pool.wait_idle()
  return runs * calls_per_run / (time.perf_counter() - start)


def _stats(values):
  return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main(argv):
  del argv
  problem = sandbox.kernel_isolation_problem()
  if problem is not None:
    print(f"kernel isolation cannot run here: it needs {problem}")
    return
  directory = tempfile.mkdtemp(prefix="rlagents_sandbox_before_")
  os.chmod(directory, 0o755)  # the old bootstrap is read by the unprivileged child
  try:
    before, runner = _load_before(_BEFORE.value, directory)
    with sandbox.SandboxPool(size=_POOL_SIZE.value) as pool:
      figures = _measure(_workloads(before, runner, pool), pool)
  finally:
    shutil.rmtree(directory, ignore_errors=True)
  print(f"{figures['cpu']}, {figures['cores']} cores, Python {figures['python']}, "
        f"Linux {figures['kernel']}; after = {figures['mode_after']}, before = "
        f"{_BEFORE.value[:10]}")
  columns = ("before_runs_per_s", "after_runs_per_s", "after_hook_runs_per_s",
             "pool_runs_per_s", "ratio_after_over_before", "ratio_pool_over_after")
  print(f"{'workload':15s} " + " ".join(c.replace("_runs_per_s", " runs/s").rjust(21)
                                         for c in columns))
  for name, f in figures["workloads"].items():
    print(f"{name:15s} " + " ".join(
        (f"{f[c]['median']:7.2f} [{f[c]['min']:.2f}, {f[c]['max']:.2f}]" if c in f else "-")
        .rjust(21) for c in columns))
  if _JSON.value:
    with open(_JSON.value, "w") as out:
      json.dump(figures, out, indent=2)


def _measure(workloads, pool):
  for sides in workloads.values():  # warm up: page cache, the first cgroup, imports
    for side, fn in sides.items():
      _block(fn, 2, pool)
  figures = {"cpu": cpu_model(), "python": platform.python_version(),
             "kernel": platform.release(), "cores": os.cpu_count(),
             "mode_after": sandbox.isolation_mode(sandbox.SandboxLimits(**_LIMITS)),
             "before_commit": _BEFORE.value, "runs_per_block": _RUNS.value,
             "rounds": _ROUNDS.value, "pool_size": pool.size, "threads": _THREADS.value,
             "workloads": {}}
  for name, sides in workloads.items():
    rates = {side: [] for side in sides}
    calls = _THREADS.value if name == "verdict_threads" else 1
    runs = max(1, _RUNS.value // calls)
    for _ in range(_ROUNDS.value):
      for side, fn in sides.items():
        # Every block starts with the pool idle, so its background work never lands in
        # another side's time.
        rates[side].append(_block(fn, runs, pool, calls))
    entry = {f"{side}_runs_per_s": _stats(values) for side, values in rates.items()}
    if "before" in rates:
      entry["ratio_after_over_before"] = _stats(
          [a / b for a, b in zip(rates["after"], rates["before"])])
    entry["ratio_pool_over_after"] = _stats([a / b for a, b in zip(rates["pool"], rates["after"])])
    figures["workloads"][name] = entry
  return figures


if __name__ == "__main__":
  app.run(main)
