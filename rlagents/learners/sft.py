"""Supervised fine-tuning on demonstrations: masked next-token cross-entropy."""

import dataclasses

import jax
import jax.numpy as jnp

from rlagents import parallel
from rlagents.learners import _state


@dataclasses.dataclass(frozen=True, kw_only=True)
class SFTConfig:
  """Supervised warm start on demonstrations.

  Attributes:
    num_demonstrations: demonstration episodes generated from the training split.
    num_steps: optimizer steps.
    batch_size: episodes per step.
    optimizer: optimizer settings.
    length_bucket: each batch is drawn from the episodes whose length rounds up to the same
      multiple of this many tokens, so padding stays small (0: drawn from all episodes). With
      few, very different lengths (e.g. a short guess and a long tool episode) a batch then
      holds one kind only; 0 mixes them.
    successful_only: train on the demonstrations whose answer verified only (filtered
      imitation: the slips the expert recovered from stay in, the episodes it failed are left
      out); every demonstration is still generated, logged and counted in the expert's success.
  """
  num_demonstrations: int = 8000
  num_steps: int = 700
  batch_size: int = 64
  optimizer: _state.OptimizerConfig = _state.OptimizerConfig(
      learning_rate=2e-3, warmup_steps=100, decay_steps=600)
  length_bucket: int = 32
  successful_only: bool = False

  def __post_init__(self):
    for name in ("num_demonstrations", "batch_size"):
      if getattr(self, name) < 1:
        raise ValueError(f"SFTConfig.{name} must be >= 1, got {getattr(self, name)}")
    if self.num_steps < 0:
      raise ValueError(f"SFTConfig.num_steps must be >= 0, got {self.num_steps}")
    if self.length_bucket < 0:
      raise ValueError(f"SFTConfig.length_bucket must be >= 0, got {self.length_bucket}")


def sft_loss(params, apply_fn, tokens: jax.Array, loss_mask: jax.Array):
  """Mean negative log-likelihood of the tokens where `loss_mask` is 1.

  Args:
    tokens: `[B, T]` int32 episodes.
    loss_mask: `[B, T]` float32, 1 on the demonstrator's own tokens (not prompt or observations).

  Returns:
    `(loss, metrics)`.
  """
  logp = _state.forward_logprobs(apply_fn, params, tokens)
  num_tokens = jnp.maximum(loss_mask.sum(), 1.0)
  nll = -(logp * loss_mask).sum() / num_tokens
  return nll, {"sft/nll": nll, "sft/tokens": loss_mask.sum()}


def _sft_grads(state, params, batch, *, axis_name=None):
  """The gradient part of `sft_update`: this shard's mean gradient, its token count, metrics."""
  grad_fn = jax.value_and_grad(sft_loss, has_aux=True)
  (_, metrics), grads = grad_fn(params, state.apply_fn, batch["tokens"], batch["loss_mask"])
  tokens = batch["loss_mask"].sum()
  metrics = parallel.reduce_across(metrics, tokens, axis_name)
  if axis_name is not None:
    metrics["sft/tokens"] = jax.lax.psum(tokens, axis_name)
  return grads, tokens, metrics


def _sft_apply(state, grads, metrics):
  metrics = {**metrics, "sft/grad_norm": global_norm(grads)}
  return state.apply_gradients(grads=grads), metrics


def sft_split_update() -> parallel.SplitUpdate:
  """`sft_update` as its gradient and optimizer parts (`parallel.SplitUpdate`).

  Called as `split(state, batch, axis_name=None)` it is `sft_update` (without the unused key);
  given to `parallel.make_update_step` on an fsdp mesh it keeps the parameters and optimizer
  state sharded.
  """
  return parallel.SplitUpdate(grads=_sft_grads, apply=_sft_apply)


def sft_update(state, batch, key=None, *, axis_name=None):
  """One optimizer step; pure `(state, batch, key) -> (state, metrics)`.

  Under a device map (`rlagents.parallel`) `batch` is this device's shard and `axis_name` the
  mapped axis: gradients and metrics are averaged weighted by token counts, so the update equals
  the one on the whole batch.

  Args:
    state: the `TrainState`.
    batch: `tokens` [B, T] int32 and `loss_mask` [B, T] float32.
    key: unused (the step is deterministic); kept for the common update signature.
    axis_name: the mapped device axis, or None on one device.
  """
  del key  # deterministic
  return sft_split_update()(state, batch, axis_name=axis_name)


def global_norm(tree) -> jax.Array:
  """The global L2 norm of every leaf of `tree` (e.g. gradients), a scalar.

  Args:
    tree: a pytree of arrays.
  """
  return jnp.sqrt(sum(jnp.sum(jnp.square(x)) for x in jax.tree.leaves(tree)))


def make_sft_step():
  """The jitted SFT update; the state buffer is donated."""
  return jax.jit(sft_update, donate_argnums=(0,))

