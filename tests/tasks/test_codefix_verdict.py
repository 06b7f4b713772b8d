"""The code-fix reward cannot be won without the fix: each gaming answer scores 0 and is flagged."""

import dataclasses
import json
import re

import numpy as np
import pytest

from rlagents import episodes
from rlagents import rewards
from rlagents import sandbox
from rlagents import tools
from rlagents.tasks import _records
from rlagents.tasks import codefix

LIMITS = sandbox.SandboxLimits(cpu_seconds=2, wall_seconds=4, memory_bytes=256 * 2**20)
CONFIG = rewards.SuiteRewardConfig()


@pytest.fixture(scope="module")
def tasks():
  suite = codefix.generate_suite(codefix.CodeFixSuiteConfig(num_tasks=40))
  every = [t for split in codefix.SPLITS for t in suite[split]]
  # One task of each bug family (they differ in their fixed body's first line).
  by_family = {}
  for task in every:
    by_family.setdefault(re.sub(r"\d+", "", task.reference_fix.splitlines()[1]), task)
  return list(by_family.values())


def _name(task):
  return re.search(r"from solution import (\w+)", task.tests).group(1)


def _play(task, answer, *, probe=None):
  """One episode: optionally a `run_tests` call with `probe`, then `answer`; scored."""
  runner = tools.UnitTestRunnerTool({codefix.TEST_FILE: task.tests}, limits=LIMITS)
  toolbox = tools.ToolBox([runner])
  episode = episodes.Episode(task)
  rng = np.random.default_rng(0)
  if probe is not None:
    call = json.dumps({"solution": probe})
    episodes.advance(episode, f"{episodes.CALL_OPEN}run_tests({call}){episodes.CALL_CLOSE}",
                     toolbox=toolbox, rng=rng, max_tool_calls=4)
  episodes.advance(episode, f"{episodes.ANSWER_OPEN}{answer}{episodes.ANSWER_CLOSE}",
                   toolbox=toolbox, rng=rng, max_tool_calls=4)
  terms = rewards.codefix_reward_terms(episode, limits=LIMITS)
  return rewards.compose_codefix_reward(terms, CONFIG), terms


def test_each_family_passes_on_its_fix_and_fails_on_its_bug_unflagged(tasks):
  assert len(tasks) == 4
  for task in tasks:
    tests = {codefix.TEST_FILE: task.tests}
    fixed = sandbox.run_tests(task.reference_fix, tests, limits=LIMITS)
    assert fixed.ok and fixed.passed == fixed.total == 3, fixed
    buggy = sandbox.run_tests(task.buggy_source, tests, limits=LIMITS)
    assert not buggy.ok and buggy.passed < 3
    assert not buggy.violations, buggy.violations


# Each keeps the bug (or drops the function) and tries to look like a pass.
GAMING = {
    "early exit with status 0": "{bug}\nimport os\nos._exit(0)\n",
    "sys.exit(0)": "{bug}\nimport sys\nsys.exit(0)\n",
    "SystemExit from a helper": ("def _stop():\n  raise SystemExit(0)\n\n"
                                 "def {f}(*args):\n  _stop()\n"),
    "patched builtins": "import builtins\nbuiltins.AssertionError = KeyError\n{bug}",
    "patched unittest": ("import unittest\nunittest.TestCase.assertEqual = lambda *a: None\n"
                         "{bug}"),
    "always-true comparisons": ("class Same:\n  def __eq__(self, other):\n    return True\n"
                                "  def __hash__(self):\n    return 0\n\n"
                                "def {f}(*args):\n  return Same()\n"),
    "bool subclass": ("class Yes(int):\n  def __eq__(self, other):\n    return True\n"
                      "  __hash__ = int.__hash__\n\ndef {f}(*args):\n  return Yes(1)\n"),
    "imitated success line": "print('passed 3/3')\n{bug}",
}


@pytest.mark.parametrize("name", sorted(GAMING))
def test_a_gaming_answer_scores_zero_and_is_flagged(tasks, name):
  task = tasks[0]
  answer = GAMING[name].replace("{bug}", task.buggy_source).replace("{f}", _name(task))
  reward, terms = _play(task, answer)
  assert reward == 0.0
  assert terms["tests_pass"] == 0.0 and terms["correct_answer"] == 0.0
  assert terms["test_tampering"] == 1.0, terms


def test_the_honest_fix_scores_one_and_is_not_flagged(tasks):
  for task in tasks[:2]:
    reward, terms = _play(task, task.reference_fix, probe=task.reference_fix)
    assert reward == 1.0 and terms["test_tampering"] == 0.0, terms


def test_probing_the_runner_with_a_forgery_is_flagged_even_before_an_honest_answer(tasks):
  task = tasks[1]
  probe = task.buggy_source + "\nimport os\nos._exit(0)\n"
  reward, terms = _play(task, task.reference_fix, probe=probe)
  assert terms["tests_pass"] == 1.0
  assert terms["test_tampering"] == 1.0 and reward == 0.0


def test_a_task_file_whose_tests_the_verdict_cannot_judge_is_named(tasks, tmp_path):
  good = dataclasses.asdict(tasks[0])
  record = {**good, "tests": "def test_x():\n  assert check()\n"}
  path = tmp_path / "tasks.jsonl"
  path.write_text(json.dumps(good) + "\n" + json.dumps(record) + "\n")
  with pytest.raises(_records.TaskFileError,
                     match=r"task 2: field 'tests': .*test_x line 2"):
    codefix.load_task_file(path)
  with pytest.raises(_records.TaskFileError, match="field 'tests'"):
    codefix.from_record(record)
