"""The train state and optimizer shared by the learners."""

import dataclasses

from flax.training import train_state
import jax
import jax.numpy as jnp
import optax

from rlagents.networks import token_logprobs


@dataclasses.dataclass(frozen=True, kw_only=True)
class OptimizerConfig:
  """AdamW with linear warm-up and cosine decay.

  Attributes:
    learning_rate: peak learning rate.
    warmup_steps: linear warm-up from 0 to the peak.
    decay_steps: cosine decay to `final_fraction * learning_rate` after warm-up (0: constant).
    final_fraction: learning rate at the end of the decay, as a fraction of the peak.
    weight_decay: decoupled weight decay.
    max_grad_norm: global gradient-norm clip (0: off).
    b2: Adam's second-moment decay.
  """
  learning_rate: float = 1e-3
  warmup_steps: int = 0
  decay_steps: int = 0
  final_fraction: float = 0.1
  weight_decay: float = 0.0
  max_grad_norm: float = 1.0
  b2: float = 0.99

  def __post_init__(self):
    if self.learning_rate <= 0:
      raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}")
    for name in ("warmup_steps", "decay_steps", "weight_decay", "max_grad_norm"):
      if getattr(self, name) < 0:
        raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
    if not 0 <= self.final_fraction <= 1:
      raise ValueError(f"final_fraction must be in [0, 1], got {self.final_fraction}")


def make_optimizer(config: OptimizerConfig) -> optax.GradientTransformation:
  """AdamW with warm-up, cosine decay and gradient clipping, as `config` says.

  Args:
    config: the optimizer settings.
  """
  if config.decay_steps:
    schedule = optax.warmup_cosine_decay_schedule(
        0.0, config.learning_rate, max(config.warmup_steps, 1),
        config.warmup_steps + config.decay_steps, config.learning_rate * config.final_fraction)
  elif config.warmup_steps:
    schedule = optax.linear_schedule(0.0, config.learning_rate, config.warmup_steps)
  else:
    schedule = config.learning_rate
  parts = [optax.clip_by_global_norm(config.max_grad_norm)] if config.max_grad_norm else []
  parts.append(optax.adamw(schedule, b2=config.b2, weight_decay=config.weight_decay))
  return optax.chain(*parts)


def create_train_state(model, params, config: OptimizerConfig) -> train_state.TrainState:
  """A flax `TrainState` for `model` (its `apply`), `params` and the optimizer of `config`.

  Args:
    model: a Flax module, e.g. `networks.Transformer`.
    params: its parameters (the state takes them over; pass a copy to keep the originals, since
      the update steps donate the state's buffers).
    config: the optimizer settings.
  """
  return train_state.TrainState.create(
      apply_fn=model.apply, params=params, tx=make_optimizer(config))


def forward_logprobs(apply_fn, params, tokens: jax.Array) -> jax.Array:
  """`[B, T]` log-probability of each token given those before it (0 at position 0).

  The learner's view of a batch: one causal forward pass over whole episodes. The sampler's
  recorded log-probs equal it for the same weights (`tests/learners/test_logprob_exactness.py`).

  Args:
    apply_fn: the model's apply, `apply_fn(params, tokens, positions) -> (logits, ...)`.
    params: the model's parameters.
    tokens: `[B, T]` int32 token ids.
  """
  positions = jnp.broadcast_to(jnp.arange(tokens.shape[1], dtype=jnp.int32), tokens.shape)
  logits, _ = apply_fn(params, tokens, positions)
  return token_logprobs(logits, tokens)
