"""One encoding of episodes to tokens and `loss_mask`, and one trim of padded batches.

Host code. `loss_mask` is 1 exactly on the tokens the policy wrote and 0 on the prompt, on tool
observations and on padding; every rollout, learner, preference file, expert demonstration and
replay goes through `encode_pieces`, so they all agree on it.
"""

import dataclasses
import re
from typing import Sequence

import numpy as np

from rlagents.episodes import _core


class EncodeError(ValueError):
  """Text that does not fit the token buffer it is encoded into."""


@dataclasses.dataclass
class RolloutBatch:
  """Episodes and their token arrays, all `[N, max_length]`."""
  episodes: list[_core.Episode]
  tokens: np.ndarray      # int32
  loss_mask: np.ndarray   # float32, 1 on policy tokens
  logprobs: np.ndarray    # float32, the sampler's log-probs on policy tokens, 0 elsewhere
  # int32, the policy version that sampled each policy token (-1 elsewhere) when the sampler
  # was given a `rollout.LatestParams`; None when one set of weights sampled the whole batch.
  versions: np.ndarray | None = None


def encode_text(tokenizer, text: str) -> list[int]:
  """Token ids of `text` with no special tokens added (markers are ordinary vocabulary)."""
  return tokenizer.encode(text, add_special_tokens=False)


def encode_pieces(pieces: Sequence[tuple[str, float]], tokenizer, max_length: int,
                  *, what: str = "text") -> tuple[np.ndarray, np.ndarray]:
  """`(tokens [max_length] int32, loss_mask [max_length] float32)` of `(text, weight)` pieces.

  Each piece is tokenised on its own (so a piece boundary is a token boundary, as when the
  rollout appends an observation after a generated segment) and its tokens get its weight.

  Raises:
    EncodeError: the pieces need more than `max_length` tokens; the message names `what`.
  """
  return encode_id_pieces([(encode_text(tokenizer, text) if text else [], weight)
                           for text, weight in pieces], max_length, what=what)


def encode_id_pieces(pieces: Sequence[tuple[Sequence[int], float]], max_length: int,
                     *, what: str = "text") -> tuple[np.ndarray, np.ndarray]:
  """`encode_pieces` of pieces already tokenised: `(ids, weight)`.

  Raises:
    EncodeError: the pieces need more than `max_length` tokens; the message names `what`.
  """
  ids: list[int] = []
  mask: list[float] = []
  for piece, weight in pieces:
    ids += list(piece)
    mask += [weight] * len(piece)
  if len(ids) > max_length:
    raise EncodeError(f"{what} needs {len(ids)} tokens, more than max_length={max_length}")
  tokens = np.zeros(max_length, np.int32)
  loss_mask = np.zeros(max_length, np.float32)
  tokens[:len(ids)] = ids
  loss_mask[:len(ids)] = mask
  return tokens, loss_mask


def episode_pieces(episode: _core.Episode) -> list[tuple[str, float]]:
  """The prompt (weight 0), each action (1) and each observation (0), in order."""
  pieces = [(_core.prompt_text(episode.task), 0.0)]
  for action in episode.actions:
    pieces.append((action.text, 1.0))
    if action.result is not None:
      pieces.append((_core.observation_text(action.result.observation), 0.0))
  return pieces


def completion_text(episode: _core.Episode) -> str:
  """Everything after the prompt: each action and the observation that followed it."""
  return "".join(text for text, _ in episode_pieces(episode)[1:])


_OBSERVATION = re.compile(re.escape(_core.OBS_OPEN) + ".*?" + re.escape(_core.OBS_CLOSE), re.S)


def completion_pieces(prompt: str, completion: str) -> list[tuple[str, float]]:
  """The pieces of a prompt and a completion given as text (`completion_text`'s inverse):
  observations (`<obs>...</obs>`) get weight 0, the rest of the completion 1."""
  pieces = [(_core.BOS + prompt, 0.0)]
  position = 0
  for match in _OBSERVATION.finditer(completion):
    pieces.append((completion[position:match.start()], 1.0))
    pieces.append((match.group(0), 0.0))
    position = match.end()
  pieces.append((completion[position:], 1.0))
  return pieces


def encode(episode: _core.Episode, tokenizer, max_length: int) -> tuple[np.ndarray, np.ndarray]:
  """Token ids and loss mask of a finished episode written by any policy (e.g. the expert)."""
  return encode_pieces(episode_pieces(episode), tokenizer, max_length,
                       what=f"episode {episode.task.task_id}")


def stack_episodes(episodes: Sequence[_core.Episode], tokenizer, max_length: int, *,
                   episode_format=None) -> RolloutBatch:
  """Token arrays of finished episodes, for supervised training on demonstrations.

  `episode_format`: the format the episodes are rendered in (`episodes.ChatFormat`); None is
  the marker format of `tokenizer`.
  """
  if episode_format is None:
    rows = [encode(e, tokenizer, max_length) for e in episodes]
  else:
    rows = [episode_format.encode(e, max_length) for e in episodes]
  tokens = np.stack([r[0] for r in rows])
  loss_mask = np.stack([r[1] for r in rows])
  return RolloutBatch(list(episodes), tokens, loss_mask, np.zeros_like(loss_mask))


def sequence_lengths(tokens: np.ndarray, loss_mask: np.ndarray | None = None) -> np.ndarray:
  """`[N]` for `[N, T]` padded rows: the position after each row's last token that is not
  padding (id 0) or that `loss_mask` marks. Read from the last such position, not counted:
  id 0 is also a real token of some vocabularies (Qwen2's `!`) and may occur inside a row.
  Rows end in a nonzero token in every format here (a stop or template token), or in a
  masked one."""
  used = np.asarray(tokens) != 0
  if loss_mask is not None:
    used = used | (np.asarray(loss_mask) > 0)
  last = used.shape[1] - np.argmax(used[:, ::-1], axis=1)
  return np.where(used.any(axis=1), last, 0)


def trim_to_longest(batch: dict[str, np.ndarray], multiple: int = 32) -> dict[str, np.ndarray]:
  """Cuts every `[N, T]` array of `batch` after the longest sequence, rounded up to `multiple`.

  The longest sequence is read from the fields whose names end in `tokens` (padding is token id
  0) and in `mask` (a masked position is kept even where its token is id 0, a real token of
  some vocabularies). Most episodes are far shorter than the buffer; rounding keeps the number
  of distinct shapes, and so of compilations, small.
  """
  used, full = 1, None
  for name, array in batch.items():
    if name.endswith("tokens") or (name.endswith("mask") and np.ndim(array) == 2):
      full = array.shape[1] if name.endswith("tokens") else full
      used = max(used, int(np.max(np.nonzero(np.any(array != 0, axis=0))[0], initial=0)) + 1)
  if full is None:
    raise ValueError(f"trim_to_longest needs a field named '*tokens'; got {sorted(batch)}")
  length = min(full, -(-used // multiple) * multiple)
  return {k: (v[:, :length] if np.ndim(v) == 2 else v) for k, v in batch.items()}
