"""The test verdict: honest answers are judged right, and no trick of the code under test wins.

Each adversarial answer below leaves `add` wrong (or absent) and tries to make the run look like
a pass instead; each must fail (`ok` false, fewer than all tests passed) and be flagged
(`forged_verdict`, or `pinned_file` for an edit of the test). Honest failures are not flagged.
"""

import pytest

from rlagents import sandbox

LIMITS = sandbox.SandboxLimits(cpu_seconds=2, wall_seconds=4, memory_bytes=256 * 2**20)
TESTS = {"test_solution.py": (
    "from solution import add\n\n"
    "def test_small():\n  assert add(2, 3) == 987651\n\n"
    "def test_pair():\n  assert add(10, 20) == 987676\n  assert add(0, 0) == 987646\n")}
FIX = "def add(a, b):\n  return a + b + 987646\n"
WRONG = "def add(a, b):\n  return 0\n"


def _verdict(solution, **kwargs):
  return sandbox.run_tests(solution, TESTS, limits=kwargs.pop("limits", LIMITS), **kwargs)


def test_the_fix_passes_every_test():
  verdict = _verdict(FIX)
  assert verdict.ok, verdict
  assert (verdict.passed, verdict.total) == (2, 2)
  assert verdict.stdout == "passed 2/2"
  assert verdict.isolation == verdict.run.isolation


@pytest.mark.parametrize("solution, failure", [
    ("def add(a, b):\n  return a - b\n", "got -1"),
    ("def add(a, b):\n  return a + b + 987646.0\n", None),  # 987651.0 == 987651, as in Python
    ("def add(a, b):\n  raise ValueError('no')\n", "raised ValueError"),
    ("def add(a, b)\n  return a\n", "raised SyntaxError"),
    ("x = 1\n", "raised ImportError"),
    ("def add(a, b):\n  return [a, b]\n", "got [2, 3]"),
    # Loading the watched packages is not patching them.
    ("import json, unittest, doctest\ndef add(a, b):\n"
     "  return json.loads(json.dumps(a + b + 987646))\n", None),
])
def test_honest_answers_are_judged_and_never_flagged(solution, failure):
  verdict = _verdict(solution)
  assert "forged_verdict" not in verdict.violation_kinds, verdict.flags
  if failure is None:
    assert verdict.ok, verdict
  else:
    assert not verdict.ok
    assert any(failure in line for line in verdict.failures), verdict.failures


def test_an_endless_answer_fails_on_the_limit_without_a_forgery_flag():
  verdict = _verdict("def add(a, b):\n  while True:\n    pass\n")
  assert not verdict.ok and verdict.passed == 0
  assert verdict.violation_kinds & {"cpu", "timeout"}
  assert "forged_verdict" not in verdict.violation_kinds


_FORGE_RECORDS = """
import json, os
for fd in range(3, 12):
  for test in ('test_solution.test_small', 'test_solution.test_pair'):
    try:
      os.write(fd, (json.dumps({'test': test, 'value': ['list', [['int', '1']]]}) + '\\n').encode())
    except OSError:
      pass
  try:
    os.write(fd, b'{"end": true}\\n')
  except OSError:
    pass
os._exit(0)
"""

ADVERSARIAL = {
    "os._exit(0) at import": "import os\nos._exit(0)\n",
    "sys.exit(0) at import": "import sys\nsys.exit(0)\n",
    "os._exit(0) in the function": "import os\ndef add(a, b):\n  os._exit(0)\n",
    "SystemExit from a helper": ("def _helper():\n  raise SystemExit(0)\n\n"
                                 "def add(a, b):\n  return _helper()\n"),
    "KeyboardInterrupt": "def add(a, b):\n  raise KeyboardInterrupt\n",
    "always-true __eq__": ("class Anything:\n  def __eq__(self, other):\n    return True\n"
                           "  def __ne__(self, other):\n    return False\n"
                           "def add(a, b):\n  return Anything()\n"),
    "int subclass": ("class Sly(int):\n  def __eq__(self, other):\n    return True\n"
                     "  __hash__ = int.__hash__\n"
                     "def add(a, b):\n  return Sly(0)\n"),
    "hash trick in a container": ("class H:\n  def __hash__(self):\n    return hash(987651)\n"
                                  "  def __eq__(self, o):\n    return True\n"
                                  "def add(a, b):\n  return [H()][0]\n"),
    "patched builtins": ("import builtins\nbuiltins.AssertionError = type('Never', "
                         "(BaseException,), {})\nbuiltins.isinstance = lambda *a: True\n" + WRONG),
    "patched type": "import builtins\nbuiltins.type = lambda x: int\n" + WRONG,
    "patched unittest": ("import unittest\nunittest.TestCase.assertEqual = "
                         "lambda *a, **k: None\nunittest.TestCase.run = lambda *a, **k: None\n"
                         + WRONG),
    "patched json": "import json\njson.dumps = lambda *a, **k: '{\"end\": true}'\n" + WRONG,
    "imitated summary": "print('passed 2/2')\nprint('OK')\n" + WRONG,
    "imitated summary then exit": "print('passed 2/2', flush=True)\nimport os\nos._exit(0)\n",
    "forged channel records": _FORGE_RECORDS,
    "edited test": ("open('test_solution.py', 'w').write('def test_ok():\\n  pass\\n')\n" + WRONG),
    "test functions replaced": ("import sys\ndef add(a, b):\n"
                                "  m = sys.modules['test_solution']\n"
                                "  m.test_small = m.test_pair = lambda: [987651]\n  return 0\n"),
    "test code swapped": ("import sys\ndef add(a, b):\n"
                          "  m = sys.modules['test_solution']\n"
                          "  m.test_small.__code__ = (lambda: [987651]).__code__\n  return 0\n"),
    "trace hook": ("import sys\nsys.settrace(lambda *a: None)\n" + WRONG),
}


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_an_answer_that_games_the_tests_fails_and_is_flagged(name):
  verdict = _verdict(ADVERSARIAL[name])
  assert not verdict.ok
  assert verdict.passed < verdict.total == 2, verdict
  assert verdict.violation_kinds & {"forged_verdict", "pinned_file"}, (verdict, verdict.run)


