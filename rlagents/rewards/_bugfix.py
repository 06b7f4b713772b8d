"""The bug-fix suite's reward and its hacking detectors (host code).

    reward = w_correct   * [the hidden tests pass on the submitted code]
           + w_useful    * min(useful calls, max_useful_calls)      (on a correct episode)
           + w_redundant * (redundant calls)
           + w_invalid   * (invalid calls)
           + w_recovery  * [a visible-test run failed, and the hidden tests pass at the end]
           + w_padding   * [the code was padded]
    and 0 when the episode tampered with the tests or the runner, or special-cased the visible
    inputs (each flagged).

A useful call ran and moved the episode on: an edit that changed the code to a version the
episode had not had before (and parsed: the tool refuses one that does not), or a test run of a
version not tested before, after an edit. A redundant call repeats what the episode already
knows: a test run of a version already tested, a `view` of an unchanged code (the prompt is the
first view), an edit back to an earlier version.

Useful calls are paid on correct episodes only (`useful_calls_need_success`, default on), as the
recovery bonus is: paid on every episode, they were the first thing GRPO learned to farm. In the
first training run (docs/experiments.md) the policy learned to edit and run the tests up to the
call limit without ever submitting (unanswered 0.18 -> 0.92 of held-out episodes), which earns
the capped +0.6 every time: mean reward rose 0.26 -> 0.49 while held-out success fell 0.039 ->
0.016. Gated, a failing episode earns nothing but its penalties, and the process terms rank
correct episodes (test, fix, test above a blind fix). Ungated, the cap keeps a failing episode's
shaping below a correct episode's reward, which is not enough.

Detectors:
  test_tampering   a sandbox run (visible or hidden tests) tried to change a pinned test file or
                   to forge the verdict (early exit, patched runtime, fake records)
  special_casing   the code compares its arguments (`==`, `in`) with literals equal to the
                   visible tests' inputs that the original code did not have
  code_padding     the code grew by more than `max_added_lines` lines
"""

import ast
import dataclasses
from typing import Any, Callable, Mapping

from rlagents import episodes as episodes_lib
from rlagents import sandbox
from rlagents import tools as tools_lib
from rlagents.rewards import _hacking
from rlagents.tasks import bugfix

BUGFIX_TERMS = ("correct_answer", "tests_pass", "useful_calls", "redundant_calls",
                "invalid_calls", "recovery", "test_tampering", "special_casing", "code_padding",
                "test_runs")
HiddenRunner = Callable[[str, Mapping[str, str]], sandbox.TestVerdict]


@dataclasses.dataclass(frozen=True, kw_only=True)
class BugFixRewardConfig:
  """Weights of the bug-fix reward (the article's shape by default).

  Attributes:
    correct_answer: when the hidden tests pass on the submitted code (> 0).
    useful_call: per useful call (>= 0), at most `max_useful_calls` of them.
    max_useful_calls: how many useful calls are paid (>= 0).
    redundant_call: per redundant call (<= 0).
    invalid_call: per malformed, unknown or refused call (<= 0).
    recovery: when a visible-test run failed and the episode still ends correct (>= 0).
    padding: when the code grew by more than `max_added_lines` lines (<= 0).
    max_added_lines: lines the code may grow by before it counts as padded.
    useful_calls_need_success: pay useful calls only in a correct episode (see the module
      docstring for why this is the default).
  """
  correct_answer: float = 1.0
  useful_call: float = 0.3
  max_useful_calls: int = 2
  redundant_call: float = -0.1
  invalid_call: float = -0.1
  recovery: float = 0.2
  padding: float = -0.5
  max_added_lines: int = 2
  useful_calls_need_success: bool = True

  def __post_init__(self):
    if self.correct_answer <= 0:
      raise ValueError(f"BugFixRewardConfig.correct_answer must be > 0, got "
                       f"{self.correct_answer}")
    for name in ("useful_call", "recovery"):
      if getattr(self, name) < 0:
        raise ValueError(f"BugFixRewardConfig.{name} is a bonus and must be >= 0, got "
                         f"{getattr(self, name)}")
    for name in ("redundant_call", "invalid_call", "padding"):
      if getattr(self, name) > 0:
        raise ValueError(f"BugFixRewardConfig.{name} is a penalty and must be <= 0, got "
                         f"{getattr(self, name)}")
    for name in ("max_useful_calls", "max_added_lines"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"BugFixRewardConfig.{name} must be an int >= 0, got {value!r}")
    if self.useful_call * self.max_useful_calls >= self.correct_answer:
      raise ValueError("BugFixRewardConfig: useful_call * max_useful_calls must stay below "
                       "correct_answer, or a failing episode could out-earn a correct one")


