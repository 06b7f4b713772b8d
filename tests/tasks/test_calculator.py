"""Tests for the calculator suite: generation, splits, verifier and the TFDS round trip."""

import dataclasses
import itertools
import os
import re
import subprocess
import sys

import pytest

from rlagents import tools
from rlagents.tasks import calculator_tfds
from rlagents.tasks import CalculatorSuiteConfig
from rlagents.tasks import CalculatorTask
from rlagents.tasks import generate_suite
from rlagents.tasks import is_correct
from rlagents.tasks import load_split
from rlagents.tasks import parse_answer
from rlagents.tasks import SPLITS

_SMALL = CalculatorSuiteConfig(num_train=200, num_heldout=30, num_heldout_ood=30,
                               num_calibration=30)


@pytest.fixture(scope="module")
def default_suite():
  return generate_suite(CalculatorSuiteConfig())


def _assert_disjoint(suite):
  for a, b in itertools.combinations(SPLITS, 2):
    shared = {t.expression for t in suite[a]} & {t.expression for t in suite[b]}
    assert not shared, (a, b, sorted(shared)[:5])


def test_default_suite_sizes_and_disjoint_splits(default_suite):
  config = CalculatorSuiteConfig()
  assert list(default_suite) == list(SPLITS)
  assert {split: len(tasks) for split, tasks in default_suite.items()} == {
      "train": config.num_train, "heldout": config.num_heldout,
      "heldout_ood": config.num_heldout_ood, "calibration": config.num_calibration}
  _assert_disjoint(default_suite)
  for split, tasks in default_suite.items():
    assert len({t.expression for t in tasks}) == len(tasks), split  # no duplicates
    assert all(t.split == split for t in tasks)
  all_ids = [t.task_id for tasks in default_suite.values() for t in tasks]
  assert len(set(all_ids)) == len(all_ids)


def test_default_suite_problems_are_well_formed(default_suite):
  config = CalculatorSuiteConfig()
  number = r"(0|[1-9][0-9]{0,2})"  # 1 to 3 digits, no leading zeros
  in_distribution = re.compile(rf"{number}([-+*]{number}){{2}}")
  for split, tasks in default_suite.items():
    for task in tasks:
      if split != "heldout_ood":
        assert in_distribution.fullmatch(task.expression), task
      assert task.answer == tools.evaluate_expression(task.expression)
      assert task.prompt == f"{task.expression}=?"
      assert task.max_digits == max(len(n) for n in re.findall("[0-9]+", task.expression))
  expressions = [t.expression for t in default_suite["train"]]
  # Every operator and digit count is drawn (uniformly, so each shows up often).
  assert all(sum(op in e for e in expressions) > 0.3 * len(expressions)
             for op in config.operators)
  assert {t.max_digits for t in default_suite["train"]} == {1, 2, 3}


def test_ood_split_is_harder(default_suite):
  assert all(t.num_operands == 3 and t.max_digits <= 3 for split in ("train", "heldout",
                                                                     "calibration")
             for t in default_suite[split])
  assert all(t.num_operands == 4 for t in default_suite["heldout_ood"])


def test_ood_with_more_digits_excludes_in_distribution_problems():
  config = CalculatorSuiteConfig(num_train=50, num_heldout=10, num_calibration=10,
                                 num_heldout_ood=200, ood_num_operands=3, ood_max_digits=4)
  ood = generate_suite(config)["heldout_ood"]
  assert all(t.num_operands == 3 and t.max_digits == 4 for t in ood)


def test_split_depends_only_on_the_expression():
  # A problem held out under one seed is never trained on under another.
  suites = [generate_suite(CalculatorSuiteConfig(seed=seed, num_train=2000)) for seed in (0, 1)]
  for a, b in itertools.permutations(suites, 2):
    for split in ("heldout", "calibration"):
      assert not {t.expression for t in a[split]} & {t.expression for t in b["train"]}


def test_deterministic_and_seed_dependent():
  assert generate_suite(_SMALL) == generate_suite(_SMALL)
  other = generate_suite(dataclasses.replace(_SMALL, seed=1))
  assert other["train"] != generate_suite(_SMALL)["train"]


def _summary(suite) -> str:
  return repr([(t.task_id, t.expression, t.answer) for tasks in suite.values() for t in tasks])


def test_independent_of_python_hash_seed():
  code = (
      "from rlagents.tasks import generate_suite, CalculatorSuiteConfig\n"
      f"suite = generate_suite(CalculatorSuiteConfig(**{dataclasses.asdict(_SMALL)!r}))\n"
      "print(repr([(t.task_id, t.expression, t.answer)\n"
      "            for tasks in suite.values() for t in tasks]))\n")
  for hash_seed in ("1", "2"):
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, env={**os.environ, "PYTHONHASHSEED": hash_seed})
    assert result.stdout.strip() == _summary(generate_suite(_SMALL))


