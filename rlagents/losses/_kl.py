"""Estimators of KL(pi || pi_ref) from samples of pi: as a loss term or folded into the reward."""

import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import ArrayLike

from rlagents.losses import _aggregation
from rlagents.losses import _validation

KL_ESTIMATORS = ("k1", "k2", "k3")


def kl_divergence(logp: ArrayLike, ref_logp: ArrayLike, *, estimator: str = "k3") -> jax.Array:
  """Per-token estimates of KL(pi || pi_ref) for tokens sampled from pi.

  References: Schulman 2020, "Approximating KL Divergence", http://joschu.net/blog/kl-approx.html;
  k3 as the KL term of GRPO, Shao et al. 2024, "DeepSeekMath", https://arxiv.org/abs/2402.03300.

  With x = ref_logp - logp = log(pi_ref / pi):

      'k1': -x                     unbiased, high variance, can be negative
      'k2': x^2 / 2                biased, low variance, >= 0
      'k3': exp(x) - x - 1         unbiased, low variance, >= 0 (computed as expm1(x) - x)

  `ref_logp` is the frozen reference: its gradient is stopped. Elementwise: any shape works as
  long as the two match (typically `[B, T]`).

  Args:
    logp: log-probs of the sampled tokens under pi.
    ref_logp: log-probs of the same tokens under pi_ref, same shape.
    estimator: 'k1', 'k2' or 'k3'.

  Returns:
    The per-token estimates, the shape of `logp`.
  """
  _validation.check_choice(estimator, KL_ESTIMATORS, "estimator")
  logp = _validation.as_float(logp, "logp")
  ref_logp = _validation.as_float(ref_logp, "ref_logp")
  _validation.check_shape(ref_logp, logp.shape, "ref_logp", "logp")
  log_ratio = lax.stop_gradient(ref_logp) - logp
  if estimator == "k1":
    return -log_ratio
  if estimator == "k2":
    return 0.5 * jnp.square(log_ratio)
  return jnp.expm1(log_ratio) - log_ratio


def _check_token_arrays(logp, ref_logp, loss_mask):
  logp = _validation.as_float(logp, "logp")
  _validation.check_rank(logp, 2, "logp")
  ref_logp = _validation.as_float(ref_logp, "ref_logp")
  _validation.check_shape(ref_logp, logp.shape, "ref_logp", "logp")
  weights = _validation.mask_weights(loss_mask, "loss_mask")
  _validation.check_shape(weights, logp.shape, "loss_mask", "logp")
  return logp, ref_logp, weights


def kl_loss(logp: ArrayLike, ref_logp: ArrayLike, loss_mask: ArrayLike, *, estimator: str = "k3",
            aggregation: str = "token_mean",
            max_len: float | None = None) -> tuple[jax.Array, dict[str, jax.Array]]:
  """The KL-to-reference loss term: a per-token estimator aggregated over the masked tokens.

  Reference: GRPO, Shao et al. 2024, https://arxiv.org/abs/2402.03300 (eq. 3-4, k3 estimator).

      kl = aggregate(k(logp, ref_logp), loss_mask, aggregation)
      total_loss = pg_loss + beta * kl

  Masked tokens get exactly zero value and gradient, even when their log-probs are inf or nan.

  Args:
    logp: `[B, T]` log-probs of the sampled tokens under the policy.
    ref_logp: `[B, T]` log-probs under the frozen reference policy.
    loss_mask: `[B, T]` bool or floating.
    estimator: 'k1', 'k2' or 'k3' (see `kl_divergence`).
    aggregation: 'token_mean', 'seq_mean_token_mean' or 'seq_sum_max_len'.
    max_len: constant normalizer for aggregation='seq_sum_max_len'.

  Returns:
    (kl, metrics) with metrics {'kl': kl}.
  """
  _validation.check_choice(aggregation, _aggregation.AGGREGATIONS, "aggregation")
  logp, ref_logp, weights = _check_token_arrays(logp, ref_logp, loss_mask)
  per_token = kl_divergence(_validation.where_masked(logp, weights),
                            _validation.where_masked(ref_logp, weights), estimator=estimator)
  kl = _aggregation.aggregate_loss(per_token, weights, aggregation=aggregation, max_len=max_len)
  return kl, {"kl": kl}


def kl_penalty_in_reward(rewards_per_token: ArrayLike, logp: ArrayLike, ref_logp: ArrayLike,
                         loss_mask: ArrayLike, *, beta: float,
                         estimator: str = "k1") -> jax.Array:
  """Folds a KL-to-reference penalty into per-token rewards (the InstructGPT / PPO-RLHF form).

  References: Ziegler et al. 2019, https://arxiv.org/abs/1909.08593; Ouyang et al. 2022
  (InstructGPT), https://arxiv.org/abs/2203.02155; REINFORCE++, https://arxiv.org/abs/2501.03262.

      r'_it = r_it - beta * m_it * k(logp_it, ref_logp_it)

  The result is a reward (data): every gradient is stopped. Masked tokens keep their reward.

  Args:
    rewards_per_token: `[B, T]` floating rewards (e.g. the outcome reward on the last token).
    logp: `[B, T]` log-probs of the sampled tokens under the sampling policy.
    ref_logp: `[B, T]` log-probs under the reference policy.
    loss_mask: `[B, T]` bool or floating; where 0 no penalty is applied.
    beta: KL coefficient, >= 0.
    estimator: 'k1' (the usual choice in the reward), 'k2' or 'k3'.

  Returns:
    `[B, T]` penalized rewards.
  """
  _validation.check_choice(estimator, KL_ESTIMATORS, "estimator")
  logp, ref_logp, weights = _check_token_arrays(logp, ref_logp, loss_mask)
  rewards_per_token = _validation.as_float(rewards_per_token, "rewards_per_token")
  _validation.check_shape(rewards_per_token, logp.shape, "rewards_per_token", "logp")
  _validation.check_number(beta, "beta", low=0)
  per_token = kl_divergence(_validation.where_masked(logp, weights),
                            _validation.where_masked(ref_logp, weights), estimator=estimator)
  return lax.stop_gradient(rewards_per_token - beta * weights * per_token)
