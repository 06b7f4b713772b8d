"""TFDS builder for the calculator suite: array_record files read with `tfds.data_source`.

Needs no TensorFlow. Each `CalculatorSuiteConfig` gets its own builder config, named by a hash of
its fields, so a changed config prepares a new dataset next to the old one and never reads stale
data. Host code.

    builder = CalculatorBuilder(config=builder_config(suite), data_dir=d)
    builder.download_and_prepare()   # generates the data; no network is involved
    train = tfds.data_source(CalculatorBuilder.name, split='train', data_dir=d,
                             builder_kwargs={'config': builder.builder_config})
"""

import dataclasses
import functools
import hashlib
import json
import os
from typing import Any, Iterator

import numpy as np
import tensorflow_datasets as tfds

from rlagents.tasks import calculator


@dataclasses.dataclass(eq=False)
class CalculatorBuilderConfig(tfds.core.BuilderConfig):
  """A TFDS builder config that carries the suite config; get one from `builder_config`."""
  suite: calculator.CalculatorSuiteConfig = calculator.CalculatorSuiteConfig()

  def __post_init__(self):
    if self.name != _config_name(self.suite):
      raise ValueError(f"builder config name {self.name!r} does not match its suite; "
                       "use builder_config(suite)")


@functools.cache
def builder_config(suite: calculator.CalculatorSuiteConfig) -> CalculatorBuilderConfig:
  """The builder config for `suite`; always the same object for equal suites.

  TFDS rejects a config that has the name of one in `BUILDER_CONFIGS` unless it is that very
  object, so the default suite must map to the instance listed there.
  """
  return CalculatorBuilderConfig(name=_config_name(suite), description=repr(suite), suite=suite)


def _config_name(suite: calculator.CalculatorSuiteConfig) -> str:
  """`seed{seed}-{hash}`: the hash covers every field, so any change names a new dataset."""
  fields = json.dumps(dataclasses.asdict(suite), sort_keys=True)
  return f"seed{suite.seed}-{hashlib.sha256(fields.encode()).hexdigest()[:12]}"


class CalculatorBuilder(tfds.core.GeneratorBasedBuilder):
  """The calculator suite's four splits; writes array_record unless told otherwise."""

  name = "rlagents_calculator"
  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "Initial release."}
  BUILDER_CONFIGS = [builder_config(calculator.CalculatorSuiteConfig())]

  def __init__(self, *, file_format: str = "array_record", **kwargs: Any):
    super().__init__(file_format=file_format, **kwargs)

  def _info(self) -> tfds.core.DatasetInfo:
    # `DatasetInfo` directly: `dataset_info_from_configs` would look for README/CITATIONS
    # metadata files next to this module.
    return tfds.core.DatasetInfo(
        builder=self,
        description=__doc__.splitlines()[0],
        features=tfds.features.FeaturesDict({
            "task_id": tfds.features.Text(),
            "expression": tfds.features.Text(),
            "answer": tfds.features.Scalar(dtype=np.int64),
            "num_operands": tfds.features.Scalar(dtype=np.int64),
            "max_digits": tfds.features.Scalar(dtype=np.int64),
        }),
        # Records keep generation order, so a read split equals `generate_suite`'s list.
        disable_shuffling=True,
    )

  def _split_generators(self, dl_manager: tfds.download.DownloadManager):
    del dl_manager  # The data is generated, nothing is downloaded.
    suite = calculator.generate_suite(self.builder_config.suite)
    return {split: self._generate_examples(tasks) for split, tasks in suite.items()}

  def _generate_examples(self, tasks: list[calculator.CalculatorTask]
                         ) -> Iterator[tuple[str, dict[str, Any]]]:
    for task in tasks:
      yield task.task_id, {
          "task_id": task.task_id,
          "expression": task.expression,
          "answer": task.answer,
          "num_operands": task.num_operands,
          "max_digits": task.max_digits,
      }


def read_split(split: str, *, config: calculator.CalculatorSuiteConfig,
               data_dir: str | os.PathLike[str]) -> list[calculator.CalculatorTask]:
  """Reads `split` with `tfds.data_source`, preparing the dataset first if needed."""
  records = tfds.data_source(
      CalculatorBuilder.name, split=split, data_dir=os.fspath(data_dir),
      builder_kwargs={"config": builder_config(config)})
  return [
      calculator.CalculatorTask(
          task_id=record["task_id"].decode(),
          expression=record["expression"].decode(),
          answer=int(record["answer"]),
          split=split,
          num_operands=int(record["num_operands"]),
          max_digits=int(record["max_digits"]),
      )
      # One batched read: about twice as fast as indexing record by record.
      for record in records.__getitems__(range(len(records)))
  ]
