"""Reading the calculator suite's splits from its TFDS dataset (host code)."""

import os

from rlagents.tasks import calculator


def load_split(split: str, *,
               config: calculator.CalculatorSuiteConfig = calculator.CalculatorSuiteConfig(),
               data_dir: str | os.PathLike[str]) -> list[calculator.CalculatorTask]:
  """Reads one split of the suite from its TFDS dataset, building it under `data_dir` first.

  The dataset is stored as array_record and read with `tfds.data_source`; each config has its
  own prepared copy (see `calculator_tfds.CalculatorBuilderConfig`), so it is never stale.

  Raises:
    ValueError: `split` is not one of `SPLITS`.
  """
  if split not in calculator.SPLITS:
    raise ValueError(f"unknown calculator split {split!r}; valid splits: "
                     f"{', '.join(calculator.SPLITS)}")
  # Imported here: TFDS is slow to import for callers that only generate problems.
  from rlagents.tasks import calculator_tfds  # pylint: disable=g-import-not-at-top
  return calculator_tfds.read_split(split, config=config, data_dir=data_dir)
