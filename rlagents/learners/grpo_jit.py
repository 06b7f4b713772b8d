"""A whole GRPO step in one compiled program: in-jit multi-turn rollouts, reward and update.

With a JAX-native text environment (`envs.CalculatorTextEnv`, whose tool is a pure JAX
function), nothing in a GRPO step needs the host: the episodes of every group are sampled turn
by turn with the tool run in between (`rollout.make_jit_rollout`), scored by the environment's
reward terms weighted as `rewards.compose_reward` weights the host's, and the policy is updated
by GRPO's own update (`grpo.make_grpo_step`, the same function the host path uses, traced into
this program):

    step = make_jit_grpo_step(model, env, rollout_config, grpo_config, reward_config)
    state, metrics, episodes = step(state, ref_params, prompt_ids, key)   # prompt_ids [P]

The host path (`rollout.sample_episodes` + `rewards` + `MicrobatchedGRPOStep`) runs the tool in
Python between jitted sampling calls and trims each update to the episodes' lengths; this one
updates on the whole `[P * G, max_length]` buffer. The episodes come back as arrays
(`envs.TextEpisode`), not as host `Episode` records: they do not pass the host's guardrails and
are not written to the audit log.
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from rlagents import envs
from rlagents import rewards
from rlagents import rollout as rollout_lib
from rlagents.learners import grpo


def make_jit_grpo_step(
    model: Any, env: envs.CalculatorTextEnv, rollout_config: rollout_lib.RolloutConfig,
    grpo_config: grpo.GRPOConfig, reward_config: rewards.RewardConfig,
) -> Callable[..., tuple[Any, dict[str, jax.Array], envs.TextEpisode]]:
  """`step(state, ref_params, prompt_ids [P], key) -> (state, metrics, episodes [P * G])`, jitted.

  Each prompt id (an index into `env`'s tasks) is repeated `grpo_config.group_size` times, so
  groups are contiguous as GRPO's advantages need; the batch is updated
  `grpo_config.updates_per_batch` times. `state` is donated.

  Metrics: GRPO's (`grpo/...`), the mean of each reward term (`reward/...`), and
  `train/success`, `train/mean_reward`, `train/mean_tool_calls`, `train/sampled_tokens`.

  Raises:
    ValueError: `env` and `rollout_config` disagree on a limit.
  """
  rollout = rollout_lib.make_jit_rollout(model, env, rollout_config)
  update = grpo.make_grpo_step(grpo_config)  # jitted; traced inline here, without donation

  def step(state, ref_params, prompt_ids: jax.Array, key: jax.Array):
    task_ids = jnp.repeat(jnp.asarray(prompt_ids, jnp.int32), grpo_config.group_size)
    episodes = rollout(state.params, task_ids, key)
    terms = jax.vmap(env.reward_terms)(episodes)
    reward = rewards.compose_reward(terms, reward_config)
    batch = {"tokens": episodes.tokens, "loss_mask": episodes.loss_mask,
             "old_logprobs": episodes.logprobs, "rewards": reward}
    metrics = {}
    for _ in range(grpo_config.updates_per_batch):
      state, metrics = update(state, ref_params, batch)
    metrics = dict(metrics)
    metrics.update({f"reward/{name}": value.mean() for name, value in terms.items()})
    metrics["train/success"] = terms["correct_answer"].mean()
    metrics["train/mean_reward"] = reward.mean()
    metrics["train/mean_tool_calls"] = episodes.num_calls.mean()
    metrics["train/sampled_tokens"] = episodes.loss_mask.sum()
    return state, metrics, episodes

  return jax.jit(step, donate_argnums=(0,))
