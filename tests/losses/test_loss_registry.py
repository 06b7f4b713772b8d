"""Tests for choosing advantage estimators, policy losses, KL and aggregations by name."""

import functools

import jax
import numpy as np
import pytest

from rlagents import losses


def test_names():
  assert losses.ADVANTAGE_ESTIMATORS == ("grpo", "dr_grpo", "rloo", "reinforce_pp")
  assert losses.POLICY_LOSSES == ("ppo", "gspo")
  assert losses.KL_ESTIMATORS == ("k1", "k2", "k3")
  assert losses.AGGREGATIONS == ("token_mean", "seq_mean_token_mean", "seq_sum_max_len")


@pytest.mark.parametrize("getter, bad, valid", [
    (losses.get_advantage_estimator, "ppo", "'grpo', 'dr_grpo', 'rloo', 'reinforce_pp'"),
    (losses.get_policy_loss, "grpo", "'ppo', 'gspo'"),
    (losses.get_kl_estimator, "k0", "'k1', 'k2', 'k3'"),
    (losses.get_aggregation, "mean", "'token_mean', 'seq_mean_token_mean', 'seq_sum_max_len'"),
])
def test_unknown_name_lists_valid_names(getter, bad, valid):
  with pytest.raises(ValueError, match=f"Unknown .*'{bad}'; valid choices: {valid}"):
    getter(bad)


def test_advantage_estimators_share_one_signature_and_jit_with_partial():
  rewards = np.array([1., 0., 0., 1., 3., 1., 2., 2.], np.float32)
  direct = {
      "grpo": losses.group_relative_advantages(rewards, group_size=4, epsilon=1e-3),
      "dr_grpo": losses.dr_grpo_advantages(rewards, group_size=4),
      "rloo": losses.rloo_advantages(rewards, group_size=4),
      "reinforce_pp": losses.reinforce_pp_advantages(rewards, group_size=4, epsilon=1e-3),
  }
  for name in losses.ADVANTAGE_ESTIMATORS:
    estimator = jax.jit(functools.partial(losses.get_advantage_estimator(name), group_size=4,
                                          epsilon=1e-3))
    np.testing.assert_allclose(estimator(rewards), direct[name], rtol=1e-6, atol=1e-6)
  with pytest.raises(TypeError):  # No **unused: a misspelt keyword is an error.
    losses.get_advantage_estimator("rloo")(rewards, group_size=4, epsilon=1e-6, group=4)


def test_policy_loss_kl_and_aggregation_getters_bind_the_name():
  rng = np.random.default_rng(0)
  logp, old = (rng.normal(-1, .3, size=(3, 5)).astype(np.float32) for _ in range(2))
  advantages = rng.normal(size=3).astype(np.float32)
  mask = np.ones((3, 5), bool)

  def both(by_name, direct, *args):  # Under jit: faster on CPU than op-by-op.
    np.testing.assert_allclose(jax.jit(by_name)(*args), jax.jit(direct)(*args), rtol=1e-6)

  for name in losses.POLICY_LOSSES:
    both(lambda *a: losses.get_policy_loss(name)(*a, aggregation="seq_mean_token_mean")[0],
         lambda *a: losses.policy_gradient_loss(*a, variant=name,
                                                aggregation="seq_mean_token_mean")[0],
         logp, old, advantages, mask)
  for name in losses.KL_ESTIMATORS:
    both(losses.get_kl_estimator(name),
         functools.partial(losses.kl_divergence, estimator=name), logp, old)
  for name in losses.AGGREGATIONS:
    both(functools.partial(losses.get_aggregation(name), max_len=5),
         functools.partial(losses.aggregate_loss, aggregation=name, max_len=5), logp, mask)
