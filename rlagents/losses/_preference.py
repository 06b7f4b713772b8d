"""Preference losses: DPO (sigmoid, IPO, label smoothing), KTO, Bradley-Terry reward model."""

import numbers

import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import ArrayLike

from rlagents.losses import _validation

DPO_VARIANTS = ("sigmoid", "ipo")


def _sequence_arrays(reference_name: str, **arrays: ArrayLike) -> list[jax.Array]:
  """Validates floating `[B]` arrays that must all match the first one."""
  checked = []
  for name, array in arrays.items():
    array = _validation.as_float(array, name)
    if not checked:
      _validation.check_rank(array, 1, name)
    else:
      _validation.check_shape(array, checked[0].shape, name, reference_name)
    checked.append(array)
  return checked


def dpo_loss(policy_chosen_logp: ArrayLike, policy_rejected_logp: ArrayLike,
             ref_chosen_logp: ArrayLike, ref_rejected_logp: ArrayLike, *, beta: float = 0.1,
             label_smoothing: float = 0.0,
             variant: str = "sigmoid") -> tuple[jax.Array, dict[str, jax.Array]]:
  """Direct preference optimization loss over pairs of (chosen, rejected) completions.

  References: DPO, Rafailov et al. 2023, https://arxiv.org/abs/2305.18290; label smoothing
  (conservative DPO), Mitchell 2023, "A note on DPO with noisy preferences",
  https://ericmitchell.ai/cdpo.pdf; IPO, Azar et al. 2023, "A General Theoretical Paradigm to
  Understand Learning from Human Preferences", https://arxiv.org/abs/2310.12036.

  With h = (logp^pi_w - logp^ref_w) - (logp^pi_l - logp^ref_l) per pair and eps = label_smoothing:

      'sigmoid': l = -(1 - eps) log sigmoid(beta h) - eps log sigmoid(-beta h)
      'ipo':     l = (h - 1 / (2 beta))^2
      loss = mean over pairs of l

  Log-probs are of whole completions (summed over their tokens; IPO implementations often use the
  per-token mean instead, which the caller chooses). The reference log-probs' gradients are
  stopped.

  Args:
    policy_chosen_logp: `[B]` log pi(y_w | x).
    policy_rejected_logp: `[B]` log pi(y_l | x).
    ref_chosen_logp: `[B]` log pi_ref(y_w | x).
    ref_rejected_logp: `[B]` log pi_ref(y_l | x).
    beta: inverse temperature of the implicit reward (> 0); for IPO the regularization tau.
    label_smoothing: assumed probability the preference label is flipped, in [0, 0.5]; 'sigmoid'
      only.
    variant: 'sigmoid' or 'ipo'.

  Returns:
    (loss, metrics): 'dpo_loss'; the implicit rewards r = beta (logp^pi - logp^ref) as
    'chosen_reward' and 'rejected_reward' (means), 'reward_margin' (mean of r_w - r_l) and
    'reward_accuracy' (fraction of pairs with r_w > r_l).
  """
  _validation.check_choice(variant, DPO_VARIANTS, "variant")
  pc, pr, rc, rr = _sequence_arrays(
      "policy_chosen_logp", policy_chosen_logp=policy_chosen_logp,
      policy_rejected_logp=policy_rejected_logp, ref_chosen_logp=ref_chosen_logp,
      ref_rejected_logp=ref_rejected_logp)
  _validation.check_number(beta, "beta", low=0, low_inclusive=False)
  _validation.check_number(label_smoothing, "label_smoothing", low=0, high=0.5)
  if variant == "ipo" and isinstance(label_smoothing, numbers.Real) and label_smoothing != 0:
    raise ValueError("`label_smoothing` applies to variant='sigmoid' only; IPO has none.")

  chosen_log_ratio = pc - lax.stop_gradient(rc)
  rejected_log_ratio = pr - lax.stop_gradient(rr)
  h = chosen_log_ratio - rejected_log_ratio
  if variant == "sigmoid":
    losses = (-(1.0 - label_smoothing) * jax.nn.log_sigmoid(beta * h)
              - label_smoothing * jax.nn.log_sigmoid(-beta * h))
  else:
    losses = jnp.square(h - 1.0 / (2.0 * beta))
  loss = losses.mean()

  chosen_reward = lax.stop_gradient(beta * chosen_log_ratio)
  rejected_reward = lax.stop_gradient(beta * rejected_log_ratio)
  metrics = {
      "dpo_loss": loss,
      "chosen_reward": chosen_reward.mean(),
      "rejected_reward": rejected_reward.mean(),
      "reward_margin": (chosen_reward - rejected_reward).mean(),
      "reward_accuracy": (chosen_reward > rejected_reward).astype(loss.dtype).mean(),
  }
  return loss, metrics


def kto_reference_kl(policy_kl_logp: ArrayLike, ref_kl_logp: ArrayLike) -> jax.Array:
  """The KTO reference point z0: a batch estimate of KL(pi || pi_ref), clamped at 0, no gradient.

  Reference: Ethayarajh et al. 2024, "KTO: Model Alignment as Prospect Theoretic Optimization",
  https://arxiv.org/abs/2402.01306 (section 4.1).

      z0 = max(0, mean_j (logp^pi(y'_j | x_j) - logp^ref(y'_j | x_j)))

  where y'_j are mismatched completions (the completion of another prompt in the batch). Under data
  parallelism `lax.pmean` the result over devices before passing it to `kto_loss`.

  Args:
    policy_kl_logp: `[B]` log pi(y'_j | x_j).
    ref_kl_logp: `[B]` log pi_ref(y'_j | x_j).

  Returns:
    The scalar z0.
  """
  policy_kl_logp, ref_kl_logp = _sequence_arrays(
      "policy_kl_logp", policy_kl_logp=policy_kl_logp, ref_kl_logp=ref_kl_logp)
  return lax.stop_gradient(jnp.maximum((policy_kl_logp - ref_kl_logp).mean(), 0.0))


