"""The code-fix suite: a small Python function with one bug, and pinned unit tests.

The agent reads the buggy source, may run the pinned tests against a candidate with the
`run_tests` tool, and answers with the fixed source. The reward is +1 only when the pinned tests,
run again in a fresh sandbox, pass on the answer with no violation. The verdict is the host's
(`sandbox.run_tests`): each test is an `assert <call> == <literal>`; only the calls enter the
sandbox, their values come back as plain builtins and are compared here with the literals, which
the answer never sees. An answer that tried to change a test or to forge the verdict (exit early,
raise `SystemExit`, patch builtins or `unittest`, return objects with custom comparisons, print
a fake summary) is flagged and scores 0. Host code.

Functions come from a few bug families (off-by-one slice, flipped comparison, wrong operator,
wrong constant), each instantiated with its own name and constant, so the splits (by a hash of
the buggy source) hold different functions.
"""

import dataclasses

import numpy as np

from rlagents import sandbox
from rlagents.tasks import _records

SPLITS = _records.SPLITS
TEST_FILE = "test_solution.py"

# (buggy body, fixed body, test cases) with {f} the function name and {k} a constant.
_FAMILIES = (
    ("def {f}(xs):\n  total = 0\n  for x in xs[1:]:\n    total += x * {k}\n  return total\n",
     "def {f}(xs):\n  total = 0\n  for x in xs:\n    total += x * {k}\n  return total\n",
     ("[1, 2, 3]", "[]", "[5]")),
    ("def {f}(xs):\n  best = xs[0]\n  for x in xs:\n    if x < best:\n      best = x\n"
     "  return best + {k}\n",
     "def {f}(xs):\n  best = xs[0]\n  for x in xs:\n    if x > best:\n      best = x\n"
     "  return best + {k}\n",
     ("[3, 9, 2]", "[4]", "[-1, -7]")),
    ("def {f}(n):\n  return n - {k}\n", "def {f}(n):\n  return n + {k}\n", ("0", "5", "-3")),
    ("def {f}(n):\n  return n % 2 == 1 or n == {k}\n",
     "def {f}(n):\n  return n % 2 == 0 or n == {k}\n", ("2", "3", "10")),
)
_NAMES = ("scale_sum", "shifted_max", "offset", "even_or", "tally", "peak", "bump", "check")


@dataclasses.dataclass(frozen=True, kw_only=True)
class CodeFixSuiteConfig:
  """Attributes:
    seed: seeds which functions are drawn.
    num_tasks: distinct functions in the suite (all splits together).
  """
  seed: int = 0
  num_tasks: int = 200

  def __post_init__(self):
    if not isinstance(self.seed, int) or self.seed < 0:
      raise ValueError(f"CodeFixSuiteConfig.seed must be an int >= 0, got {self.seed!r}")
    if not isinstance(self.num_tasks, int) or not 10 <= self.num_tasks <= 2000:
      raise ValueError(f"CodeFixSuiteConfig.num_tasks must be in [10, 2000], got "
                       f"{self.num_tasks!r}")


@dataclasses.dataclass(frozen=True)
class CodeFixTask:
  """One buggy function.

  Attributes:
    task_id: `{split}-{hash}`.
    buggy_source: what the agent reads and must fix.
    tests: the pinned test module (`test_solution.py`), which imports `solution`.
    reference_fix: a correct fix (for the scripted policy and the suite's own checks; never
      shown to the agent).
    split: train, heldout or calibration.
  """
  task_id: str
  buggy_source: str
  tests: str
  reference_fix: str
  split: str

  @property
  def prompt(self) -> str:
    return f"fix the bug:\n{self.buggy_source}"


def _outputs(source: str, name: str, cases: tuple[str, ...]) -> list:
  namespace = {}
  exec(source, namespace)  # Our own generated source, not agent code.
  return [namespace[name](eval(case)) for case in cases]


def _tests(name: str, fixed: str, cases: tuple[str, ...]) -> str:
  namespace = {}
  exec(fixed, namespace)  # Our own generated source, not agent code.
  lines = [f"from solution import {name}\n"]
  for i, case in enumerate(cases):
    expected = namespace[name](eval(case))
    lines.append(f"\ndef test_case_{i}():\n  assert {name}({case}) == {expected!r}\n")
  return "".join(lines)


def generate_suite(config: CodeFixSuiteConfig) -> dict[str, list[CodeFixTask]]:
  """Tasks of every split; deterministic in `config`."""
  rng = np.random.default_rng(config.seed)
  tasks = {split: [] for split in SPLITS}
  seen = set()
  attempts = 0
  while len(seen) < config.num_tasks:
    attempts += 1
    if attempts > 100 * config.num_tasks:
      raise RuntimeError("could not draw enough distinct code-fix tasks; ask for fewer")
    family = _FAMILIES[int(rng.integers(len(_FAMILIES)))]
    name = f"{_NAMES[int(rng.integers(len(_NAMES)))]}_{int(rng.integers(1000))}"
    k = int(rng.integers(1, 10))
    buggy, fixed = (body.format(f=name, k=k) for body in family[:2])
    # Every task's tests must catch its bug.
    if buggy in seen or _outputs(buggy, name, family[2]) == _outputs(fixed, name, family[2]):
      continue
    seen.add(buggy)
    split = _records.split_of(buggy)
    tasks[split].append(CodeFixTask(task_id=_records.task_id(split, buggy), buggy_source=buggy,
                                    tests=_tests(name, fixed, family[2]), reference_fix=fixed,
                                    split=split))
  return tasks


def check_tests(task: CodeFixTask, where: str = "task") -> CodeFixTask:
  """`task`, once its pinned tests are known to have the form the verdict needs.

  Raises:
    TaskFileError: naming `where`, the test and the line of a test of another form.
  """
  try:
    sandbox.split_pinned_test(TEST_FILE, task.tests)
  except ValueError as e:
    raise _records.TaskFileError(f"{where}: field 'tests': {e}") from None
  return task


def from_record(record, where: str = "task") -> CodeFixTask:
  return check_tests(_records.from_record(CodeFixTask, record, where), where)


def load_task_file(path) -> list[CodeFixTask]:
  """Reads code-fix tasks from JSONL; a missing field or a test of a form the verdict cannot
  judge is a `TaskFileError` naming it."""
  return [check_tests(task, f"{path} task {number}")
          for number, task in enumerate(_records.load_task_file(CodeFixTask, path), start=1)]
