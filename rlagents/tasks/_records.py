"""Tasks as flat records: the form they take in TFDS datasets and in task files (host code)."""

import dataclasses
import hashlib
import json
import os
from typing import Any, Type, TypeVar

T = TypeVar("T")

_HELDOUT_FRACTION = 0.1
_CALIBRATION_FRACTION = 0.1
SPLITS = ("train", "heldout", "calibration")


class TaskFileError(ValueError):
  """A task record or task file that lacks a field or holds a bad value."""


def split_of(key: str, heldout_fraction: float = _HELDOUT_FRACTION,
             calibration_fraction: float = _CALIBRATION_FRACTION) -> str:
  """The split of a problem, fixed by the sha256 of its text: splits are disjoint by design
  (`heldout_fraction` and `calibration_fraction` of the hash range; the rest is 'train')."""
  position = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2**64
  if position < heldout_fraction:
    return "heldout"
  if position < heldout_fraction + calibration_fraction:
    return "calibration"
  return "train"


def task_id(split: str, key: str) -> str:
  return f"{split}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def from_record(cls: Type[T], record: Any, where: str) -> T:
  """Builds the dataclass `cls` from a dict, naming a missing, unknown or mistyped field."""
  if not isinstance(record, dict):
    raise TaskFileError(f"{where}: a task must be a JSON object, got {type(record).__name__}")
  fields = {f.name: f for f in dataclasses.fields(cls)}
  missing = sorted(set(fields) - set(record))
  if missing:
    raise TaskFileError(f"{where}: task is missing field(s) {missing} (a {cls.__name__} needs "
                        f"{sorted(fields)})")
  unknown = sorted(set(record) - set(fields))
  if unknown:
    raise TaskFileError(f"{where}: task has unknown field(s) {unknown}")
  for name, field in fields.items():
    if isinstance(field.type, type) and not isinstance(record[name], field.type):
      raise TaskFileError(f"{where}: task field {name!r} must be {field.type.__name__}, got "
                          f"{record[name]!r}")
  return cls(**record)


def load_task_file(cls: Type[T], path: str | os.PathLike[str]) -> list[T]:
  """Reads tasks from a JSONL file, one object a line.

  Raises:
    TaskFileError: naming the file, the line and the missing or bad field.
  """
  tasks = []
  with open(path) as f:
    for number, line in enumerate(f, start=1):
      if not line.strip():
        continue
      where = f"{os.fspath(path)} line {number}"
      try:
        record = json.loads(line)
      except json.JSONDecodeError as e:
        raise TaskFileError(f"{where}: not valid JSON ({e.msg})") from e
      tasks.append(from_record(cls, record, where))
  return tasks
