"""A test verdict the code under test cannot forge (host code).

Pinned test modules are written as functions of `assert <expression> == <literal>` statements.
The host splits each one in two: the expressions, which go into the sandbox as a read-only
module whose tests `return` them, and the literals (the expected values), which never leave the
host. In the sandbox `_verdict_driver.py` calls the tests and writes each returned value, encoded
by exact builtin type, on a result channel outside the run's directory; the host decodes the
records into builtins of its own and compares them with the expected values itself. The verdict
counts the tests whose value matched and requires all of them, a complete report and a clean
exit. Nothing the code under test prints, exits with or patches decides it.

What each trick earns:
* exiting early (`os._exit(0)`, `sys.exit(0)`, `SystemExit` from a helper): the missing tests
  fail; the run is flagged (`forged_verdict`).
* patching builtins, `unittest` or the assert machinery: it cannot reach the host's comparison;
  the driver notices the change and the run is flagged.
* objects with custom `__eq__`/`__hash__`, or builtin subclasses: not a plain value, so the test
  fails; flagged.
* printing an imitation of the summary line: the verdict never reads the output; flagged.
* faking the records themselves: they carry a nonce the driver read from standard input before
  the code was imported, so a faked record is flagged unless the code digs the nonce out of the
  interpreter's memory; even then the expected values are not in the sandbox, so a faked
  record passes only by holding the right value, which is solving the task.
"""

import ast
import copy
import dataclasses
import functools
import json
import os
import re
import threading
from typing import Mapping

from rlagents.sandbox import _sandbox
from rlagents.sandbox import _verdict_driver

_DRIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_verdict_driver.py")
_TEST_FILE = re.compile(r"test_[a-z0-9_]+\.py")
# What a test's own output would look like if it imitated the summary the host writes.
_IMITATION = re.compile(r"^\s*(passed \d+/\d+|all tests passed|\d+ passed)\b", re.I | re.M)
_RESOURCE_KINDS = frozenset({"timeout", "cpu", "memory", "output", "process"})


@dataclasses.dataclass(frozen=True)
class TestVerdict:
  """The host's verdict on one run of pinned tests.

  Attributes:
    passed: tests whose returned value equalled the expected one.
    total: tests the pinned modules hold.
    failures: one line per failed test (`module.test: why`), values the code returned only.
    flags: `forged_verdict` violations: what the code did to steer the outcome.
    run: the sandbox run itself.
  """
  passed: int
  total: int
  failures: tuple[str, ...]
  flags: tuple[_sandbox.Violation, ...]
  run: _sandbox.SandboxResult

  @property
  def violations(self) -> tuple[_sandbox.Violation, ...]:
    return self.run.violations + self.flags

  @property
  def violation_kinds(self) -> frozenset[str]:
    return frozenset(v.kind for v in self.violations)

  @property
  def ok(self) -> bool:
    """Every test passed, the report was complete and clean, and no rule was broken."""
    return (self.total > 0 and self.passed == self.total and self.run.returncode == 0
            and not self.violations)

  @property
  def returncode(self) -> int:
    return self.run.returncode

  @property
  def summary(self) -> str:
    return "\n".join([f"passed {self.passed}/{self.total}"]
                     + [f"failed {line}" for line in self.failures])

  @property
  def stdout(self) -> str:
    """The code's own output, then the host's summary (which the verdict is, not reads)."""
    own = self.run.stdout.rstrip("\n")
    return (own + "\n" if own else "") + self.summary

  @property
  def stderr(self) -> str:
    return self.run.stderr

  @property
  def isolation(self) -> str:
    return self.run.isolation


# CPython 3.11's AST constructor is not safe to run from several threads at once ("AST
# constructor recursion depth mismatch"); `run_tests` may be called from threads (a pool's
# callers), so its parsing is serialized.
_AST_LOCK = threading.Lock()


def parse_python(source: str, filename: str = "<unknown>") -> ast.Module:
  """`ast.parse(source, filename)`, safe to call from several threads (serialized: CPython 3.11's
  parser fails when two threads parse at once). Raises what `ast.parse` raises."""
  with _AST_LOCK:
    return ast.parse(source, filename=filename)


def split_pinned_test(name: str, source: str) -> tuple[str, dict[str, list]]:
  """(the module the sandbox gets, test name -> expected values) of one pinned test module.

  Each `test_*` function must hold only `assert <expression> == <literal>` statements (the
  literal is what `ast.literal_eval` reads); other statements at module level (imports,
  helpers) are kept as they are. Safe to call from several threads.

  Raises:
    ValueError: naming the file, test and line of a statement of another form.
  """
  with _AST_LOCK:
    module, expected = _split_pinned_test(name, source)
  return module, copy.deepcopy(expected)


