"""Advantage estimators: group-relative baselines (GRPO, Dr. GRPO, RLOO, REINFORCE++) and GAE.

Group estimators take rewards `[N]` ordered group-major: the `group_size` completions of one prompt
are contiguous, so `rewards.reshape(num_groups, group_size)` puts one prompt per row. A group whose
rewards are all equal carries no learning signal; every group estimator gives it exactly zero
advantage (the formulas' value in exact arithmetic, enforced so float rounding of the mean cannot
leave noise that a tiny std would then amplify).
"""

import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import ArrayLike

from rlagents.losses import _validation


def grouped_rewards(rewards: ArrayLike, group_size: int,
                    minimum_group_size: int = 2) -> jax.Array:
  """Validates `rewards` `[N]`; returns `[N // group_size, group_size]`. Shared with _dapo."""
  rewards = _validation.as_float(rewards, "rewards", allow_integers=True)
  _validation.check_rank(rewards, 1, "rewards")
  group_size = _validation.check_group_size(group_size, minimum_group_size)
  if rewards.shape[0] % group_size:
    raise ValueError(
        f"`rewards` has {rewards.shape[0]} entries, not a multiple of group_size={group_size}; "
        "rewards must be ordered group-major (num_groups * group_size).")
  return rewards.reshape(-1, group_size)


def _zero_constant_groups(advantages: jax.Array, grouped: jax.Array) -> jax.Array:
  """Sets the advantages of groups whose rewards are all equal to exactly 0; flattens to `[N]`."""
  constant = grouped.max(axis=1, keepdims=True) == grouped.min(axis=1, keepdims=True)
  return jnp.where(constant, jnp.zeros_like(advantages), advantages).reshape(-1)


def group_relative_advantages(rewards: ArrayLike, *, group_size: int,
                              epsilon: float = 1e-6) -> jax.Array:
  """Group-relative advantages of GRPO: rewards standardized within each prompt's group.

  Reference: Shao et al. 2024, "DeepSeekMath", https://arxiv.org/abs/2402.03300 (section 4.1.2).

      A_i = (r_i - mean_g(r)) / (std_g(r) + epsilon)

  where g is the group of completion i and std is the population standard deviation (ddof=0,
  dividing by group_size). Groups whose rewards are all equal get exactly 0.

  Args:
    rewards: `[N]` rewards (floating, or integers / bools that are converted), N = num_groups *
      group_size, ordered group-major.
    group_size: completions per prompt, >= 2 (static: bind with functools.partial before jit).
    epsilon: added to the std so equal-reward groups do not divide by zero.

  Returns:
    `[N]` advantages, float32 (or the rewards' wider float dtype).
  """
  grouped = grouped_rewards(rewards, group_size)
  mean = grouped.mean(axis=1, keepdims=True)
  std = grouped.std(axis=1, keepdims=True)
  return _zero_constant_groups((grouped - mean) / (std + epsilon), grouped)


def dr_grpo_advantages(rewards: ArrayLike, *, group_size: int) -> jax.Array:
  """Dr. GRPO advantages: the group mean as baseline, without dividing by the group std.

  Reference: Liu et al. 2025, "Understanding R1-Zero-Like Training: A Critical Perspective"
  (Dr. GRPO), https://arxiv.org/abs/2503.20783. Dropping the std removes GRPO's question-level
  difficulty bias.

      A_i = r_i - mean_g(r)

  Args:
    rewards: `[N]` rewards (floating, or integers / bools that are converted), N = num_groups *
      group_size, ordered group-major.
    group_size: completions per prompt, >= 2 (static).

  Returns:
    `[N]` advantages.
  """
  grouped = grouped_rewards(rewards, group_size)
  return _zero_constant_groups(grouped - grouped.mean(axis=1, keepdims=True), grouped)


def rloo_advantages(rewards: ArrayLike, *, group_size: int) -> jax.Array:
  """REINFORCE leave-one-out advantages: each completion's baseline is the mean of the others.

  References: Kool et al. 2019, "Buy 4 REINFORCE Samples, Get a Baseline for Free!",
  https://openreview.net/forum?id=r1lgTGL5DE; Ahmadian et al. 2024, "Back to Basics",
  https://arxiv.org/abs/2402.14740.

      A_i = r_i - (1 / (K - 1)) sum_{j in g, j != i} r_j  =  K / (K - 1) * (r_i - mean_g(r))

  with K = group_size.

  Args:
    rewards: `[N]` rewards (floating, or integers / bools that are converted), N = num_groups *
      group_size, ordered group-major.
    group_size: completions per prompt, >= 2 (static).

  Returns:
    `[N]` advantages.
  """
  grouped = grouped_rewards(rewards, group_size)
  leave_one_out_mean = (grouped.sum(axis=1, keepdims=True) - grouped) / (group_size - 1)
  return _zero_constant_groups(grouped - leave_one_out_mean, grouped)


