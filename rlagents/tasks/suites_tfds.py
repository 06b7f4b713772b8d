"""TFDS builder for the retrieval, code-fix and bug-fix suites: array_record, `tfds.data_source`.

One builder holds every suite; each (suite, config) pair has its own builder config, named by a
hash of its fields, so a changed config never reads stale data (as for the calculator). Each
example is a task as a JSON record, rebuilt with the suite's `from_record`, which names any
missing field. The retrieval corpus is stored as a fourth split, `corpus`. Host code.
"""

import dataclasses
import functools
import hashlib
import json
import os
from typing import Any

import tensorflow_datasets as tfds

from rlagents.tasks import bugfix
from rlagents.tasks import codefix
from rlagents.tasks import retrieval

SUITES = {"retrieval": retrieval, "codefix": codefix, "bugfix": bugfix}


@dataclasses.dataclass(eq=False)
class SuiteBuilderConfig(tfds.core.BuilderConfig):
  suite_name: str = "retrieval"
  suite: Any = None


@functools.cache
def builder_config(suite_name: str, suite: Any) -> SuiteBuilderConfig:
  if suite_name not in SUITES:
    raise ValueError(f"unknown task suite {suite_name!r}; valid: {sorted(SUITES)}")
  fields = json.dumps(dataclasses.asdict(suite), sort_keys=True)
  digest = hashlib.sha256(f"{suite_name}{fields}".encode()).hexdigest()[:12]
  return SuiteBuilderConfig(name=f"{suite_name}-{digest}", description=repr(suite),
                            suite_name=suite_name, suite=suite)


class TaskSuiteBuilder(tfds.core.GeneratorBasedBuilder):
  """The retrieval and code-fix suites, one builder config per (suite, config)."""

  name = "rlagents_task_suites"
  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "Initial release."}
  BUILDER_CONFIGS = [builder_config("retrieval", retrieval.RetrievalSuiteConfig())]

  def __init__(self, *, file_format: str = "array_record", **kwargs: Any):
    super().__init__(file_format=file_format, **kwargs)

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(
        builder=self, description=__doc__.splitlines()[0],
        features=tfds.features.FeaturesDict({"key": tfds.features.Text(),
                                             "record": tfds.features.Text()}),
        disable_shuffling=True)

  def _split_generators(self, dl_manager):
    del dl_manager  # Generated, nothing is downloaded.
    config = self.builder_config
    if config.suite_name == "retrieval":
      corpus, tasks = retrieval.generate_suite(config.suite)
      splits = {split: [(t.task_id, dataclasses.asdict(t)) for t in ts]
                for split, ts in tasks.items()}
      splits["corpus"] = [(pid, {"passage_id": pid, "text": text}) for pid, text in corpus.items()]
    else:
      tasks = SUITES[config.suite_name].generate_suite(config.suite)
      splits = {split: [(t.task_id, dataclasses.asdict(t)) for t in ts]
                for split, ts in tasks.items()}
    return {split: self._generate_examples(rows) for split, rows in splits.items()}

  def _generate_examples(self, rows):
    for key, record in rows:
      yield key, {"key": key, "record": json.dumps(record, sort_keys=True)}


def _read(suite_name: str, suite: Any, split: str, data_dir) -> list[dict[str, Any]]:
  records = tfds.data_source(TaskSuiteBuilder.name, split=split, data_dir=os.fspath(data_dir),
                             builder_kwargs={"config": builder_config(suite_name, suite)})
  return [json.loads(r["record"]) for r in records.__getitems__(range(len(records)))]


def load_split(suite_name: str, split: str, *, suite: Any, data_dir) -> list[Any]:
  """One split of a suite as task objects, preparing the dataset under `data_dir` if needed.

  Raises:
    ValueError: an unknown suite or split.
    TaskFileError: a stored record lacks a field.
  """
  module = SUITES.get(suite_name)
  if module is None:
    raise ValueError(f"unknown task suite {suite_name!r}; valid: {sorted(SUITES)}")
  if split not in module.SPLITS:
    raise ValueError(f"unknown {suite_name} split {split!r}; valid: {', '.join(module.SPLITS)}")
  return [module.from_record(r, f"{suite_name}/{split}")
          for r in _read(suite_name, suite, split, data_dir)]


def load_corpus(suite: retrieval.RetrievalSuiteConfig, *, data_dir) -> dict[str, str]:
  """The retrieval corpus, passage id -> text."""
  return {r["passage_id"]: r["text"] for r in _read("retrieval", suite, "corpus", data_dir)}
