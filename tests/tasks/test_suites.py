"""The retrieval and code-fix suites: disjoint splits, TFDS round trip, clear errors."""

import dataclasses
import json

import pytest

from rlagents import sandbox
from rlagents import tools
from rlagents.tasks import _records
from rlagents.tasks import codefix
from rlagents.tasks import retrieval
from rlagents.tasks import suites_tfds

RETRIEVAL = retrieval.RetrievalSuiteConfig(num_places=30)
CODEFIX = codefix.CodeFixSuiteConfig(num_tasks=30)


def test_retrieval_splits_are_disjoint_and_every_answer_is_in_its_passage():
  corpus, splits = retrieval.generate_suite(RETRIEVAL)
  questions = [{t.question for t in tasks} for tasks in splits.values()]
  assert sum(len(q) for q in questions) == len(set().union(*questions)) == 90
  for tasks in splits.values():
    for task in tasks:
      assert task.answer in retrieval.normalize(corpus[task.passage_id]).split()


def test_codefix_tests_fail_on_the_bug_and_pass_on_the_fix():
  limits = sandbox.SandboxLimits(cpu_seconds=1, wall_seconds=3)
  splits = codefix.generate_suite(CODEFIX)
  assert sum(len(t) for t in splits.values()) == 30
  sources = [{t.buggy_source for t in tasks} for tasks in splits.values()]
  assert not set.intersection(*sources)
  for task in splits["train"][:3]:
    tests = {codefix.TEST_FILE: task.tests}
    assert tools.run_pinned_tests(task.reference_fix, tests, limits=limits).ok
    assert not tools.run_pinned_tests(task.buggy_source, tests, limits=limits).ok


def test_tfds_round_trip_equals_generation(tmp_path):
  corpus, splits = retrieval.generate_suite(RETRIEVAL)
  for split in retrieval.SPLITS:
    assert suites_tfds.load_split("retrieval", split, suite=RETRIEVAL,
                                  data_dir=tmp_path) == splits[split]
  assert suites_tfds.load_corpus(RETRIEVAL, data_dir=tmp_path) == corpus
  assert suites_tfds.load_split("codefix", "heldout", suite=CODEFIX,
                                data_dir=tmp_path) == codefix.generate_suite(CODEFIX)["heldout"]


def test_unknown_suite_or_split_is_an_error(tmp_path):
  with pytest.raises(ValueError, match="unknown task suite 'maths'"):
    suites_tfds.load_split("maths", "train", suite=RETRIEVAL, data_dir=tmp_path)
  with pytest.raises(ValueError, match="unknown retrieval split 'test'"):
    suites_tfds.load_split("retrieval", "test", suite=RETRIEVAL, data_dir=tmp_path)


def test_a_task_file_with_missing_fields_names_them(tmp_path):
  task = codefix.generate_suite(CODEFIX)["train"][0]
  record = dataclasses.asdict(task)
  path = tmp_path / "tasks.jsonl"
  broken = {k: v for k, v in record.items() if k != "tests"}
  path.write_text(json.dumps(record) + "\n" + json.dumps(broken) + "\n")
  with pytest.raises(_records.TaskFileError,
                     match=r"tasks.jsonl line 2: task is missing field\(s\) \['tests'\]"):
    codefix.load_task_file(path)
  path.write_text(json.dumps({**record, "split": 3}) + "\n")
  with pytest.raises(_records.TaskFileError, match="field 'split' must be str"):
    codefix.load_task_file(path)
  path.write_text('{"task_id": \n')
  with pytest.raises(_records.TaskFileError, match="line 1: not valid JSON"):
    retrieval.load_task_file(path)
  path.write_text(json.dumps(record) + "\n")
  assert codefix.load_task_file(path) == [task]


@pytest.mark.parametrize("config, field", [
    (lambda: retrieval.RetrievalSuiteConfig(num_places=5), "num_places"),
    (lambda: codefix.CodeFixSuiteConfig(num_tasks=0), "num_tasks"),
    (lambda: codefix.CodeFixSuiteConfig(seed=-1), "seed")])
def test_bad_suite_configs_name_the_field(config, field):
  with pytest.raises(ValueError, match=field):
    config()