def reinforce_pp_advantages(rewards: ArrayLike, *, group_size: int, epsilon: float = 1e-6,
                            group_baseline: bool = True) -> jax.Array:
  """REINFORCE++ advantages: normalized with the mean and std of the whole batch.

  Reference: Hu 2025, "REINFORCE++", https://arxiv.org/abs/2501.03262.

  With `group_baseline=True` (REINFORCE++-baseline, the paper's variant for several completions
  per prompt) the group mean is subtracted first and the result whitened over the batch:

      c_i = r_i - mean_g(r);   A_i = (c_i - mean_batch(c)) / (std_batch(c) + epsilon)

  mean_batch(c) is zero by construction, so it is not subtracted: this keeps the advantage of an
  equal-reward group exactly 0. With `group_baseline=False` (the original REINFORCE++, no group
  baseline) the raw rewards are whitened over the batch,

      A_i = (r_i - mean_batch(r)) / (std_batch(r) + epsilon),

  and an equal-reward group is then zero only if the whole batch is. Both stds are population
  stds (ddof=0).

  Args:
    rewards: `[N]` rewards (floating, or integers / bools that are converted), N = num_groups *
      group_size, ordered group-major.
    group_size: completions per prompt (static); >= 2 with `group_baseline=True`.
    epsilon: added to the batch std.
    group_baseline: subtract each group's mean before whitening.

  Returns:
    `[N]` advantages.
  """
  if not group_baseline:
    flat = grouped_rewards(rewards, group_size, minimum_group_size=1).reshape(-1)
    return (flat - flat.mean()) / (flat.std() + epsilon)
  grouped = grouped_rewards(rewards, group_size)
  centred = _zero_constant_groups(grouped - grouped.mean(axis=1, keepdims=True), grouped)
  return centred / (centred.std() + epsilon)


def gae_advantages(rewards: ArrayLike, values: ArrayLike, dones: ArrayLike, *, discount: float,
                   gae_lambda: float, bootstrap_value: ArrayLike,
                   truncations: ArrayLike | None = None,
                   truncation_values: ArrayLike | None = None) -> tuple[jax.Array, jax.Array]:
  """Generalized advantage estimation over a time-indexed trajectory, with done and truncation.

  Reference: Schulman et al. 2016, "High-Dimensional Continuous Control Using Generalized Advantage
  Estimation", https://arxiv.org/abs/1506.02438.

  Step t is the transition s_t -> s_{t+1} with reward r_t. With d_t = dones[t] (s_{t+1} is
  terminal), u_t = truncations[t] (the episode was cut after step t, s_{t+1} is not terminal) and

      next_t  = truncation_values[t]   if u_t
                values[t + 1]          if t < T - 1
                bootstrap_value        if t = T - 1
      delta_t = r_t + discount * (1 - d_t) * next_t - values[t]
      A_t     = delta_t + discount * gae_lambda * (1 - d_t) * (1 - u_t) * A_{t+1},   A_T = 0
      returns = A + values

  A terminal step never bootstraps; a truncated step bootstraps from the value of the state where
  the episode was cut (`truncation_values`, since in auto-reset layouts values[t + 1] already
  belongs to the next episode); neither lets the sum run into the next episode. A step both done
  and truncated counts as done. The outputs are targets: their gradients are stopped.

  Args:
    rewards: `[T]` (one trajectory; vmap for a batch) or `[T, B]` (time-major batch); floating,
      or integers / bools that are converted.
    values: V(s_t), same shape as `rewards`.
    dones: termination flags (bool or 0/1), same shape as `rewards`.
    discount: gamma in [0, 1].
    gae_lambda: lambda in [0, 1].
    bootstrap_value: V(s_T), `[]` for `[T]` inputs or `[B]` for `[T, B]`.
    truncations: optional truncation flags, same shape as `rewards`.
    truncation_values: V of the state where each truncated episode was cut, same shape as
      `rewards` (read only where `truncations` is set); required with `truncations`.

  Returns:
    (advantages, returns), each the shape of `rewards`.
  """
  rewards = _validation.as_float(rewards, "rewards", allow_integers=True)
  _validation.check_rank(rewards, (1, 2), "rewards")
  values = _validation.as_float(values, "values")
  _validation.check_shape(values, rewards.shape, "values", "rewards")
  dones = jnp.asarray(dones)
  _validation.check_shape(dones, rewards.shape, "dones", "rewards")
  bootstrap_value = _validation.as_float(bootstrap_value, "bootstrap_value")
  _validation.check_shape(bootstrap_value, rewards.shape[1:], "bootstrap_value", "rewards[0]")
  _validation.check_number(discount, "discount", low=0, high=1)
  _validation.check_number(gae_lambda, "gae_lambda", low=0, high=1)
  not_done = 1.0 - (dones != 0).astype(rewards.dtype)

  next_values = jnp.concatenate([values[1:], bootstrap_value[None]], axis=0)
  not_cut = not_done
  if truncations is not None:
    truncations = jnp.asarray(truncations)
    _validation.check_shape(truncations, rewards.shape, "truncations", "rewards")
    if truncation_values is None:
      raise ValueError(
          "`truncations` needs `truncation_values`: the value of the state where each truncated "
          "episode was cut (values[t + 1] already belongs to the next episode).")
    truncation_values = _validation.as_float(truncation_values, "truncation_values")
    _validation.check_shape(truncation_values, rewards.shape, "truncation_values", "rewards")
    truncated = truncations != 0
    next_values = jnp.where(truncated, truncation_values, next_values)
    not_cut = not_done * (1.0 - truncated.astype(rewards.dtype))
  elif truncation_values is not None:
    raise ValueError("`truncation_values` is only read where `truncations` is set; pass both.")

  deltas = rewards + discount * not_done * next_values - values

  def backward_step(next_advantage, step):
    delta, continues = step
    advantage = delta + discount * gae_lambda * continues * next_advantage
    return advantage, advantage

  _, advantages = lax.scan(backward_step, jnp.zeros_like(bootstrap_value), (deltas, not_cut),
                           reverse=True)
  returns = advantages + values
  return lax.stop_gradient(advantages), lax.stop_gradient(returns)
