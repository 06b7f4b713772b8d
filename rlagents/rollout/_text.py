"""Multi-turn text rollouts: a host loop around the jitted segment sampler.

Not jittable: tools run on the host between segments. Every episode of a batch lives in one
fixed-size token buffer `[batch_size, max_length]`, so the sampler compiles once; per turn the
model writes one segment for each unfinished episode, the host runs the tool calls and appends
the observations, and the loop goes on until every episode has answered or hit a limit.

`loss_mask` is 1 exactly on the tokens the policy wrote, and 0 on the prompt, the observations
and padding.
"""

import dataclasses
import functools
from typing import Any, Sequence

import jax
import numpy as np

from rlagents import sampling
from rlagents import tools as tools_lib
from rlagents.rollout import _episode


@dataclasses.dataclass(frozen=True, kw_only=True)
class RolloutConfig:
  """Limits and sampling settings of a rollout.

  Attributes:
    max_length: token buffer per episode (prompt, actions and observations).
    max_tool_calls: calls allowed per episode; one more call ends it unanswered.
    max_segment_tokens: tokens the model may write before a stop marker.
    batch_size: episodes sampled together (a fixed shape, so the sampler compiles once).
    temperature: sampling temperature (0 is greedy).
    top_k: keep the k most likely tokens (0: off).
    top_p: nucleus sampling threshold (1: off).
  """
  max_length: int = 192
  max_tool_calls: int = 4
  max_segment_tokens: int = 32
  batch_size: int = 128
  temperature: float = 1.0
  top_k: int = 0
  top_p: float = 1.0

  def __post_init__(self):
    for name in ("max_length", "max_tool_calls", "max_segment_tokens", "batch_size"):
      if getattr(self, name) < 1:
        raise ValueError(f"RolloutConfig.{name} must be >= 1, got {getattr(self, name)}")
    if self.temperature < 0:
      raise ValueError(f"RolloutConfig.temperature must be >= 0, got {self.temperature}")
    if not 0 < self.top_p <= 1:
      raise ValueError(f"RolloutConfig.top_p must be in (0, 1], got {self.top_p}")


@dataclasses.dataclass
class RolloutBatch:
  """Episodes and their token arrays, all `[N, max_length]`."""
  episodes: list[_episode.Episode]
  tokens: np.ndarray      # int32
  loss_mask: np.ndarray   # float32, 1 on policy tokens
  logprobs: np.ndarray    # float32, the sampler's log-probs on policy tokens, 0 elsewhere


def _encode(tokenizer, text: str) -> list[int]:
  return tokenizer.encode(text, add_special_tokens=False)


def episode_tokens(episode: _episode.Episode, tokenizer, max_length: int):
  """Token ids and loss mask of a finished episode written by any policy (e.g. the expert)."""
  ids = _encode(tokenizer, _episode.prompt_text(episode.task))
  mask = [0.0] * len(ids)
  for action in episode.actions:
    action_ids = _encode(tokenizer, action.text)
    ids += action_ids
    mask += [1.0] * len(action_ids)
    if action.result is not None:
      obs_ids = _encode(tokenizer, _episode.observation_text(action.result.observation))
      ids += obs_ids
      mask += [0.0] * len(obs_ids)
  if len(ids) > max_length:
    raise ValueError(f"episode {episode.task.task_id} needs {len(ids)} tokens, more than "
                     f"max_length={max_length}")
  tokens = np.zeros(max_length, np.int32)
  loss_mask = np.zeros(max_length, np.float32)
  tokens[:len(ids)] = ids
  loss_mask[:len(ids)] = mask
  return tokens, loss_mask


def stack_episodes(episodes: Sequence[_episode.Episode], tokenizer,
                   max_length: int) -> RolloutBatch:
  """Token arrays of finished episodes, for supervised training on demonstrations."""
  rows = [episode_tokens(e, tokenizer, max_length) for e in episodes]
  tokens = np.stack([r[0] for r in rows])
  loss_mask = np.stack([r[1] for r in rows])
  return RolloutBatch(list(episodes), tokens, loss_mask, np.zeros_like(loss_mask))