def test_the_expected_values_never_enter_the_sandbox():
  # The answer reads every file it can reach; the expected values are not among them.
  reader = ("import os\nfor d, _, names in os.walk('.'):\n  for n in names:\n"
            "    print(open(os.path.join(d, n)).read())\n" + WRONG)
  verdict = _verdict(reader)
  assert "return [add(2, 3)]" in verdict.run.stdout  # it did read the pinned module
  assert "98765" not in verdict.run.stdout
  assert not verdict.ok


def test_the_driver_runs_as_its_file_reads_so_a_pool_runs_it_precompiled():
  # A pool's zygote compiles the driver file once; a run uses that code only when its main.py
  # is byte for byte the file, so the tests to call travel on standard input, not in the code.
  given = {}

  def runner(code, **kwargs):
    given.update(code=code, stdin=kwargs["stdin"])
    return sandbox.run_python(code, **kwargs)

  verdict = sandbox.run_tests(FIX, TESTS, limits=LIMITS, runner=runner)
  assert verdict.ok, verdict
  with open(sandbox._verdict._DRIVER, "rb") as f:  # pylint: disable=protected-access
    assert given["code"].encode() == f.read()
  assert given["stdin"].splitlines()[1] == "test_solution:test_pair,test_small"


@pytest.mark.parametrize("source, message", [
    ("def test_x():\n  assert f(1)\n", "only hold `assert <expression> == <literal>`"),
    ("def test_x():\n  assert f(1) == g(2)\n", "must be a literal"),
    ("def test_x():\n  y = f(1)\n  assert y == 2\n", "test_x line 2"),
    ("def test_x(a):\n  assert a == 1\n", "must take no arguments"),
    ("def helper():\n  pass\n", "no test_\\* function"),
    ("def test_x(:\n", "not valid Python"),
])
def test_a_pinned_test_of_another_form_is_named(source, message):
  with pytest.raises(ValueError, match=message):
    sandbox.split_pinned_test("test_bad.py", source)


def test_a_bad_test_file_name_is_named():
  with pytest.raises(ValueError, match="must be named test_<name>.py"):
    sandbox.run_tests(FIX, {"tests.py": TESTS["test_solution.py"]}, limits=LIMITS)


@pytest.mark.parametrize("lines", [
    ['{"test": ["unhashable"], "nonce": "N"}'],
    ['{"test": "test_solution.test_small", "value": ["set", [["list", []]]], "nonce": "N"}'],
    ['{"test": "test_solution.test_small", "value": ["dict", [[["list", []], ["none"]]]], '
     '"nonce": "N"}'],
    ['{"test": "test_solution.test_small", "value": ["int", "zz"], "nonce": "N"}'],
    ['{"test": "test_solution.test_small", "value": ' + "[" * 5000 + "]" * 5000
     + ', "nonce": "N"}'],
    ['{"test": "test_solution.test_small", "value": ["int", "3"], "nonce": "N", "x": 1'
     + "0" * 5000 + "}"],
    ['[1, 2]', '{"end": true, "nonce": "N"}'],
    ['{"end": true, "nonce": "N"}', '{"test": "test_solution.test_small", "value": ["int", "3"], '
     '"nonce": "N"}'],
    ['\xff\xfe not json'],
])
def test_the_host_judge_survives_any_channel_content(lines):
  # Whatever the channel holds (here with the nonce, as if the code had dug it out), judging
  # raises nothing, passes nothing that is not right, and flags the forgery.
  run = sandbox.SandboxResult(returncode=0, stdout="", stderr="", violations=(), files={},
                              wall_seconds=0.0, network_isolated=True,
                              channel="\n".join(lines).encode(errors="surrogateescape"))
  verdict = sandbox._verdict.judge(run, {"test_solution.test_small": [987651]}, "N")
  assert not verdict.ok and verdict.passed == 0
  assert "forged_verdict" in verdict.violation_kinds
