"""Multi-turn text rollouts: a host loop around the jitted segment sampler.

Not jittable: tools run on the host between segments. Every episode of a batch lives in one
fixed-size token buffer `[batch_size, max_length]`, so the sampler compiles once; per turn the
model writes one segment for each unfinished episode, the host runs the tool calls and appends
the observations, and the loop goes on until every episode has answered or hit a limit.

`loss_mask` is 1 exactly on the tokens the policy wrote, and 0 on the prompt, the observations
and padding. The ids come from the episode format (`episodes.MarkerFormat` by default, or a
model's chat template, `episodes.ChatFormat`): the prompt and each observation are the format's
ids, each segment the ids as sampled, never tokenised again.
"""

import dataclasses
import functools
import threading
import time
from typing import Any, Callable, Sequence

import jax
import numpy as np

from rlagents import episodes as episodes_lib
from rlagents import sampling
from rlagents import tools as tools_lib


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
    tool_latency_s: seconds added to every tool call (a slow tool or remote service, for
      benchmarks of asynchronous training); 0 adds nothing.
  """
  max_length: int = 192
  max_tool_calls: int = 4
  max_segment_tokens: int = 32
  batch_size: int = 128
  temperature: float = 1.0
  top_k: int = 0
  top_p: float = 1.0
  tool_latency_s: float = 0.0

  def __post_init__(self):
    for name in ("max_length", "max_tool_calls", "max_segment_tokens", "batch_size"):
      if getattr(self, name) < 1:
        raise ValueError(f"RolloutConfig.{name} must be >= 1, got {getattr(self, name)}")
    if self.temperature < 0:
      raise ValueError(f"RolloutConfig.temperature must be >= 0, got {self.temperature}")
    if not 0 < self.top_p <= 1:
      raise ValueError(f"RolloutConfig.top_p must be in (0, 1], got {self.top_p}")
    if self.tool_latency_s < 0:
      raise ValueError(f"RolloutConfig.tool_latency_s must be >= 0, got {self.tool_latency_s}")


class LatestParams:
  """The newest policy weights and their version, shared between a learner and samplers.

  Thread-safe. The learner `publish`es after each update; a sampler given this instead of
  plain parameters reads the newest weights at every turn, so a multi-turn episode may
  continue across an update (a partial rollout) and each of its tokens keeps the log-prob and
  the version of the weights that sampled it (`RolloutBatch.versions`).

  Args:
    params: the first weights.
    version: their version (the learner's update count).
  """

  def __init__(self, params: Any, version: int = 0):
    self._lock = threading.Lock()
    self._params, self._version = params, version

  def publish(self, params: Any, version: int) -> None:
    """Makes `params` (version `version`) the weights the next turn samples with."""
    with self._lock:
      self._params, self._version = params, version

  def get(self) -> tuple[Any, int]:
    """`(params, version)`, the newest published."""
    with self._lock:
      return self._params, self._version


def make_sampler(model, tokenizer, config: RolloutConfig, *,
                 stop_tokens: tuple[int, ...] | None = None):
  """Binds the static arguments of `sampling.generate_segment` for this tokenizer and config.

  `stop_tokens`: the ids a segment ends on (an episode format's `stop_tokens`); None: the
  marker format's `</call>`, `</answer>` and `<eos>`.
  """
  if stop_tokens is None:
    stop_tokens = tuple(tokenizer.convert_tokens_to_ids(list(episodes_lib.STOP_MARKERS)))
  return functools.partial(
      sampling.generate_segment, model=model, max_new_tokens=config.max_segment_tokens,
      stop_tokens=stop_tokens, temperature=config.temperature, top_k=config.top_k,
      top_p=config.top_p)


def sample_episodes(params: Any, tasks: Sequence[Any], *, sampler, tokenizer,
                    config: RolloutConfig, key: jax.Array, rng: np.random.Generator,
                    toolbox: tools_lib.ToolBox | None = None,
                    toolbox_for: Callable[[Any], tools_lib.ToolBox] | None = None,
                    episode_format: Any = None) -> episodes_lib.RolloutBatch:
  """Plays one episode per task with the model; see the module docstring.

  Args:
    params: the policy's parameters, or a `LatestParams` read at every turn (the batch then
      records each token's version in `versions`).
    tasks: objects with `task_id` and `prompt`.
    sampler: `make_sampler(...)`.
    tokenizer: the policy's tokenizer.
    toolbox: the tools the agent may call, the same for every task; or
    toolbox_for: `toolbox_for(task)`, each task's own tools (exactly one of the two).
    config: limits and sampling settings.
    key: JAX key for sampling.
    rng: host generator for the tools' own randomness (busy failures).
    episode_format: the format of the episodes (`episodes.ChatFormat`, whose `stop_tokens`
      the sampler must stop on); None: `episodes.MarkerFormat(tokenizer)`.
  """
  if episode_format is None:
    episode_format = episodes_lib.MarkerFormat(tokenizer)
  if (toolbox is None) == (toolbox_for is None):
    raise ValueError("sample_episodes takes exactly one of toolbox and toolbox_for")
  if toolbox_for is None:
    toolbox_for = lambda task: toolbox
  batches = []
  for start in range(0, len(tasks), config.batch_size):
    key, chunk_key = jax.random.split(key)
    batches.append(_sample_chunk(params, tasks[start:start + config.batch_size],
                                 sampler=sampler, tokenizer=tokenizer, toolbox_for=toolbox_for,
                                 config=config, key=chunk_key, rng=rng,
                                 episode_format=episode_format))
  versioned = isinstance(params, LatestParams)
  return episodes_lib.RolloutBatch(
      episodes=[e for b in batches for e in b.episodes],
      tokens=np.concatenate([b.tokens for b in batches]),
      loss_mask=np.concatenate([b.loss_mask for b in batches]),
      logprobs=np.concatenate([b.logprobs for b in batches]),
      versions=np.concatenate([b.versions for b in batches]) if versioned else None)


def _sample_chunk(params, tasks, *, sampler, tokenizer, toolbox_for, config, key, rng,
                  episode_format):
  n, (batch, length) = len(tasks), (config.batch_size, config.max_length)
  tokens = np.zeros((batch, length), np.int32)
  lengths = np.ones(batch, np.int32)
  # Padding rows stay inactive; they read one token (BOS, or the first stop token for
  # tokenizers without BOS).
  tokens[:, 0] = (tokenizer.bos_token_id if tokenizer.bos_token_id is not None
                  else episode_format.stop_tokens[0])
  for i, task in enumerate(tasks):
    ids = episode_format.prompt_ids(task)
    if len(ids) >= length:
      raise episodes_lib.EncodeError(f"the prompt of task {task.task_id} needs {len(ids)} "
                                     f"tokens, more than rollout.max_length={length}")
    tokens[i, :len(ids)] = ids
    lengths[i] = len(ids)
  active = np.arange(batch) < n
  loss_mask = np.zeros((batch, length), np.float32)
  logprobs = np.zeros((batch, length), np.float32)
  versions = np.full((batch, length), -1, np.int32)
  source = params if isinstance(params, LatestParams) else LatestParams(params)
  episodes = [episodes_lib.Episode(task, syntax=episode_format.syntax) for task in tasks]
  toolboxes = [toolbox_for(task) for task in tasks]

  for _ in range(config.max_tool_calls + 1):
    if not active.any():
      break
    key, turn_key = jax.random.split(key)
    turn_params, version = source.get()
    out = jax.device_get(sampler(turn_params, tokens, lengths, active, turn_key))
    generated = np.asarray(out.generated_mask)
    loss_mask[generated] = 1.0
    logprobs[generated] = np.asarray(out.logprobs)[generated]
    versions[generated] = version
    tokens = np.array(out.tokens)
    previous_lengths, lengths = lengths, np.array(out.lengths)
    for b in np.flatnonzero(active):
      segment, finished = episode_format.read_segment(tokens[b, previous_lengths[b]:lengths[b]])
      calls = len(episodes[b].calls)
      if not finished:  # a turn cut off before its turn-end token
        episodes_lib.end_unanswered(episodes[b], segment)
        active[b] = False
        continue
      observation = episodes_lib.advance(episodes[b], segment, toolbox=toolboxes[b], rng=rng,
                                         max_tool_calls=config.max_tool_calls)
      if config.tool_latency_s and len(episodes[b].calls) > calls:
        time.sleep(config.tool_latency_s)
      if observation is None:
        active[b] = False
        continue
      obs_ids = episode_format.observation_ids(episodes[b], observation)
      if lengths[b] + len(obs_ids) >= length:
        episodes_lib.end_unanswered(episodes[b])
        active[b] = False
        continue
      tokens[b, lengths[b]:lengths[b] + len(obs_ids)] = obs_ids
      lengths[b] += len(obs_ids)
  for b in np.flatnonzero(active):
    episodes_lib.end_unanswered(episodes[b])
  return episodes_lib.RolloutBatch(episodes, tokens[:n], loss_mask[:n], logprobs[:n],
                                   versions[:n])
