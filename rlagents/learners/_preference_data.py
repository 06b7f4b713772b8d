"""Preference and binary-feedback data: JSONL files, generation from verifiable tasks, encoding.

Host code. A preference file has one JSON object per line, either a pair

    {"prompt": "12+7=?", "chosen": "<call>calc(12+7)</call><obs>19</obs><answer>19</answer>",
     "rejected": "<answer>21</answer>"}

or a ranked list, best first, which becomes every (better, worse) pair:

    {"prompt": "12+7=?", "ranked": ["<answer>19</answer>", "<answer>18</answer>", "<answer>x</answer>"]}

A binary-feedback file (KTO) has `{"prompt": ..., "completion": ..., "desirable": true|false}`.
Bad input raises `PreferenceDataError` naming the file and line: invalid JSON, a missing field,
an empty completion, a ranked list of fewer than two.

Encoding: `<bos>` + prompt + completion as tokens; the mask is 1 on the completion's tokens
except text inside `<obs>...</obs>` (tool output is not the policy's), 0 on the prompt and padding
-- the same `loss_mask` the rollout gives an episode.
"""

import dataclasses
import json
from typing import Iterable, Sequence

import numpy as np

from rlagents import episodes as episodes_lib


class PreferenceDataError(ValueError):
  """A preference or feedback file that cannot be read; the message names the file and line."""


@dataclasses.dataclass(frozen=True)
class PreferencePair:
  """One preference: two completions of a prompt, the first preferred.

  Attributes:
    prompt: the task's prompt text.
    chosen: the preferred completion (actions and the observations that followed them).
    rejected: the dispreferred completion.
  """
  prompt: str
  chosen: str
  rejected: str


@dataclasses.dataclass(frozen=True)
class Feedback:
  """One binary judgement of a completion (KTO's data).

  Attributes:
    prompt: the task's prompt text.
    completion: the completion judged.
    desirable: True when the completion is good (e.g. its answer verifies).
  """
  prompt: str
  completion: str
  desirable: bool


def _records(path: str):
  with open(path) as f:
    for number, line in enumerate(f, start=1):
      if not line.strip():
        continue
      try:
        record = json.loads(line)
      except json.JSONDecodeError as e:
        raise PreferenceDataError(f"{path}:{number}: invalid JSON ({e.msg})") from None
      if not isinstance(record, dict):
        raise PreferenceDataError(f"{path}:{number}: expected a JSON object, got "
                                  f"{type(record).__name__}")
      yield number, record


def _text(record: dict, field: str, where: str, *, allow_empty: bool = False) -> str:
  if field not in record:
    raise PreferenceDataError(f"{where}: missing field '{field}'")
  value = record[field]
  if not isinstance(value, str):
    raise PreferenceDataError(f"{where}: field '{field}' must be a string, got "
                              f"{type(value).__name__}")
  if not allow_empty and not value.strip():
    raise PreferenceDataError(f"{where}: field '{field}' is an empty completion")
  return value


def load_preferences(path: str) -> list[PreferencePair]:
  """Reads pairs (`chosen`/`rejected`) and ranked lists (`ranked`, best first) from JSONL.

  A ranked list of k completions gives every (better, worse) pair, k * (k - 1) / 2 of them.

  Args:
    path: the JSONL file, one object per line (blank lines are skipped).

  Returns:
    The pairs, in file order.

  Raises:
    PreferenceDataError: invalid JSON, a missing or empty field, a ranked list of fewer than
      two, or a file with no pairs; the message names the file and line.
  """
  pairs = []
  for number, record in _records(path):
    where = f"{path}:{number}"
    prompt = _text(record, "prompt", where, allow_empty=True)
    if "ranked" in record:
      ranked = record["ranked"]
      if not isinstance(ranked, list) or len(ranked) < 2:
        raise PreferenceDataError(f"{where}: field 'ranked' must be a list of at least two "
                                  f"completions")
      texts = [_text({"ranked": r}, "ranked", f"{where} (ranked[{i}])")
               for i, r in enumerate(ranked)]
      pairs += [PreferencePair(prompt, texts[i], texts[j])
                for i in range(len(texts)) for j in range(i + 1, len(texts))]
    else:
      pairs.append(PreferencePair(prompt, _text(record, "chosen", where),
                                  _text(record, "rejected", where)))
  if not pairs:
    raise PreferenceDataError(f"{path}: no preference pairs")
  return pairs


def load_feedback(path: str) -> list[Feedback]:
  """Reads binary feedback (`prompt`, `completion`, `desirable`) from JSONL.

  Args:
    path: the JSONL file, one object per line (blank lines are skipped).

  Returns:
    The feedback items, in file order.

  Raises:
    PreferenceDataError: invalid JSON, a missing or empty field, a `desirable` that is not a
      boolean, or a file with no records; the message names the file and line.
  """
  items = []
  for number, record in _records(path):
    where = f"{path}:{number}"
    prompt = _text(record, "prompt", where, allow_empty=True)
    completion = _text(record, "completion", where)
    if "desirable" not in record:
      raise PreferenceDataError(f"{where}: missing field 'desirable'")
    if not isinstance(record["desirable"], bool):
      raise PreferenceDataError(f"{where}: field 'desirable' must be true or false")
    items.append(Feedback(prompt, completion, record["desirable"]))
  if not items:
    raise PreferenceDataError(f"{path}: no feedback records")
  return items


def write_jsonl(path: str, records: Iterable[dict]) -> None:
  """Writes one JSON object per line (the format `load_preferences` and `load_feedback` read).

  Args:
    path: the file to write (replaced).
    records: the objects, in order.
  """
  with open(path, "w") as f:
    for record in records:
      f.write(json.dumps(record) + "\n")


