"""The bug-fix suite: disjoint splits, bugs that really break the hidden tests, TFDS round trip."""

import collections
import dataclasses
import sys
import types

import numpy as np
import pytest

from rlagents import hf
from rlagents import sandbox
from rlagents import tools
from rlagents.tasks import bugfix
from rlagents.tasks import suites_tfds

CONFIG = bugfix.BugFixSuiteConfig(num_train=400, num_heldout=60, num_heldout_ood=60,
                                  num_calibration=60)
SUITE = bugfix.generate_suite(CONFIG)
EVERY = [task for split in bugfix.SPLITS for task in SUITE[split]]


def _failing_tests(source: str, tests: str) -> list[str]:
  """Runs a pinned test module against `source` in this process (our own generated code)."""
  module = types.ModuleType("solution")
  exec(source, vars(module))
  sys.modules["solution"] = module
  try:
    namespace = {}
    exec(tests, namespace)
  finally:
    del sys.modules["solution"]
  failing = []
  for name, test in namespace.items():
    if name.startswith("test_"):
      try:
        test()
      except Exception:  # pylint: disable=broad-except
        failing.append(name)
  return failing


def test_split_sizes_and_disjoint_functions():
  assert {split: len(tasks) for split, tasks in SUITE.items()} == {
      "train": 400, "heldout": 60, "heldout_ood": 60, "calibration": 60}
  functions = {split: {t.fixed_source for t in SUITE[split]}
               for split in ("train", "heldout", "calibration")}
  # A held-out function is never trained on, under any bug.
  assert not functions["train"] & functions["heldout"]
  assert not functions["train"] & functions["calibration"]
  assert not functions["heldout"] & functions["calibration"]
  assert len({t.buggy_source for t in EVERY}) == len(EVERY)
  assert len({t.task_id for t in EVERY}) == len(EVERY)
  assert all(t.split == split for split in bugfix.SPLITS for t in SUITE[split])


def test_ood_split_holds_exactly_the_held_out_families():
  ood = set(CONFIG.ood_families)
  assert {t.family for t in SUITE["heldout_ood"]} == ood
  in_distribution = {t.family for s in ("train", "heldout", "calibration") for t in SUITE[s]}
  assert not in_distribution & ood
  assert in_distribution == set(bugfix.FAMILIES) - ood


def test_functions_are_small_and_varied():
  # A def line and a body: 2 to 12 lines.
  assert all(2 <= len(t.fixed_source.splitlines()) <= 12 for t in EVERY)
  names = collections.Counter(t.function for t in SUITE["train"])
  assert len(names) >= 60  # many templates, each with its own names
  known = set(bugfix.CHARACTERS) | set(hf.CHARACTERS)
  assert all(set(t.prompt + t.fixed_source + t.visible_tests) <= known for t in EVERY)


def test_every_fix_passes_and_every_bug_fails_its_hidden_tests():
  for task in EVERY:
    assert _failing_tests(task.fixed_source, task.hidden_tests) == [], task
    assert _failing_tests(task.fixed_source, task.visible_tests) == [], task
    hidden_failures = _failing_tests(task.buggy_source, task.hidden_tests)
    visible_failures = _failing_tests(task.buggy_source, task.visible_tests)
    assert visible_failures, task
    # Also on a case that is not visible, so passing the visible cases alone fails.
    assert len(hidden_failures) > len(visible_failures) or set(hidden_failures) - set(
        f"test_{i}" for i in range(len(task.visible_inputs))), task
    # Only the bug's line differs.
    differ = [i for i, (a, b) in enumerate(zip(task.buggy_source.splitlines(),
                                               task.fixed_source.splitlines()), start=1)
              if a != b]
    assert differ == [task.bug_line]


def test_the_sandbox_verdict_agrees():
  limits = sandbox.SandboxLimits(cpu_seconds=1, wall_seconds=3)
  for task in [SUITE["train"][0], SUITE["heldout"][0], SUITE["heldout_ood"][0]]:
    tests = {bugfix.TEST_FILE: task.hidden_tests}
    assert tools.run_pinned_tests(task.fixed_source, tests, limits=limits).ok
    assert not tools.run_pinned_tests(task.buggy_source, tests, limits=limits).ok