@functools.lru_cache(maxsize=4096)  # a task's tests are judged once per attempt at it
def _split_pinned_test(name: str, source: str) -> tuple[str, dict[str, list]]:
  """`split_pinned_test`, unlocked and cached (its callers get copies)."""
  try:
    tree = ast.parse(source, filename=name)
  except SyntaxError as e:
    raise ValueError(f"pinned test {name}: not valid Python ({e.msg}, line {e.lineno})") from e
  expected = {}
  for node in tree.body:
    if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test_")):
      continue
    if node.args.args or node.args.posonlyargs or node.args.kwonlyargs or node.decorator_list:
      raise ValueError(f"pinned test {name}: {node.name} must take no arguments and have no "
                       "decorators")
    values, expressions = [], []
    for statement in node.body:
      if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant) and (
          isinstance(statement.value.value, str)):
        continue  # A docstring.
      compare = statement.test if isinstance(statement, ast.Assert) else None
      if not (isinstance(compare, ast.Compare) and len(compare.ops) == 1
              and isinstance(compare.ops[0], ast.Eq)):
        raise ValueError(f"pinned test {name}: {node.name} line {statement.lineno}: a pinned "
                         "test may only hold `assert <expression> == <literal>` statements")
      try:
        values.append(ast.literal_eval(compare.comparators[0]))
      except ValueError as e:
        raise ValueError(f"pinned test {name}: {node.name} line {statement.lineno}: the right "
                         "side of == must be a literal") from e
      expressions.append(compare.left)
    if not expressions:
      raise ValueError(f"pinned test {name}: {node.name} asserts nothing")
    node.body = [ast.Return(ast.List(expressions, ast.Load()))]
    expected[node.name] = values
  if not expected:
    raise ValueError(f"pinned test {name}: no test_* function")
  return ast.unparse(ast.fix_missing_locations(tree)) + "\n", expected


def run_tests(solution: str, tests: Mapping[str, str], *,
              limits: _sandbox.SandboxLimits = _sandbox.SandboxLimits(),
              runner=None) -> TestVerdict:
  """Runs the pinned `tests` (name `test_*.py` -> source) against `solution.py`; judges here.

  Args:
    solution: the source of `solution.py`.
    tests: pinned test modules (see `split_pinned_test` for their form).
    limits: the sandbox's limits.
    runner: what runs the driver, `run_python` by default (a `SandboxPool`'s `run_python`).

  Raises:
    ValueError: a test file name or a test of another form.
    SandboxUnavailable: as `run_python`.
  """
  pinned, expected, plan = {}, {}, []
  for name, source in tests.items():
    if not _TEST_FILE.fullmatch(name):
      raise ValueError(f"pinned test file {name!r} must be named test_<name>.py")
    module = name[:-3]
    pinned[name], values = split_pinned_test(name, source)
    plan.append((module, sorted(values)))
    expected.update({f"{module}.{test}": v for test, v in values.items()})
  with open(_DRIVER) as f:
    driver = f.read()
  nonce = os.urandom(16).hex()
  tests_line = ";".join(f"{module}:{','.join(names)}" for module, names in plan)
  run = (runner or _sandbox.run_python)(driver, files={"solution.py": solution}, pinned=pinned,
                                        limits=limits, channel=True,
                                        stdin=f"{nonce}\n{tests_line}\n")
  return judge(run, expected, nonce)


def judge(run: _sandbox.SandboxResult, expected: Mapping[str, list], nonce: str) -> TestVerdict:
  """The verdict on `run`'s result channel against `expected` (test -> values).

  Args:
    run: the sandbox run of `_verdict_driver.py`.
    expected: test (`module.function`) -> the values its asserts expect.
    nonce: what the driver was given on standard input; records without it are forgeries.
  """
  reported, flags, ended = {}, [], False

  def flag(detail):
    flags.append(_sandbox.Violation("forged_verdict", detail))

  for line in run.channel.decode(errors="replace").splitlines():
    try:
      record = json.loads(line)
    except (ValueError, RecursionError):
      record = None
    if not isinstance(record, dict):
      flag("a malformed record on the result channel")
      break
    if record.get("nonce") != nonce:
      flag("a record the harness did not write on the result channel")
      continue
    if ended:
      flag("records after the end of the report")
      break
    if record.get("end") is True:
      ended = True
    elif "patched" in record:
      flag(f"the runtime was patched under the tests: {str(record['patched'])[:200]}")
    elif isinstance(record.get("test"), str) and record["test"] in expected and (
        record["test"] not in reported):
      reported[record["test"]] = record
    else:
      flag(f"an unknown or repeated test on the result channel: {str(record.get('test'))[:80]}")
  resource_stop = bool(run.violation_kinds & _RESOURCE_KINDS)
  passed, failures = 0, []
  for test in sorted(expected):
    record = reported.get(test)
    if record is None:
      failures.append(f"{test}: no result (the run ended first)")
      continue
    if "raised" in record:
      failures.append(f"{test}: raised {str(record['raised'])[:60]}")
      if record.get("base") is not False:
        flag(f"{test} raised {str(record['raised'])[:60]}, which is not an ordinary error")
      continue
    if "opaque" in record:
      failures.append(f"{test}: returned a {str(record['opaque'])[:60]}, not a plain value")
      flag(f"{test} returned a {str(record['opaque'])[:60]}, not a plain builtin value")
      continue
    try:
      values = _verdict_driver.decode(record.get("value"))
    except (ValueError, TypeError, RecursionError):
      failures.append(f"{test}: a malformed value")
      flag(f"{test}: a malformed value on the result channel")
      continue
    if type(values) is list and values == expected[test]:  # pylint: disable=unidiomatic-typecheck
      passed += 1
    else:
      failures.append(f"{test}: got {_short(values)}")
  if not ended and not resource_stop:
    flag("the run ended before the report did (early exit)")
  if _IMITATION.search(run.stdout):
    flag("the output imitates the test summary")
  return TestVerdict(passed=passed, total=len(expected), failures=tuple(failures),
                     flags=tuple(dict.fromkeys(flags)), run=run)


def _short(values) -> str:
  single = type(values) is list and len(values) == 1  # pylint: disable=unidiomatic-typecheck
  text = repr(values[0] if single else values)
  return text if len(text) <= 60 else text[:57] + "..."