# ---- from verifiable tasks ----

def verified_preferences(episodes: Sequence[episodes_lib.Episode], *,
                         rng: np.random.Generator) -> list[PreferencePair]:
  """Pairs (a correct episode, an incorrect one) of the same task.

  `episodes` are scored (`reward_terms['correct_answer']` set) and may hold several episodes per
  task; each task with both outcomes gives min(#correct, #incorrect) pairs, each episode used once.

  Args:
    episodes: scored episodes, grouped into tasks by `task.task_id`.
    rng: shuffles each task's correct and incorrect episodes before they are paired.

  Returns:
    The pairs, `chosen` the correct episode's completion and `rejected` the incorrect one's.
  """
  by_task: dict[str, tuple[list, list]] = {}
  for e in episodes:
    good, bad = by_task.setdefault(e.task.task_id, ([], []))
    (good if e.reward_terms["correct_answer"] else bad).append(e)
  pairs = []
  for good, bad in by_task.values():
    good = [good[i] for i in rng.permutation(len(good))]
    bad = [bad[i] for i in rng.permutation(len(bad))]
    for g, b in zip(good, bad):
      pairs.append(PreferencePair(g.task.prompt, episodes_lib.completion_text(g),
                                  episodes_lib.completion_text(b)))
  return pairs


def verified_feedback(episodes: Sequence[episodes_lib.Episode]) -> list[Feedback]:
  """Each scored episode labelled desirable when its answer verifies.

  Args:
    episodes: scored episodes (`reward_terms['correct_answer']` set).

  Returns:
    One `Feedback` per episode, in order.
  """
  return [Feedback(e.task.prompt, episodes_lib.completion_text(e),
                   bool(e.reward_terms["correct_answer"]))
          for e in episodes]


def pair_records(pairs: Sequence[PreferencePair]) -> list[dict]:
  """The JSONL records (`prompt`, `chosen`, `rejected`) of preference pairs.

  Args:
    pairs: the pairs, in order.
  """
  return [{"prompt": p.prompt, "chosen": p.chosen, "rejected": p.rejected} for p in pairs]


def feedback_records(items: Sequence[Feedback]) -> list[dict]:
  """The JSONL records (`prompt`, `completion`, `desirable`) of feedback items.

  Args:
    items: the items, in order.
  """
  return [{"prompt": f.prompt, "completion": f.completion, "desirable": f.desirable}
          for f in items]


# ---- encoding ----

def encode(prompt: str, completion: str, tokenizer, max_length: int) -> tuple[np.ndarray,
                                                                               np.ndarray]:
  """`(tokens [max_length] int32, mask [max_length] float32)` of one prompt and completion."""
  try:
    return episodes_lib.encode_pieces(episodes_lib.completion_pieces(prompt, completion),
                                      tokenizer, max_length,
                                      what=f"prompt {prompt!r} with its completion")
  except episodes_lib.EncodeError as error:
    raise PreferenceDataError(str(error)) from None


def encode_pairs(pairs: Sequence[PreferencePair], tokenizer,
                 max_length: int) -> dict[str, np.ndarray]:
  """`chosen_tokens`, `chosen_mask`, `rejected_tokens`, `rejected_mask`, each `[N, max_length]`.

  Tokens are int32 (`<bos>` + prompt + completion, padded with 0); masks are float32, 1 on the
  completion's policy tokens (not the prompt, `<obs>` text or padding).

  Args:
    pairs: the N preference pairs.
    tokenizer: the policy's tokenizer (its `encode(text, add_special_tokens=False)` is used).
    max_length: the padded length T; a longer prompt + completion raises
      `PreferenceDataError`.
  """
  chosen = [encode(p.prompt, p.chosen, tokenizer, max_length) for p in pairs]
  rejected = [encode(p.prompt, p.rejected, tokenizer, max_length) for p in pairs]
  return {
      "chosen_tokens": np.stack([c[0] for c in chosen]),
      "chosen_mask": np.stack([c[1] for c in chosen]),
      "rejected_tokens": np.stack([r[0] for r in rejected]),
      "rejected_mask": np.stack([r[1] for r in rejected]),
  }


def encode_feedback(items: Sequence[Feedback], tokenizer,
                    max_length: int) -> dict[str, np.ndarray]:
  """`tokens`, `mask`, `kl_tokens`, `kl_mask` `[N, max_length]` and `desirable` `[N]` float32.

  `kl_*` pair prompt i with the completion of item i + 1 (mod N): the mismatched completions
  from which KTO estimates its reference point. Tokens are int32 padded with 0; masks are float32,
  1 on the completion's policy tokens; `desirable` is 1.0 or 0.0.

  Args:
    items: the N feedback items.
    tokenizer: the policy's tokenizer (its `encode(text, add_special_tokens=False)` is used).
    max_length: the padded length; a longer prompt + completion raises `PreferenceDataError`.
  """
  rows = [encode(f.prompt, f.completion, tokenizer, max_length) for f in items]
  mismatched = [encode(f.prompt, items[(i + 1) % len(items)].completion, tokenizer, max_length)
                for i, f in enumerate(items)]
  return {
      "tokens": np.stack([r[0] for r in rows]),
      "mask": np.stack([r[1] for r in rows]),
      "kl_tokens": np.stack([r[0] for r in mismatched]),
      "kl_mask": np.stack([r[1] for r in mismatched]),
      "desirable": np.array([f.desirable for f in items], np.float32),
  }