def make_sampler(model, tokenizer, config: RolloutConfig):
  """Binds the static arguments of `sampling.generate_segment` for this tokenizer and config."""
  stop_tokens = tuple(tokenizer.convert_tokens_to_ids(
      [_episode.CALL_CLOSE, _episode.ANSWER_CLOSE, _episode.EOS]))
  return functools.partial(
      sampling.generate_segment, model=model, max_new_tokens=config.max_segment_tokens,
      stop_tokens=stop_tokens, temperature=config.temperature, top_k=config.top_k,
      top_p=config.top_p)


def sample_episodes(params: Any, tasks: Sequence[Any], *, sampler, tokenizer,
                    toolbox: tools_lib.ToolBox, config: RolloutConfig, key: jax.Array,
                    rng: np.random.Generator) -> RolloutBatch:
  """Plays one episode per task with the model; see the module docstring.

  Args:
    params: the policy's parameters.
    tasks: objects with `task_id` and `prompt`.
    sampler: `make_sampler(...)`.
    tokenizer: the policy's tokenizer.
    toolbox: the tools the agent may call.
    config: limits and sampling settings.
    key: JAX key for sampling.
    rng: host generator for the tools' own randomness (busy failures).
  """
  batches = []
  for start in range(0, len(tasks), config.batch_size):
    key, chunk_key = jax.random.split(key)
    batches.append(_sample_chunk(params, tasks[start:start + config.batch_size],
                                 sampler=sampler, tokenizer=tokenizer, toolbox=toolbox,
                                 config=config, key=chunk_key, rng=rng))
  return RolloutBatch(
      episodes=[e for b in batches for e in b.episodes],
      tokens=np.concatenate([b.tokens for b in batches]),
      loss_mask=np.concatenate([b.loss_mask for b in batches]),
      logprobs=np.concatenate([b.logprobs for b in batches]))


def _sample_chunk(params, tasks, *, sampler, tokenizer, toolbox, config, key, rng):
  n, (batch, length) = len(tasks), (config.batch_size, config.max_length)
  tokens = np.zeros((batch, length), np.int32)
  lengths = np.ones(batch, np.int32)
  tokens[:, 0] = tokenizer.bos_token_id  # padding rows stay inactive
  for i, task in enumerate(tasks):
    ids = _encode(tokenizer, _episode.prompt_text(task))
    tokens[i, :len(ids)] = ids
    lengths[i] = len(ids)
  active = np.arange(batch) < n
  loss_mask = np.zeros((batch, length), np.float32)
  logprobs = np.zeros((batch, length), np.float32)
  episodes = [_episode.Episode(task) for task in tasks]

  for _ in range(config.max_tool_calls + 1):
    if not active.any():
      break
    key, turn_key = jax.random.split(key)
    out = jax.device_get(sampler(params, tokens, lengths, active, turn_key))
    generated = np.asarray(out.generated_mask)
    loss_mask[generated] = 1.0
    logprobs[generated] = np.asarray(out.logprobs)[generated]
    tokens = np.array(out.tokens)
    previous_lengths, lengths = lengths, np.array(out.lengths)
    for b in np.flatnonzero(active):
      segment = tokenizer.decode(tokens[b, previous_lengths[b]:lengths[b]])
      observation = _episode.advance(episodes[b], segment, toolbox=toolbox, rng=rng,
                                     max_tool_calls=config.max_tool_calls)
      if observation is None:
        active[b] = False
        continue
      obs_ids = _encode(tokenizer, observation)
      if lengths[b] + len(obs_ids) >= length:
        _episode.end_unanswered(episodes[b])
        active[b] = False
        continue
      tokens[b, lengths[b]:lengths[b] + len(obs_ids)] = obs_ids
      lengths[b] += len(obs_ids)
  for b in np.flatnonzero(active):
    _episode.end_unanswered(episodes[b])
  return RolloutBatch(episodes, tokens[:n], loss_mask[:n], logprobs[:n])
