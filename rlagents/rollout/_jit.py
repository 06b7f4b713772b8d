"""Multi-turn tool-use episodes in one compiled program, for JAX-native text environments.

The in-jit counterpart of `sample_episodes` (`_text.py`): the same sampler
(`sampling.generate_segment` with the host rollout's stop tokens and settings), the same keys
(one split per turn, as `_sample_chunk` draws them), and the environment's `step` in place of
the host's tool loop, all inside a `lax.while_loop` over turns that ends when every episode is
done or `max_tool_calls + 1` turns have run. With a tool that draws no randomness
(`failure_rate=0`), an episode writes exactly the tokens the host rollout writes for the same
key and parameters.
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from rlagents import envs
from rlagents import sampling
from rlagents.rollout import _text


def make_jit_rollout(model: Any, env: envs.TextEnvironment,
                     config: _text.RolloutConfig) -> Callable[..., Any]:
  """`rollout(params, task_ids [B], key) -> episodes [B]`, pure and jittable.

  Args:
    model: the policy `Transformer`.
    env: any `envs.TextEnvironment` (the calculator, the key-door world, a learned simulator); its `max_length`, `max_tool_calls` and `max_segment_tokens` must be
      `config`'s.
    config: the rollout settings (`batch_size` is not used: B is the number of task ids).

  Raises:
    ValueError: `env` and `config` disagree on a limit.
  """
  for name in ("max_length", "max_tool_calls", "max_segment_tokens"):
    if getattr(env, name) != getattr(config, name):
      raise ValueError(f"env.{name}={getattr(env, name)} differs from RolloutConfig.{name}="
                       f"{getattr(config, name)}")

  def rollout(params, task_ids: jax.Array, key: jax.Array):
    episodes = jax.vmap(env.reset)(task_ids)
    batch = task_ids.shape[0]

    def keep_going(carry):
      episodes, _, turn = carry
      return (turn < config.max_tool_calls + 1) & jnp.any(episodes.active)

    def turn(carry):
      episodes, key, turn = carry
      key, turn_key = jax.random.split(key)
      out = sampling.generate_segment(
          params, episodes.tokens, episodes.length, episodes.active, turn_key, model=model,
          max_new_tokens=config.max_segment_tokens, stop_tokens=env.stop_tokens,
          temperature=config.temperature, top_k=config.top_k, top_p=config.top_p)
      segment = envs.Segment(
          tokens=out.tokens, length=out.lengths, logprobs=out.logprobs,
          generated_mask=out.generated_mask, stop_token=out.stop_token)
      tool_keys = jax.random.split(jax.random.fold_in(turn_key, 1), batch)
      return jax.vmap(env.step)(episodes, segment, tool_keys), key, turn + 1

    episodes, _, _ = jax.lax.while_loop(keep_going, turn, (episodes, key, jnp.int32(0)))
    return episodes.replace(active=jnp.zeros_like(episodes.active))

  return rollout