def test_respects_operators_and_digit_range():
  config = CalculatorSuiteConfig(num_train=300, num_heldout=20, num_heldout_ood=20,
                                 num_calibration=20, operators="+", min_digits=2,
                                 max_digits=3, ood_max_digits=4)
  for tasks in generate_suite(config).values():
    for task in tasks:
      numbers = task.expression.split("+")
      assert len(numbers) == task.num_operands
      assert all(2 <= len(n) <= 4 and not n.startswith("0") for n in numbers), task


def test_fills_a_small_problem_space():
  # 2 one-digit operands and 3 operators: 10 * 10 * 3 = 300 distinct expressions, of which
  # about 30 are reserved for heldout.
  config = CalculatorSuiteConfig(num_train=100, num_heldout=12, num_calibration=12,
                                 num_heldout_ood=50, num_operands=2, max_digits=1,
                                 ood_num_operands=3, ood_max_digits=1)
  suite = generate_suite(config)
  assert [len(suite[s]) for s in SPLITS] == [100, 12, 50, 12]
  _assert_disjoint(suite)


@pytest.mark.parametrize("field, value", [
    ("seed", -1),
    ("num_train", 0),
    ("num_train", 1.5),
    ("num_train", 10**12),          # more than the problem space holds
    ("num_heldout", 0),
    ("num_heldout_ood", 0),
    ("num_calibration", 0),
    ("num_operands", 0),
    ("min_digits", 0),
    ("max_digits", 0),              # below min_digits
    ("max_digits", 7),              # 3 operands * 7 digits could overflow int64
    ("ood_num_operands", 2),        # easier than in-distribution
    ("ood_num_operands", 3),        # with ood_max_digits=3: the same as in-distribution
    ("ood_max_digits", 2),
    ("ood_max_digits", 5),          # 4 operands * 5 digits could overflow int64
    ("operators", ""),
    ("operators", "/"),
    ("operators", "++"),
])
def test_invalid_config_names_the_field(field, value):
  with pytest.raises(ValueError, match=rf"CalculatorSuiteConfig\.{field}="):
    CalculatorSuiteConfig(**{field: value})


def test_small_problem_space_names_the_split_size():
  with pytest.raises(ValueError, match=r"CalculatorSuiteConfig\.num_heldout="):
    CalculatorSuiteConfig(num_operands=1, max_digits=1, ood_num_operands=2, ood_max_digits=1)


@pytest.mark.parametrize("text, value", [
    ("14", 14), ("14 ", 14), ("  14\n", 14), ("-6", -6), ("0", 0), ("-0", 0), ("007", 7),
])
def test_parse_answer_accepts(text, value):
  assert parse_answer(text) == value


@pytest.mark.parametrize("text", [
    "14.0", "1 4", "", "   ", "fourteen", "14abc", "+14", "--14", "- 14", "1e3", "0x10",
    "\u0661\u0664",  # arabic-indic digits
    "14=14", "1" * 33,
])
def test_parse_answer_rejects(text):
  assert parse_answer(text) is None


def test_is_correct():
  task = CalculatorTask(task_id="t", expression="2+3*4", answer=14, split="train",
                        num_operands=3, max_digits=1)
  assert task.prompt == "2+3*4=?"
  assert is_correct(task, "14")
  assert is_correct(task, "14 ")
  for wrong in ("15", "-14", "14.0", "1 4", "", "fourteen", "14abc"):
    assert not is_correct(task, wrong), wrong


def test_tfds_round_trip(tmp_path):
  expected = generate_suite(_SMALL)
  loaded = {split: load_split(split, config=_SMALL, data_dir=tmp_path) for split in SPLITS}
  assert loaded == expected  # same tasks, same order
  _assert_disjoint(loaded)
  files = sorted(p.name for p in tmp_path.rglob("*.array_record*"))
  assert len(files) == len(SPLITS)
  # A second read reuses the prepared files.
  written = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*.array_record*")}
  assert load_split("heldout", config=_SMALL, data_dir=tmp_path) == expected["heldout"]
  assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*.array_record*")} == written


def test_changed_config_is_never_read_stale(tmp_path):
  first = load_split("train", config=_SMALL, data_dir=tmp_path)
  changed = dataclasses.replace(_SMALL, seed=1)
  second = load_split("train", config=changed, data_dir=tmp_path)
  assert second == generate_suite(changed)["train"]
  assert second != first
  assert (calculator_tfds.builder_config(_SMALL).name
          != calculator_tfds.builder_config(changed).name)


def test_builder_config_must_match_its_suite():
  assert calculator_tfds.builder_config(_SMALL) is calculator_tfds.builder_config(
      dataclasses.replace(_SMALL))
  with pytest.raises(ValueError, match="does not match its suite"):
    calculator_tfds.CalculatorBuilderConfig(name="custom", suite=_SMALL)


def test_unknown_split_raises(tmp_path):
  with pytest.raises(ValueError, match=r"'test'.*train, heldout, heldout_ood, calibration"):
    load_split("test", config=_SMALL, data_dir=tmp_path)
  assert not any(tmp_path.iterdir())  # rejected before any data was built

