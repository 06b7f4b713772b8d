"""How per-token loss values become one scalar: the aggregation modes of the field.

    token_mean           sum_{i,t} m_it l_it / sum_{i,t} m_it                (DAPO)
    seq_mean_token_mean  mean_{i: |o_i|>0} [sum_t m_it l_it / sum_t m_it]   (GRPO, DeepSeekMath)
    seq_sum_max_len      mean_i [sum_t m_it l_it / max_len]                 (Dr. GRPO)
"""

import jax
from jax.typing import ArrayLike

from rlagents.losses import _validation

AGGREGATIONS = ("token_mean", "seq_mean_token_mean", "seq_sum_max_len")


def aggregate_loss(values: ArrayLike, loss_mask: ArrayLike, *, aggregation: str,
                   max_len: float | None = None) -> jax.Array:
  """Reduces masked per-token values `[B, T]` to a scalar with one of the field's aggregations.

  References: token-mean as in DAPO (Yu et al. 2025, https://arxiv.org/abs/2503.14476); the mean of
  per-sequence token means as in GRPO (Shao et al. 2024, https://arxiv.org/abs/2402.03300); the
  per-sequence sum over a constant `max_len` as in Dr. GRPO (Liu et al. 2025,
  https://arxiv.org/abs/2503.20783).

  With m the mask and l the values:

      'token_mean':          sum_{i,t} m_it l_it / sum_{i,t} m_it
      'seq_mean_token_mean': mean over sequences with sum_t m_it > 0 of sum_t m_it l_it / sum_t m_it
      'seq_sum_max_len':     (1 / B) sum_i sum_t m_it l_it / max_len

  Sequences with no masked token (padding rows) are left out of the 'seq_mean_token_mean' mean;
  'seq_sum_max_len' divides by the constant B * max_len. An all-zero mask gives 0, not nan. Masked
  entries contribute exactly zero value and zero gradient, even when they hold inf or nan. Under
  data parallelism each device aggregates its own shard.

  Args:
    values: `[B, T]` floating per-token values (e.g. per-token losses).
    loss_mask: `[B, T]` bool or floating; 1 on tokens that count, 0 elsewhere (floating masks act
      as weights).
    aggregation: one of 'token_mean', 'seq_mean_token_mean', 'seq_sum_max_len'.
    max_len: the constant normalizer of 'seq_sum_max_len' (e.g. the generation budget in tokens);
      required there, ignored otherwise.

  Returns:
    A float32 scalar.
  """
  _validation.check_choice(aggregation, AGGREGATIONS, "aggregation")
  values = _validation.as_float(values, "values")
  _validation.check_rank(values, 2, "values")
  weights = _validation.mask_weights(loss_mask, "loss_mask")
  _validation.check_shape(weights, values.shape, "loss_mask", "values")
  if aggregation == "seq_sum_max_len":
    if max_len is None:
      raise ValueError("aggregation='seq_sum_max_len' needs `max_len` (the constant normalizer).")
    _validation.check_number(max_len, "max_len", low=0, low_inclusive=False)

  if aggregation == "token_mean":
    return masked_token_mean(values, weights)
  per_sequence_sum = (_validation.where_masked(values, weights) * weights).sum(axis=-1)
  if aggregation == "seq_sum_max_len":
    return per_sequence_sum.mean() / max_len
  tokens = weights.sum(axis=-1)
  per_sequence_mean = per_sequence_sum / _validation.safe_denominator(tokens)
  has_tokens = (tokens != 0).astype(values.dtype)
  return (per_sequence_mean * has_tokens).sum() / _validation.safe_denominator(has_tokens.sum())


def masked_token_mean(values: jax.Array, weights: jax.Array) -> jax.Array:
  """The 'token_mean' of already-validated `[B, T]` values and float weights; used for metrics."""
  weighted = _validation.where_masked(values, weights) * weights
  return weighted.sum() / _validation.safe_denominator(weights.sum())
