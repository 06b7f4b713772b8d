"""GRPO: group-relative policy optimization with a clipped ratio and KL to a reference.

For each prompt the rollout samples a group of `group_size` episodes; the advantage of an episode
is its reward relative to its group's (Shao et al., 2024, DeepSeekMath). Every policy token of the
episode shares that advantage; observation and prompt tokens are excluded by `loss_mask`:

    loss = policy_gradient_loss(logp, old_logp, A, loss_mask)      (clipped surrogate)
         + beta * aggregate(KL_estimator(logp, ref_logp), loss_mask)

The advantage estimator, the loss variant, the aggregation and the KL estimator are picked by
name from `rlagents.losses`.
"""

import dataclasses

import jax
import jax.numpy as jnp

from rlagents import losses
from rlagents.learners import _state
from rlagents.learners import sft


@dataclasses.dataclass(frozen=True, kw_only=True)
class GRPOConfig:
  """GRPO settings.

  Attributes:
    num_steps: RL steps (each samples a batch and makes `updates_per_batch` updates).
    prompts_per_step: distinct training tasks per step.
    group_size: episodes sampled per task; advantages are relative within the group.
    updates_per_batch: optimizer updates per sampled batch (1 is strictly on-policy; more makes
      the ratio clip matter).
    advantage_estimator: 'grpo', 'dr_grpo', 'rloo' or 'reinforce_pp'.
    policy_loss: 'ppo' (token ratio) or 'gspo' (sequence ratio).
    aggregation: 'token_mean', 'seq_mean_token_mean' or 'seq_sum_max_len'.
    kl_estimator: 'k1', 'k2' or 'k3'.
    kl_beta: weight of the KL to the reference (the SFT policy); 0 turns it off.
    clip_low: lower clip, the ratio is kept above `1 - clip_low`.
    clip_high: upper clip, the ratio is kept below `1 + clip_high` (DAPO's clip-higher if larger).
    advantage_epsilon: added to the group std.
    optimizer: optimizer settings.
  """
  num_steps: int = 150
  prompts_per_step: int = 16
  group_size: int = 8
  updates_per_batch: int = 1
  advantage_estimator: str = "grpo"
  policy_loss: str = "ppo"
  aggregation: str = "token_mean"
  kl_estimator: str = "k3"
  kl_beta: float = 0.02
  clip_low: float = 0.2
  clip_high: float = 0.2
  advantage_epsilon: float = 1e-6
  optimizer: _state.OptimizerConfig = _state.OptimizerConfig(learning_rate=2e-4, warmup_steps=10)

  def __post_init__(self):
    for name in ("prompts_per_step", "group_size", "updates_per_batch"):
      if getattr(self, name) < 1:
        raise ValueError(f"GRPOConfig.{name} must be >= 1, got {getattr(self, name)}")
    if self.num_steps < 0:
      raise ValueError(f"GRPOConfig.num_steps must be >= 0, got {self.num_steps}")
    if self.group_size < 2:
      raise ValueError(f"GRPOConfig.group_size must be >= 2 for group-relative advantages, "
                       f"got {self.group_size}")
    if self.kl_beta < 0:
      raise ValueError(f"GRPOConfig.kl_beta must be >= 0, got {self.kl_beta}")
    # Unknown names fail here, when the config is built, not at the first step.
    losses.get_advantage_estimator(self.advantage_estimator)
    losses.get_policy_loss(self.policy_loss)
    losses.get_kl_estimator(self.kl_estimator)
    losses.get_aggregation(self.aggregation)


def grpo_loss(params, apply_fn, batch, advantages, ref_logp, *, config: GRPOConfig):
  logp = _state.forward_logprobs(apply_fn, params, batch["tokens"])
  mask = batch["loss_mask"]
  max_len = batch["tokens"].shape[1]
  pg_loss, metrics = losses.policy_gradient_loss(
      logp, batch["old_logprobs"], advantages, mask, variant=config.policy_loss,
      clip_low=config.clip_low, clip_high=config.clip_high, aggregation=config.aggregation,
      max_len=max_len)
  kl = losses.aggregate_loss(
      losses.kl_divergence(logp, ref_logp, estimator=config.kl_estimator), mask,
      aggregation=config.aggregation, max_len=max_len)
  metrics = {f"grpo/{k}": v for k, v in metrics.items()}
  metrics["grpo/kl"] = kl
  return pg_loss + config.kl_beta * kl, metrics


def make_grpo_step(config: GRPOConfig):
  """The jitted GRPO update `(state, ref_params, batch) -> (state, metrics)`.

  `batch` holds `tokens` [N, T] int32, `loss_mask` [N, T] float32, `old_logprobs` [N, T] (the
  sampler's) and `rewards` [N], with N = prompts * group_size and each group contiguous.
  """
  estimator = losses.get_advantage_estimator(config.advantage_estimator)

  def update(state, ref_params, batch):
    advantages = estimator(batch["rewards"], group_size=config.group_size,
                           epsilon=config.advantage_epsilon)
    if config.kl_beta:
      ref_logp = jax.lax.stop_gradient(
          _state.forward_logprobs(state.apply_fn, ref_params, batch["tokens"]))
    else:
      ref_logp = batch["old_logprobs"]
    grad_fn = jax.value_and_grad(grpo_loss, has_aux=True)
    (loss, metrics), grads = grad_fn(state.params, state.apply_fn, batch, advantages, ref_logp,
                                     config=config)
    metrics["grpo/loss"] = loss
    metrics["grpo/grad_norm"] = sft.global_norm(grads)
    metrics["grpo/advantage_abs_mean"] = jnp.abs(advantages).mean()
    return state.apply_gradients(grads=grads), metrics

  return jax.jit(update, donate_argnums=(0,))
