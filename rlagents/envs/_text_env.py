"""What a text environment is, for both rollout modes, and the token helpers they share.

A text environment turns a task into a prompt, reads the action text the policy wrote (a tool
call in the project's format, `<call>name(args)</call>`, or a final `<answer>...</answer>`) and
answers with an observation text, a reward and whether the episode is done. It comes in two
forms that share the text format, the markers and the rules of `episodes.advance`:

- on the host, a task suite's guarded tools: `tasks.TaskSuite.toolbox_for(task)` runs a call's
  text and returns the observation; `TaskSuite.score` gives the reward terms and reward;
  `rollout.sample_episodes` runs any suite.
- inside `jit`, a `TextEnvironment` (below): pure functions on token ids over a fixed-size
  buffer; `rollout.make_jit_rollout` and `learners.make_jit_grpo_step` run any of them.

A suite that has both gives `TaskSuite.jax_env`, and for the same policy, parameters and key the
two rollouts write the same tokens and loss masks (checked for every built-in one: the
calculator in `tests/rollout/test_jit_rollout.py`, the key-door world and the learned key-door
simulator in `tests/rollout/test_text_env_rollouts.py`).
"""

from typing import Any, Protocol

import jax
import jax.numpy as jnp


class TextEnvironment(Protocol):
  """A JAX text environment (`envs.CalculatorTextEnv`, `envs.KeyDoorTextEnv`, ...).

  Its episode state is a `flax.struct.dataclass` with at least `tokens` `[L]` int32, `length`,
  `loss_mask` `[L]`, `logprobs` `[L]`, `active`, `num_calls` and `call_status` `[K]` (each
  call's `tools.CALL_STATUSES` index, -1 for none). Every method is pure and works on one
  episode (`vmap` for a batch).

  Attributes:
    max_length: L, the token buffer.
    max_tool_calls: K, calls an episode may make (one more ends it unanswered).
    max_segment_tokens: the longest segment the policy writes in one turn.
    stop_tokens: the tokens that end a segment (the host sampler's).
    num_tasks: how many tasks `reset` indexes.
  """
  max_length: int
  max_tool_calls: int
  max_segment_tokens: int

  @property
  def stop_tokens(self) -> tuple[int, ...]:
    ...

  @property
  def num_tasks(self) -> int:
    ...

  def reset(self, task: jax.Array) -> Any:
    """A new episode of task index `task`: the prompt `<bos>{prompt}`, nothing written."""

  def step(self, episode: Any, segment: Any, key: jax.Array) -> Any:
    """Reads the segment (`envs.Segment`) the policy wrote; runs the call or ends the episode."""

  def reward_terms(self, episode: Any) -> dict[str, jax.Array]:
    """The finished episode's reward terms (float32 scalars), `correct_answer` among them."""


def compose_text_reward(env: Any, terms: dict[str, jax.Array], default) -> jax.Array:
  """`env.compose_reward(terms)` when the environment weighs its own terms, else `default(terms)`.

  Args:
    env: a `TextEnvironment`.
    terms: its `reward_terms` (a batch or one episode).
    default: `default(terms) -> reward`, for an environment without `compose_reward`.
  """
  own = getattr(env, "compose_reward", None)
  return own(terms) if own is not None else default(terms)


def text_window(tokens: jax.Array, start: jax.Array, end: jax.Array, width: int,
           max_length: int) -> tuple[jax.Array, jax.Array]:
  """`tokens[start:end]` as a `[width]` window padded with 0, and its length (clipped).

  Args:
    tokens: `[max_length]` int32 buffer.
    start, end: the span (int32 scalars).
    width: the window's size.
    max_length: the buffer's size.
  """
  index = start + jnp.arange(width)
  out = jnp.where(index < end, tokens[jnp.clip(index, 0, max_length - 1)], 0)
  return out, jnp.clip(end - start, 0, width)


def text_after_last(tokens: jax.Array, marker: int, start: jax.Array, end: jax.Array, width: int,
               max_length: int) -> tuple[jax.Array, jax.Array]:
  """The text of `tokens[start:end]` after its last `marker` token (all of it if none).

  Args:
    tokens: `[max_length]` int32 buffer.
    marker: a token id.
    start, end: the span searched (int32 scalars).
    width: the returned window's size.
    max_length: the buffer's size.
  """
  index = jnp.arange(max_length)
  is_marker = (tokens == marker) & (index >= start) & (index < end)
  last = jnp.max(jnp.where(is_marker, index, start - 1))
  return text_window(tokens, last + 1, end, width, max_length)


def join_text_pieces(pieces, width: int) -> tuple[jax.Array, jax.Array]:
  """Concatenates token pieces into a `[width]` buffer (0-padded), and its length.

  Args:
    pieces: `(tokens [w_i], length)` pairs; only the first `length` tokens of each are kept.
    width: the buffer's size; what does not fit is dropped.
  """
  out = jnp.zeros(width, jnp.int32)
  offset = jnp.int32(0)
  for tokens, length in pieces:
    slots = jnp.arange(tokens.shape[0])
    at = jnp.where(slots < length, offset + slots, width)
    out = out.at[at].set(tokens, mode="drop")
    offset = offset + length
  return out, jnp.minimum(offset, width)
