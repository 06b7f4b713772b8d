"""Policy-gradient losses: the PPO clipped surrogate (clip-higher, dual-clip), GSPO, and entropy."""

import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import ArrayLike

from rlagents.losses import _aggregation
from rlagents.losses import _validation

POLICY_LOSSES = ("ppo", "gspo")


def policy_gradient_loss(
    logp: ArrayLike,
    old_logp: ArrayLike,
    advantages: ArrayLike,
    loss_mask: ArrayLike,
    *,
    variant: str = "ppo",
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
    aggregation: str = "token_mean",
    max_len: float | None = None,
    importance_weights: ArrayLike | None = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
  """Clipped-surrogate policy loss, token-level (PPO) or sequence-level (GSPO).

  References: PPO, Schulman et al. 2017, https://arxiv.org/abs/1707.06347; separate low/high clip
  ("clip-higher"), DAPO, Yu et al. 2025, https://arxiv.org/abs/2503.14476; dual-clip, Ye et al.
  2020, "Mastering Complex Control in MOBA Games with Deep RL", https://arxiv.org/abs/1912.09729;
  GSPO, Zheng et al. 2025, "Group Sequence Policy Optimization", https://arxiv.org/abs/2507.18071.

  Per token t of sequence i, with A_it the advantage (a `[B]` advantage is broadcast over T):

      'ppo':  rho_it = exp(logp_it - old_logp_it)
      'gspo': rho_it = s_i = exp( sum_t m_it (logp_it - old_logp_it) / sum_t m_it ), computed as
              exp(sg[log s_i] + logp_it - sg[logp_it]) (GSPO-token: value s_i, gradient
              s_i * grad logp_it), so token-level advantages also work

      l_it = -min(rho_it A_it, clip(rho_it, 1 - clip_low, 1 + clip_high) A_it)
      with dual_clip = c > 1 and A_it < 0:  l_it = min(l_it, -c A_it)

      loss = aggregate(w * l, loss_mask, aggregation)     (see `aggregate_loss`)

  with w the off-policy `importance_weights` (1 without them; see `importance_weights`).

  GSPO's sequence objective, (1/B) sum_i min(s_i A_i, clip(s_i) A_i), is 'gspo' with
  aggregation='seq_mean_token_mean'; the paper clips tightly (clip_low=3e-4, clip_high=4e-4).
  `old_logp` and `advantages` are data: their gradients are stopped. Masked tokens get exactly zero
  gradient and never reach the GSPO sequence ratio.

  Args:
    logp: `[B, T]` log-probs of the sampled tokens under the policy being optimized.
    old_logp: `[B, T]` log-probs under the policy that sampled them.
    advantages: `[B]` sequence-level or `[B, T]` token-level advantages.
    loss_mask: `[B, T]` bool or floating; 1 on tokens the policy generated, 0 on prompt, padding and
      tool-output tokens. Integer masks are rejected.
    variant: 'ppo' or 'gspo'.
    clip_low: ratio clipped below at 1 - clip_low, in [0, 1).
    clip_high: ratio clipped above at 1 + clip_high, >= 0 (DAPO uses 0.28).
    dual_clip: None, or c > 1 bounding the loss of negative-advantage tokens by -c A (3.0 is usual).
    aggregation: 'token_mean', 'seq_mean_token_mean' or 'seq_sum_max_len'.
    max_len: constant normalizer for aggregation='seq_sum_max_len'.
    importance_weights: None, or `[B, T]` per-token weights of the loss (e.g. truncated
      importance weights pi_old / mu from `importance_weights`); their gradient is stopped.

  Returns:
    (loss, metrics): the scalar loss and a dict of scalars, each a token mean over `loss_mask`:
    'pg_loss' (the loss), 'clip_fraction' (tokens where the clipped term is the smaller objective),
    'dual_clip_fraction' (tokens where the dual clip binds; 0 without it), 'ratio_mean' (mean of
    rho), 'approx_kl' (k3 estimate of KL(old || new), exp(x) - 1 - x with x = logp - old_logp).
  """
  _validation.check_choice(variant, POLICY_LOSSES, "variant")
  _validation.check_choice(aggregation, _aggregation.AGGREGATIONS, "aggregation")
  logp = _validation.as_float(logp, "logp")
  _validation.check_rank(logp, 2, "logp")
  old_logp = _validation.as_float(old_logp, "old_logp")
  _validation.check_shape(old_logp, logp.shape, "old_logp", "logp")
  weights = _validation.mask_weights(loss_mask, "loss_mask")
  _validation.check_shape(weights, logp.shape, "loss_mask", "logp")
  advantages = _validation.as_float(advantages, "advantages")
  _validation.check_rank(advantages, (1, 2), "advantages")
  if advantages.ndim == 1:
    _validation.check_shape(advantages, logp.shape[:1], "advantages", "logp[:, 0]")
    advantages = advantages[:, None]
  else:
    _validation.check_shape(advantages, logp.shape, "advantages", "logp")
  _validation.check_number(clip_low, "clip_low", low=0, high=1, high_inclusive=False)
  _validation.check_number(clip_high, "clip_high", low=0)
  if dual_clip is not None:
    _validation.check_number(dual_clip, "dual_clip", low=1, low_inclusive=False)

  advantages = _validation.where_masked(
      jnp.broadcast_to(lax.stop_gradient(advantages), logp.shape), weights)
  log_ratio = _validation.where_masked(logp - lax.stop_gradient(old_logp), weights)
  if variant == "ppo":
    ratio = jnp.exp(log_ratio)
  else:
    sequence_log_ratio = ((log_ratio * weights).sum(axis=-1, keepdims=True)
                          / _validation.safe_denominator(weights.sum(axis=-1, keepdims=True)))
    ratio = jnp.exp(lax.stop_gradient(sequence_log_ratio) + log_ratio
                    - lax.stop_gradient(log_ratio))

  unclipped = ratio * advantages
  clipped = jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high) * advantages
  objective = jnp.minimum(unclipped, clipped)
  if dual_clip is None:
    dual_clipped = jnp.zeros_like(objective, dtype=bool)
  else:
    dual_clipped = (advantages < 0) & (dual_clip * advantages > objective)
    objective = jnp.where(dual_clipped, dual_clip * advantages, objective)
  if importance_weights is not None:
    importance_weights = _validation.as_float(importance_weights, "importance_weights")
    _validation.check_shape(importance_weights, logp.shape, "importance_weights", "logp")
    objective = objective * _validation.where_masked(
        lax.stop_gradient(importance_weights), weights)
  loss = _aggregation.aggregate_loss(-objective, weights, aggregation=aggregation, max_len=max_len)

  def token_mean(x):
    return _aggregation.masked_token_mean(lax.stop_gradient(x.astype(logp.dtype)), weights)

  metrics = {
      "pg_loss": loss,
      "clip_fraction": token_mean(clipped < unclipped),
      "dual_clip_fraction": token_mean(dual_clipped),
      "ratio_mean": token_mean(ratio),
      "approx_kl": token_mean(jnp.expm1(log_ratio) - log_ratio),
  }
  return loss, metrics