def test_generation_is_deterministic_and_the_tfds_round_trip_equals_it(tmp_path):
  small = bugfix.BugFixSuiteConfig(num_train=30, num_heldout=8, num_heldout_ood=8,
                                   num_calibration=8)
  generated = bugfix.generate_suite(small)
  assert generated == bugfix.generate_suite(small)
  for split in bugfix.SPLITS:
    assert suites_tfds.load_split("bugfix", split, suite=small, data_dir=tmp_path) == (
        generated[split])


@pytest.mark.parametrize("make, field", [
    (lambda: bugfix.BugFixSuiteConfig(num_train=0), "num_train"),
    (lambda: bugfix.BugFixSuiteConfig(seed=-1), "seed"),
    (lambda: bugfix.BugFixSuiteConfig(ood_families=("typo",)), "unknown families"),
    (lambda: bugfix.BugFixSuiteConfig(ood_families=()), "at least one"),
    (lambda: bugfix.BugFixSuiteConfig(ood_families=bugfix.FAMILIES), "at least one"),
    (lambda: bugfix.BugFixerConfig(wrong_line=1.5), "wrong_line"),
])
def test_bad_config_names_the_field(make, field):
  with pytest.raises(ValueError, match=field):
    make()


def test_a_record_with_a_bad_test_names_it():
  record = dict(vars(SUITE["train"][0]))
  record["hidden_tests"] = "def test_x():\n  assert True\n"
  with pytest.raises(ValueError, match="hidden_tests"):
    bugfix.from_record(record)
  record.pop("hidden_tests")
  with pytest.raises(ValueError, match="missing field"):
    bugfix.from_record(record)


def test_a_size_past_what_the_templates_hold_fails_fast_and_says_so(monkeypatch):
  # Swapped arguments fit few templates: a thousand such bugs do not exist. The check that ends
  # the search is the run of draws that add nothing (2,000 by default, 30 here for speed).
  monkeypatch.setattr(bugfix, "_MAX_DRAWS_WITHOUT_A_TASK", 30)
  config = bugfix.BugFixSuiteConfig(num_train=4, num_heldout=4, num_calibration=4,
                                    num_heldout_ood=1000, ood_families=("swapped_arguments",))
  with pytest.raises(RuntimeError, match=r"heldout_ood \(\d+ of 1000\).*ask for fewer"):
    bugfix.generate_suite(config)


def test_renamed_variables_keep_every_function_right_and_make_more_of_them():
  renamed = bugfix.generate_suite(dataclasses.replace(CONFIG, rename_variables=True))
  every = [task for split in bugfix.SPLITS for task in renamed[split]]
  for task in every[::4]:
    assert _failing_tests(task.fixed_source, task.hidden_tests) == [], task
    assert _failing_tests(task.buggy_source, task.visible_tests), task
  # Far more distinct functions than the templates' own names give (~1,650 in all), and
  # splits still disjoint.
  def distinct(rename):
    rng = np.random.default_rng(0)
    return len({bugfix._function_candidates(rng, int(rng.integers(42)), rename)[2]  # pylint: disable=protected-access
                for _ in range(4000)})
  assert distinct(False) < 1700 < 3800 < distinct(True)
  functions = {split: {t.fixed_source for t in renamed[split]} for split in bugfix.SPLITS}
  assert not functions["train"] & (functions["heldout"] | functions["calibration"])
  # Attributes and strings keep their text; names are replaced whole.
  source = "def f(xs):\n r=[]\n for x in xs:\n  r.append(x+'x')\n return r\n"
  assert bugfix.rename_variables(source, {"xs": "v", "x": "item", "r": "append"}) == (
      "def f(v):\n append=[]\n for item in v:\n  append.append(item+'x')\n return append\n")
