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
(`envs.TextEpisode`); `rollout.decode_jit_episodes` replays them on the host through the guarded
tools for the audit log (the job does so after every step).
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from rlagents import envs
from rlagents import rewards
from rlagents import rollout as rollout_lib
from rlagents.learners import grpo
from rlagents.learners import sft


def make_jit_grpo_step(
    model: Any, env: envs.TextEnvironment, rollout_config: rollout_lib.RolloutConfig,
    grpo_config: grpo.GRPOConfig, reward_config: rewards.RewardConfig, *,
    mesh: jax.sharding.Mesh | None = None,
) -> Callable[..., tuple[Any, dict[str, jax.Array], Any]]:
  """`step(state, ref_params, prompt_ids [P], key) -> (state, metrics, episodes [P * G])`, jitted.

  Each prompt id (an index into `env`'s tasks) is repeated `grpo_config.group_size` times, so
  groups are contiguous as GRPO's advantages need; the batch is updated
  `grpo_config.updates_per_batch` times. `state` is donated. With `grpo_config.microbatch_size`
  below the batch, gradients are accumulated over micro-batches of that many episodes
  (`lax.scan`), each weighted by its share of the aggregation's denominator, so the update equals
  the whole-batch one (as `grpo.MicrobatchedGRPOStep` on the host; here without length trimming).

  Metrics: GRPO's (`grpo/...`), the mean of each reward term (`reward/...`), and
  `train/success`, `train/mean_reward`, `train/mean_tool_calls`, `train/sampled_tokens`.

  Args:
    model: the policy, a Flax `Transformer` (its `apply` samples the episodes; `state.apply_fn`
      must be the same module's).
    env: the JAX-native text environment (`envs.TextEnvironment`) whose tasks `prompt_ids` index
      and whose reward terms score the episodes (weighted by its own `compose_reward` when it
      has one, else by `reward_config`).
    rollout_config: the sampling settings (episode length, tool calls, sampling temperature).
    grpo_config: the GRPO settings; `prompts_per_step` is P and `group_size` is G.
    reward_config: the weights of the reward terms, as `rewards.compose_reward` takes them.
    mesh: a device mesh (`rlagents.parallel.make_mesh`) to split the episodes over: the rows
      of the rollout, reward and update are laid out over its ('data', 'fsdp') axes and XLA
      partitions the program; the state should be placed on it (`parallel.shard_state`).
      None: wherever the inputs are.

  Raises:
    ValueError: `env` and `rollout_config` disagree on a limit.
  """
  rollout = rollout_lib.make_jit_rollout(model, env, rollout_config)
  batch_size = grpo_config.prompts_per_step * grpo_config.group_size
  micro = grpo_config.microbatch_size
  if micro and micro < batch_size:
    update = _microbatched_update(grpo_config, micro)
  else:
    update = grpo.make_grpo_step(grpo_config)  # jitted; traced inline here, without donation

  def step(state, ref_params, prompt_ids: jax.Array, key: jax.Array):
    task_ids = jnp.repeat(jnp.asarray(prompt_ids, jnp.int32), grpo_config.group_size)
    if mesh is not None:
      rows = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(mesh.axis_names))
      task_ids = jax.lax.with_sharding_constraint(task_ids, rows)
    episodes = rollout(state.params, task_ids, key)
    terms = jax.vmap(env.reward_terms)(episodes)
    reward = envs.compose_text_reward(
        env, terms, lambda t: rewards.compose_reward(t, reward_config))
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


def _microbatched_update(config: grpo.GRPOConfig, microbatch_size: int):
  """GRPO's update with gradients summed over `lax.scan`ned micro-batches (pure, jittable).

  On CPU a whole `[N, L]` batch at once runs several times slower than the same rows in
  micro-batches of 16 (measured: 64 x 128 tokens, 3.5 s against 4 x 0.6 s).
  """

  def update(state, ref_params, batch):
    batch = grpo._with_advantages(batch, config)  # pylint: disable=protected-access
    rows, length = batch["tokens"].shape
    mask = batch["loss_mask"]
    if config.aggregation == "token_mean":
      per_row = mask.sum(axis=1)
    elif config.aggregation == "seq_mean_token_mean":
      per_row = (mask.sum(axis=1) > 0).astype(jnp.float32)
    else:  # seq_sum_max_len: a mean over rows of a constant-normalised sum.
      per_row = jnp.ones(rows, jnp.float32)
    chunks = jax.tree.map(lambda x: x.reshape(rows // microbatch_size, microbatch_size,
                                              *x.shape[1:]), batch)
    weights = (per_row.reshape(-1, microbatch_size).sum(axis=1)
               / jnp.maximum(per_row.sum(), 1e-9))

    def accumulate(total, chunk_and_weight):
      chunk, weight = chunk_and_weight
      grad_fn = jax.value_and_grad(grpo.grpo_loss, has_aux=True)
      (_, metrics), grads = grad_fn(state.params, state.apply_fn, ref_params, chunk,
                                    config=config, max_len=length)
      scaled = jax.tree.map(lambda x: x * weight, (grads, metrics))
      return jax.tree.map(jnp.add, total, scaled), None

    zero_metrics = jax.eval_shape(
        lambda: grpo.grpo_loss(state.params, state.apply_fn, ref_params,
                               jax.tree.map(lambda x: x[0], chunks), config=config,
                               max_len=length)[1])
    zeros = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype),
                         (state.params, zero_metrics))
    (grads, metrics), _ = jax.lax.scan(accumulate, zeros, (chunks, weights))
    metrics = dict(metrics)
    metrics["grpo/grad_norm"] = sft.global_norm(grads)
    metrics["grpo/advantage_abs_mean"] = jnp.abs(batch["advantages"]).mean()
    return state.apply_gradients(grads=grads), metrics

  return update