def entropy_from_logits(logits: ArrayLike, loss_mask: ArrayLike, *,
                        aggregation: str = "token_mean",
                        max_len: float | None = None) -> jax.Array:
  """Aggregated entropy of the per-token categorical policies, for an entropy bonus.

  Reference: Williams & Peng 1991, "Function Optimization using Connectionist Reinforcement
  Learning Algorithms"; Mnih et al. 2016 (A3C), https://arxiv.org/abs/1602.01783.

      H_it = -sum_v p_itv log p_itv,   p_it = softmax(logits_it)
      entropy = aggregate(H, loss_mask, aggregation)

  Use it as `loss = pg_loss - entropy_coef * entropy`. Logits of -inf (banned tokens) contribute 0;
  masked positions contribute exactly zero value and gradient.

  Args:
    logits: `[B, T, V]` unnormalized log-probabilities.
    loss_mask: `[B, T]` bool or floating.
    aggregation: 'token_mean', 'seq_mean_token_mean' or 'seq_sum_max_len'.
    max_len: constant normalizer for aggregation='seq_sum_max_len'.

  Returns:
    The aggregated entropy, a scalar in nats.
  """
  _validation.check_choice(aggregation, _aggregation.AGGREGATIONS, "aggregation")
  logits = _validation.as_float(logits, "logits")
  _validation.check_rank(logits, 3, "logits")
  weights = _validation.mask_weights(loss_mask, "loss_mask")
  _validation.check_shape(weights, logits.shape[:2], "loss_mask", "logits[..., 0]")

  logits = _validation.where_masked(logits, weights[..., None])
  log_probs = jax.nn.log_softmax(logits, axis=-1)
  probs = jnp.exp(log_probs)
  # Where p = 0, p * log p is 0; a second `where` keeps -inf out of the gradient as well.
  safe_log_probs = jnp.where(probs > 0, log_probs, jnp.zeros_like(log_probs))
  token_entropy = -(probs * safe_log_probs).sum(axis=-1)
  return _aggregation.aggregate_loss(token_entropy, weights, aggregation=aggregation,
                                     max_len=max_len)
