"""Look-ups by name: a config string picks the advantage estimator, policy loss, KL, aggregation.

Each getter raises a ValueError naming the unknown name and the valid ones; the returned callables
keep the keyword-only hyper-parameters, so bind them with functools.partial before jit.
"""

import functools
from collections.abc import Callable

import jax
from jax.typing import ArrayLike

from rlagents.losses import _advantages
from rlagents.losses import _aggregation
from rlagents.losses import _kl
from rlagents.losses import _policy
from rlagents.losses import _validation

AdvantageEstimator = Callable[..., jax.Array]


def _without_epsilon(estimator: Callable[..., jax.Array]) -> AdvantageEstimator:
  """Gives an estimator that has no epsilon the registry's uniform signature."""

  @functools.wraps(estimator)
  def uniform(rewards: ArrayLike, *, group_size: int, epsilon: float = 1e-6) -> jax.Array:
    del epsilon  # This estimator does not divide by a std.
    return estimator(rewards, group_size=group_size)

  return uniform


_ADVANTAGE_ESTIMATORS = {
    "grpo": _advantages.group_relative_advantages,
    "dr_grpo": _without_epsilon(_advantages.dr_grpo_advantages),
    "rloo": _without_epsilon(_advantages.rloo_advantages),
    "reinforce_pp": _advantages.reinforce_pp_advantages,
}
ADVANTAGE_ESTIMATORS = tuple(_ADVANTAGE_ESTIMATORS)
POLICY_LOSSES = _policy.POLICY_LOSSES
KL_ESTIMATORS = _kl.KL_ESTIMATORS
AGGREGATIONS = _aggregation.AGGREGATIONS


def get_advantage_estimator(name: str) -> AdvantageEstimator:
  """The group advantage estimator called `name`: 'grpo', 'dr_grpo', 'rloo' or 'reinforce_pp'.

  Returns:
    `estimator(rewards, *, group_size, epsilon=1e-6) -> [N] advantages`; estimators without a std
    ('dr_grpo', 'rloo') accept and ignore `epsilon`.

  Args:
    name: a key of `ADVANTAGE_ESTIMATORS`; an unknown one raises a ValueError
      listing the valid ones.
  """
  _validation.check_choice(name, ADVANTAGE_ESTIMATORS, "advantage estimator")
  return _ADVANTAGE_ESTIMATORS[name]


def get_policy_loss(name: str) -> Callable[..., tuple[jax.Array, dict[str, jax.Array]]]:
  """`policy_gradient_loss` with `variant=name` bound: 'ppo' or 'gspo'.

  Returns:
    `loss_fn(logp, old_logp, advantages, loss_mask, *, clip_low, clip_high, dual_clip,
    aggregation, max_len) -> (loss, metrics)`.

  Args:
    name: 'ppo' or 'gspo' (`POLICY_LOSSES`); an unknown one raises a ValueError
      listing the valid ones.
  """
  _validation.check_choice(name, POLICY_LOSSES, "policy loss")
  return functools.partial(_policy.policy_gradient_loss, variant=name)


def get_kl_estimator(name: str) -> Callable[[ArrayLike, ArrayLike], jax.Array]:
  """`kl_divergence` with `estimator=name` bound: 'k1', 'k2' or 'k3'.

  Returns:
    `kl_fn(logp, ref_logp) -> per-token KL estimates`.

  Args:
    name: a key of `KL_ESTIMATORS`; an unknown one raises a ValueError
      listing the valid ones.
  """
  _validation.check_choice(name, KL_ESTIMATORS, "KL estimator")
  return functools.partial(_kl.kl_divergence, estimator=name)


def get_aggregation(name: str) -> Callable[..., jax.Array]:
  """`aggregate_loss` with `aggregation=name` bound.

  Names: 'token_mean', 'seq_mean_token_mean', 'seq_sum_max_len'.

  Returns:
    `aggregate_fn(values, loss_mask, *, max_len=None) -> scalar`.

  Args:
    name: a key of `AGGREGATIONS`; an unknown one raises a ValueError
      listing the valid ones.
  """
  _validation.check_choice(name, AGGREGATIONS, "aggregation")
  return functools.partial(_aggregation.aggregate_loss, aggregation=name)
