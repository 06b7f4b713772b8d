"""Off-policy corrections: truncated importance sampling between the behaviour and old policies.

In asynchronous training the episodes of a batch were sampled by a behaviour policy mu (the
weights the sampler had, possibly several updates old), while the clipped surrogate's ratio is
taken against the learner's old policy pi_old (the weights at the start of this update). The
surrogate alone corrects pi_theta / pi_old; truncated importance sampling (TIS) reweights each
token's loss by the remaining pi_old / mu, capped at C so one unlikely token cannot dominate
(Espeholt et al. 2018, IMPALA, https://arxiv.org/abs/1802.01561; Yao et al. 2025, "Your
efficient RL framework secretly brings you off-policy RL training"):

    'token_tis':     w_it = min(exp(old_logp_it - behaviour_logp_it), C)
    'sequence_tis':  w_i  = min(exp(sum_t m_it (old_logp_it - behaviour_logp_it)), C),
                     the same w_i on every token of sequence i
    'none':          w = 1

    loss = aggregate(w * l, loss_mask)    (l the surrogate's per-token loss; w carries no gradient)

Masked tokens get weight 1 and never enter the sequence sum.
"""

import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import ArrayLike

from rlagents.losses import _validation

OFF_POLICY_CORRECTIONS = ("none", "token_tis", "sequence_tis")


def importance_weights(old_logp: ArrayLike, behaviour_logp: ArrayLike, loss_mask: ArrayLike, *,
                       correction: str = "token_tis", cap: float = 2.0
                       ) -> tuple[jax.Array, dict[str, jax.Array]]:
  """`[B, T]` truncated importance weights pi_old / mu (see the module docstring).

  Args:
    old_logp: `[B, T]` log-probs of the sampled tokens under the learner's old policy.
    behaviour_logp: `[B, T]` log-probs under the policy that sampled them (the sampler's).
    loss_mask: `[B, T]` bool or floating; 1 on tokens the policy generated.
    correction: 'none', 'token_tis' or 'sequence_tis'.
    cap: C > 0, the truncation.

  Returns:
    (weights, metrics): the stop-gradient weights (1 on masked tokens) and, as token means over
    `loss_mask`, 'tis_weight_mean' (before truncation: how far the behaviour policy is from the
    old one), 'tis_truncated_fraction' and 'behaviour_abs_logp_diff' (mean |old - behaviour|).
  """
  _validation.check_choice(correction, OFF_POLICY_CORRECTIONS, "off-policy correction")
  _validation.check_number(cap, "cap", low=0, low_inclusive=False)
  old_logp = _validation.as_float(old_logp, "old_logp")
  _validation.check_rank(old_logp, 2, "old_logp")
  behaviour_logp = _validation.as_float(behaviour_logp, "behaviour_logp")
  _validation.check_shape(behaviour_logp, old_logp.shape, "behaviour_logp", "old_logp")
  weights = _validation.mask_weights(loss_mask, "loss_mask")
  _validation.check_shape(weights, old_logp.shape, "loss_mask", "old_logp")

  log_ratio = _validation.where_masked(
      lax.stop_gradient(old_logp) - lax.stop_gradient(behaviour_logp), weights)
  if correction == "sequence_tis":
    log_ratio = jnp.broadcast_to((log_ratio * weights).sum(axis=-1, keepdims=True),
                                 log_ratio.shape)
  raw = jnp.exp(log_ratio)
  if correction == "none":
    truncated = jnp.ones_like(raw)
  else:
    truncated = jnp.minimum(raw, cap)
  truncated = jnp.where(weights > 0, truncated, 1.0)
  mean = lambda x: ((x * weights).sum()
                    / _validation.safe_denominator(weights.sum())).astype(old_logp.dtype)
  diff = _validation.where_masked(jnp.abs(old_logp - behaviour_logp), weights)
  metrics = {"tis_weight_mean": mean(raw),
             "tis_truncated_fraction": mean((raw > cap) & (correction != "none")),
             "behaviour_abs_logp_diff": mean(diff)}
  return lax.stop_gradient(truncated), metrics