def kto_loss(policy_logp: ArrayLike, ref_logp: ArrayLike, is_desirable: ArrayLike,
             kl_reference: ArrayLike, *, beta: float = 0.1, desirable_weight: float = 1.0,
             undesirable_weight: float = 1.0) -> tuple[jax.Array, dict[str, jax.Array]]:
  """Kahneman-Tversky optimization loss over unpaired desirable / undesirable completions.

  Reference: Ethayarajh et al. 2024, "KTO: Model Alignment as Prospect Theoretic Optimization",
  https://arxiv.org/abs/2402.01306 (eq. 8).

  With r = logp^pi(y|x) - logp^ref(y|x) and z0 = max(0, kl_reference) (gradient stopped):

      desirable y:    l = lambda_D (1 - sigmoid(beta (r - z0)))
      undesirable y:  l = lambda_U (1 - sigmoid(beta (z0 - r)))
      loss = mean over the batch of l

  The paper advises lambda_D n_D / (lambda_U n_U) in [1, 4/3].

  Args:
    policy_logp: `[B]` log pi(y | x) of whole completions.
    ref_logp: `[B]` log pi_ref(y | x).
    is_desirable: `[B]` bool (or 0./1. floating): True where y is desirable.
    kl_reference: scalar z0, e.g. from `kto_reference_kl`.
    beta: > 0.
    desirable_weight: lambda_D >= 0.
    undesirable_weight: lambda_U >= 0.

  Returns:
    (loss, metrics): 'kto_loss', 'kl_reference' (z0), 'desirable_reward' and 'undesirable_reward'
    (means of beta r over each subset; 0 for an empty subset).
  """
  policy_logp, ref_logp = _sequence_arrays("policy_logp", policy_logp=policy_logp,
                                           ref_logp=ref_logp)
  desirable = _validation.mask_weights(is_desirable, "is_desirable")
  _validation.check_shape(desirable, policy_logp.shape, "is_desirable", "policy_logp")
  kl_reference = _validation.as_float(kl_reference, "kl_reference", allow_integers=True)
  _validation.check_rank(kl_reference, 0, "kl_reference")
  _validation.check_number(beta, "beta", low=0, low_inclusive=False)
  _validation.check_number(desirable_weight, "desirable_weight", low=0)
  _validation.check_number(undesirable_weight, "undesirable_weight", low=0)

  z0 = lax.stop_gradient(jnp.maximum(kl_reference, 0.0))
  log_ratio = policy_logp - lax.stop_gradient(ref_logp)
  desirable_losses = desirable_weight * (1.0 - jax.nn.sigmoid(beta * (log_ratio - z0)))
  undesirable_losses = undesirable_weight * (1.0 - jax.nn.sigmoid(beta * (z0 - log_ratio)))
  loss = jnp.where(desirable != 0, desirable_losses, undesirable_losses).mean()

  rewards = lax.stop_gradient(beta * log_ratio)
  undesirable = 1.0 - desirable
  metrics = {
      "kto_loss": loss,
      "kl_reference": z0,
      "desirable_reward": (rewards * desirable).sum() / _validation.safe_denominator(
          desirable.sum()),
      "undesirable_reward": (rewards * undesirable).sum() / _validation.safe_denominator(
          undesirable.sum()),
  }
  return loss, metrics


def bradley_terry_loss(chosen_scores: ArrayLike, rejected_scores: ArrayLike, *,
                       margin: ArrayLike | None = None
                       ) -> tuple[jax.Array, dict[str, jax.Array]]:
  """Bradley-Terry pairwise loss for training a scalar reward model.

  References: Bradley & Terry 1952; Ouyang et al. 2022 (InstructGPT),
  https://arxiv.org/abs/2203.02155; the margin term, Touvron et al. 2023 (Llama 2),
  https://arxiv.org/abs/2307.09288.

      l = -log sigmoid(s_w - s_l - m),     loss = mean over pairs of l

  with m = 0 unless `margin` is given.

  Args:
    chosen_scores: `[B]` reward-model scores of the preferred completions.
    rejected_scores: `[B]` scores of the rejected completions.
    margin: None, a scalar, or `[B]` per-pair margins (e.g. by how much the rater preferred).

  Returns:
    (loss, metrics): 'bt_loss', 'accuracy' (fraction with s_w > s_l), 'score_margin' (mean of
    s_w - s_l).
  """
  chosen_scores, rejected_scores = _sequence_arrays(
      "chosen_scores", chosen_scores=chosen_scores, rejected_scores=rejected_scores)
  difference = chosen_scores - rejected_scores
  shifted = difference
  if margin is not None:
    margin = _validation.as_float(margin, "margin", allow_integers=True)
    _validation.check_rank(margin, (0, 1), "margin")
    if margin.ndim == 1:
      _validation.check_shape(margin, chosen_scores.shape, "margin", "chosen_scores")
    shifted = difference - lax.stop_gradient(margin)
  loss = -jax.nn.log_sigmoid(shifted).mean()
  metrics = {
      "bt_loss": loss,
      "accuracy": (difference > 0).astype(loss.dtype).mean(),
      "score_margin": lax.stop_gradient(difference).mean(),
  }
  return loss, metrics
