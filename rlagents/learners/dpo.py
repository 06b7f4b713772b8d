"""Offline preference optimization: DPO on pairs, KTO on binary feedback, with a frozen reference.

Both train the policy directly from data (no sampling, no reward model), against a frozen
reference policy (usually the SFT policy). A completion's log-probability is the sum over its
policy tokens (`mask`: observations, prompt and padding excluded) of the token log-probs.

    DPO: losses.dpo_loss(log pi(y_w|x), log pi(y_l|x), log ref(y_w|x), log ref(y_l|x))
    KTO: losses.kto_loss(log pi(y|x), log ref(y|x), desirable, z0),
         z0 = losses.kto_reference_kl over mismatched (prompt, completion) pairs

The result is a policy to evaluate or to start RL from (`rlagents.pipeline` runs SFT -> DPO or
KTO with `--config.algorithm=dpo|kto`).
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from rlagents import losses
from rlagents import episodes as episodes_lib
from rlagents.learners import _state
from rlagents.learners import sft


@dataclasses.dataclass(frozen=True, kw_only=True)
class DPOConfig:
  """DPO or KTO training.

  Attributes:
    num_steps: optimizer steps.
    batch_size: pairs (DPO) or completions (KTO) per step.
    beta: inverse temperature of the implicit reward beta * log(pi / ref).
    dpo_variant: 'sigmoid' (DPO) or 'ipo'.
    label_smoothing: DPO's assumed label-flip probability.
    desirable_weight: KTO's lambda_D.
    undesirable_weight: KTO's lambda_U.
    optimizer: optimizer settings.
  """
  num_steps: int = 200
  batch_size: int = 32
  beta: float = 0.1
  dpo_variant: str = "sigmoid"
  label_smoothing: float = 0.0
  desirable_weight: float = 1.0
  undesirable_weight: float = 1.0
  optimizer: _state.OptimizerConfig = _state.OptimizerConfig(learning_rate=1e-4,
                                                             warmup_steps=10)

  def __post_init__(self):
    if self.num_steps < 0:
      raise ValueError(f"DPOConfig.num_steps must be >= 0, got {self.num_steps}")
    if self.batch_size < 2:
      raise ValueError(f"DPOConfig.batch_size must be >= 2, got {self.batch_size}")
    if self.beta <= 0:
      raise ValueError(f"DPOConfig.beta must be > 0, got {self.beta}")
    if self.dpo_variant not in losses.DPO_VARIANTS:
      raise ValueError(f"DPOConfig.dpo_variant must be one of {', '.join(losses.DPO_VARIANTS)}, "
                       f"got {self.dpo_variant!r}")
    if not 0 <= self.label_smoothing <= 0.5:
      raise ValueError(f"DPOConfig.label_smoothing must be in [0, 0.5], got "
                       f"{self.label_smoothing}")
    if self.desirable_weight < 0 or self.undesirable_weight < 0:
      raise ValueError("DPOConfig.desirable_weight and undesirable_weight must be >= 0")


def sequence_logprobs(apply_fn, params, tokens: jax.Array, mask: jax.Array) -> jax.Array:
  """`[B]` log-probability of each row's masked tokens (the completion's policy tokens).

  Args:
    apply_fn: the model's apply function.
    params: the model's parameters.
    tokens: `[B, T]` int32 sequences.
    mask: `[B, T]` float32, 1 on the tokens whose log-probabilities are summed.
  """
  return (_state.forward_logprobs(apply_fn, params, tokens) * mask).sum(axis=1)


def dpo_objective(params, apply_fn, ref_params, batch, *, config: DPOConfig):
  """`(loss, metrics)` of a batch from `encode_pairs`; metrics are prefixed `dpo/`.

  Args:
    params: the policy's parameters (differentiated).
    apply_fn: the model's apply function.
    ref_params: the frozen reference policy's parameters.
    batch: `chosen_tokens`, `rejected_tokens` `[B, T]` int32 and `chosen_mask`,
      `rejected_mask` `[B, T]` float32.
    config: the DPO settings (`beta`, `label_smoothing`, `dpo_variant`).
  """
  n = len(batch["chosen_tokens"])
  tokens = jnp.concatenate([batch["chosen_tokens"], batch["rejected_tokens"]])
  mask = jnp.concatenate([batch["chosen_mask"], batch["rejected_mask"]])
  logp = sequence_logprobs(apply_fn, params, tokens, mask)
  ref_logp = jax.lax.stop_gradient(sequence_logprobs(apply_fn, ref_params, tokens, mask))
  loss, metrics = losses.dpo_loss(logp[:n], logp[n:], ref_logp[:n], ref_logp[n:],
                                  beta=config.beta, label_smoothing=config.label_smoothing,
                                  variant=config.dpo_variant)
  return loss, {f"dpo/{k}": v for k, v in metrics.items()}


def kto_objective(params, apply_fn, ref_params, batch, *, config: DPOConfig):
  """`(loss, metrics)` of a batch from `encode_feedback`; metrics are prefixed `kto/`.

  Args:
    params: the policy's parameters (differentiated).
    apply_fn: the model's apply function.
    ref_params: the frozen reference policy's parameters.
    batch: `tokens`, `kl_tokens` `[B, T]` int32, `mask`, `kl_mask` `[B, T]` float32 and
      `desirable` `[B]` float32.
    config: the KTO settings (`beta`, `desirable_weight`, `undesirable_weight`).
  """
  n = len(batch["tokens"])
  tokens = jnp.concatenate([batch["tokens"], batch["kl_tokens"]])
  mask = jnp.concatenate([batch["mask"], batch["kl_mask"]])
  logp = sequence_logprobs(apply_fn, params, tokens, mask)
  ref_logp = jax.lax.stop_gradient(sequence_logprobs(apply_fn, ref_params, tokens, mask))
  z0 = losses.kto_reference_kl(logp[n:], ref_logp[n:])
  loss, metrics = losses.kto_loss(logp[:n], ref_logp[:n], batch["desirable"], z0,
                                  beta=config.beta, desirable_weight=config.desirable_weight,
                                  undesirable_weight=config.undesirable_weight)
  return loss, {f"kto/{k}": v for k, v in metrics.items()}


def _make_step(objective, config: DPOConfig, prefix: str):
  def update(state, ref_params, batch):
    grad_fn = jax.value_and_grad(objective, has_aux=True)
    (_, metrics), grads = grad_fn(state.params, state.apply_fn, ref_params, batch, config=config)
    metrics[f"{prefix}/grad_norm"] = sft.global_norm(grads)
    return state.apply_gradients(grads=grads), metrics

  return jax.jit(update, donate_argnums=(0,))


def make_dpo_step(config: DPOConfig):
  """Jitted `(state, ref_params, batch) -> (state, metrics)`; `batch` from `encode_pairs`.

  The state's buffers are donated.

  Args:
    config: the DPO settings.
  """
  return _make_step(dpo_objective, config, "dpo")


def make_kto_step(config: DPOConfig):
  """Jitted `(state, ref_params, batch) -> (state, metrics)`; `batch` from `encode_feedback`.

  The state's buffers are donated.

  Args:
    config: the KTO settings.
  """
  return _make_step(kto_objective, config, "kto")


def draw_batch(data: dict[str, np.ndarray], batch_size: int,
               rng: np.random.Generator) -> dict[str, np.ndarray]:
  """One batch of `batch_size` rows drawn with replacement from `data` (a permutation of all N
  rows when N is at most `batch_size`), trimmed to its longest sequence.

  Args:
    data: arrays with N rows (from `encode_pairs` or `encode_feedback`).
    batch_size: rows to draw.
    rng: draws the rows.
  """
  n = len(next(iter(data.values())))
  rows = rng.integers(n, size=batch_size) if n > batch_size else rng.permutation(n)
  return episodes_lib.trim_to_longest({k: v[rows] for k, v in data.items()})


def train_offline(step, state, ref_params, data: dict[str, np.ndarray], *, num_steps: int,
                  batch_size: int, rng_for_step, start: int = 0, on_step=None):
  """Host loop: `num_steps - start` updates on batches drawn from `data`; returns the state.

  `rng_for_step(step)` gives the generator that draws step `step`'s batch (so a resumed run
  draws the same batches); `on_step(done, state, metrics)` is called after each update.

  Args:
    step: the update, from `make_dpo_step` or `make_kto_step`.
    state: the policy's `TrainState`.
    ref_params: the frozen reference policy's parameters.
    data: the whole data set, arrays with N rows (from `encode_pairs` or `encode_feedback`).
    num_steps: the index after the last update.
    batch_size: rows per update, drawn with replacement (a permutation of all N rows when N is
      at most `batch_size`); each batch is trimmed to its longest sequence.
    rng_for_step: `step index -> np.random.Generator`.
    start: the index of the first update (> 0 when resuming).
    on_step: optional `(done, state, metrics)` callback, `done` the updates made so far.
  """
  for step_index in range(start, num_steps):
    batch = draw_batch(data, batch_size, rng_for_step(step_index))
    state, metrics = step(state, ref_params, batch)
    if on_step is not None:
      on_step(step_index + 1, state, metrics)
  return state
