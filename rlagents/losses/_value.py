"""The critic's loss: squared error to the returns, optionally clipped around the old values."""

import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import ArrayLike

from rlagents.losses import _aggregation
from rlagents.losses import _validation


def value_loss(values: ArrayLike, old_values: ArrayLike, returns: ArrayLike, loss_mask: ArrayLike,
               *, clip_epsilon: float | None = None, aggregation: str = "token_mean",
               max_len: float | None = None) -> tuple[jax.Array, dict[str, jax.Array]]:
  """Value-function regression loss with optional PPO-style value clipping.

  References: Schulman et al. 2017 (PPO), https://arxiv.org/abs/1707.06347; value clipping as in
  the OpenAI baselines PPO2 and Engstrom et al. 2020, "Implementation Matters in Deep Policy
  Gradients", https://arxiv.org/abs/2005.12729.

      l_t = 1/2 (V_t - R_t)^2                                          clip_epsilon = None
      l_t = 1/2 max((V_t - R_t)^2, (V^clip_t - R_t)^2),
            V^clip_t = V^old_t + clip(V_t - V^old_t, -eps, eps)        clip_epsilon = eps
      loss = aggregate(l, loss_mask, aggregation)

  `old_values` and `returns` are targets: their gradients are stopped. Masked tokens get exactly
  zero value and gradient.

  Args:
    values: `[B, T]` current value predictions (a time-major `[T, B]` layout works with
      aggregation='token_mean').
    old_values: `[B, T]` predictions of the critic that collected the data.
    returns: `[B, T]` regression targets (e.g. from `gae_advantages`).
    loss_mask: `[B, T]` bool or floating.
    clip_epsilon: None, or eps > 0.
    aggregation: 'token_mean', 'seq_mean_token_mean' or 'seq_sum_max_len'.
    max_len: constant normalizer for aggregation='seq_sum_max_len'.

  Returns:
    (loss, metrics) with token means over the mask: 'value_loss', 'value_clip_fraction' (tokens
    where the clipped error is the larger; 0 without clipping), 'explained_variance'
    (1 - Var(R - V) / Var(R)).
  """
  _validation.check_choice(aggregation, _aggregation.AGGREGATIONS, "aggregation")
  values = _validation.as_float(values, "values")
  _validation.check_rank(values, 2, "values")
  old_values = _validation.as_float(old_values, "old_values")
  _validation.check_shape(old_values, values.shape, "old_values", "values")
  returns = _validation.as_float(returns, "returns")
  _validation.check_shape(returns, values.shape, "returns", "values")
  weights = _validation.mask_weights(loss_mask, "loss_mask")
  _validation.check_shape(weights, values.shape, "loss_mask", "values")
  if clip_epsilon is not None:
    _validation.check_number(clip_epsilon, "clip_epsilon", low=0, low_inclusive=False)

  values = _validation.where_masked(values, weights)
  old_values = _validation.where_masked(lax.stop_gradient(old_values), weights)
  returns = _validation.where_masked(lax.stop_gradient(returns), weights)
  squared_error = jnp.square(values - returns)
  if clip_epsilon is None:
    per_token = 0.5 * squared_error
    clipped = jnp.zeros_like(values, dtype=bool)
  else:
    clipped_values = old_values + jnp.clip(values - old_values, -clip_epsilon, clip_epsilon)
    clipped_squared_error = jnp.square(clipped_values - returns)
    per_token = 0.5 * jnp.maximum(squared_error, clipped_squared_error)
    clipped = clipped_squared_error > squared_error
  loss = _aggregation.aggregate_loss(per_token, weights, aggregation=aggregation, max_len=max_len)

  def token_mean(x):
    return _aggregation.masked_token_mean(lax.stop_gradient(x.astype(values.dtype)), weights)

  residual_variance = token_mean(jnp.square(returns - values)) - jnp.square(
      token_mean(returns - values))
  return_variance = token_mean(jnp.square(returns)) - jnp.square(token_mean(returns))
  metrics = {
      "value_loss": loss,
      "value_clip_fraction": token_mean(clipped),
      "explained_variance": 1.0 - residual_variance / _validation.safe_denominator(
          return_variance),
  }
  return loss, metrics