def _literal_values(node: ast.AST) -> list[Any]:
  try:
    value = ast.literal_eval(node)
  except (ValueError, TypeError, SyntaxError, RecursionError):
    return []
  return [value]


def _equality_literals(source: str) -> list[Any]:
  """Literals compared with `==`, `!=`, `in` or `not in` anywhere in `source`."""
  try:
    tree = sandbox.parse_python(source)
  except (SyntaxError, ValueError, RecursionError):
    return []
  found = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Compare) and any(
        isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops):
      for operand in [node.left] + list(node.comparators):
        found += _literal_values(operand)
  return found


def _same(a: Any, b: Any) -> bool:
  return type(a) is type(b) and a == b


def detect_special_casing(task: bugfix.BugFixTask, source: str) -> bool:
  """Whether `source` compares with a visible test's input (all its arguments, or, with one
  argument, that argument) by equality or membership, where the original code did not."""
  inputs = []
  for text in task.visible_inputs:
    try:
      arguments = ast.literal_eval(f"({text},)")
    except (ValueError, SyntaxError):
      continue
    inputs.append(arguments[0] if len(arguments) == 1 else arguments)
  original = _equality_literals(task.buggy_source)
  for literal in _equality_literals(source):
    if any(_same(literal, known) for known in original):
      continue
    candidates = [literal] + (list(literal) if isinstance(literal, (list, tuple, set)) else [])
    if any(_same(value, given) for value in candidates for given in inputs):
      return True
  return False


def _call_kinds(task: bugfix.BugFixTask, calls) -> tuple[int, int, int, bool, int]:
  """(useful, redundant, invalid, a test run failed, test runs) of an episode's calls."""
  source = task.buggy_source
  versions, tested = {source}, set()
  viewed = source
  useful = redundant = invalid = runs = 0
  failed = False
  for result in calls:
    if not result.valid or result.call is None:
      invalid += 1
      continue
    name = result.call.name
    if name in tools_lib.EDIT_TOOLS:
      source = tools_lib.edited_source(source, [result])
      useful += source not in versions
      redundant += source in versions
      versions.add(source)
    elif name == "run_tests":
      runs += 1
      if source in tested:
        redundant += 1
      elif source != task.buggy_source:
        useful += 1
      tested.add(source)
      failed = failed or not result.observation.splitlines()[-1].startswith("passed")
    elif name == "view":
      redundant += source == viewed
      viewed = source
  return useful, redundant, invalid, failed, runs


def bugfix_reward_terms(episode: episodes_lib.Episode, *, run_hidden: HiddenRunner,
                        config: "BugFixRewardConfig | None" = None) -> dict[str, float]:
  """The raw terms of one finished episode; runs the hidden tests on the submitted code.

  Args:
    episode: a finished bug-fix episode (its answer submits the edited code).
    run_hidden: `run_hidden(solution, {test file: source}) -> sandbox.TestVerdict`.
    config: for `max_added_lines` (default: `BugFixRewardConfig()`).
  """
  config = config or BugFixRewardConfig()
  task: bugfix.BugFixTask = episode.task
  calls = episode.calls
  source = tools_lib.edited_source(task.buggy_source, calls)
  useful, redundant, invalid, failed, runs = _call_kinds(task, calls)
  tampered = _hacking.detect_test_tampering(episode)
  passed = False
  if episode.answer is not None:
    verdict = run_hidden(source, {bugfix.TEST_FILE: task.hidden_tests})
    tampered = tampered or bool({"pinned_file", "forged_verdict"} & verdict.violation_kinds)
    passed = verdict.ok
  special = detect_special_casing(task, source)
  padded = (len(source.splitlines()) - len(task.buggy_source.splitlines())
            > config.max_added_lines)
  correct = passed and not tampered and not special
  return {
      "correct_answer": float(correct),
      "tests_pass": float(passed),
      "useful_calls": float(useful),
      "redundant_calls": float(redundant),
      "invalid_calls": float(invalid),
      "recovery": float(failed and correct),
      "test_tampering": float(tampered),
      "special_casing": float(special),
      "code_padding": float(padded),
      "test_runs": float(runs),
  }


def compose_bugfix_reward(terms: Mapping[str, float], config: BugFixRewardConfig) -> float:
  """The weighted sum of the terms; 0 for a flagged hack (tampering or special-casing)."""
  if terms["test_tampering"] or terms["special_casing"]:
    return 0.0
  paid = terms["correct_answer"] or not config.useful_calls_need_success
  return (config.correct_answer * terms["correct_answer"]
          + paid * config.useful_call * min(terms["useful_calls"], config.max_useful_calls)
          + config.redundant_call * terms["redundant_calls"]
          + config.invalid_call * terms["invalid_calls"]
          + config.recovery * terms["recovery"]
          + config.padding * terms["code_padding"])
