"""Truncated importance sampling against a numpy reference, and its place in the policy loss."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlagents import losses


def _reference(old, behaviour, mask, correction, cap):
  """Straight numpy, one token at a time."""
  weights = np.ones_like(old)
  for i in range(old.shape[0]):
    sequence = sum(old[i, t] - behaviour[i, t] for t in range(old.shape[1]) if mask[i, t])
    for t in range(old.shape[1]):
      if not mask[i, t]:
        continue
      log_ratio = old[i, t] - behaviour[i, t] if correction == "token_tis" else sequence
      weights[i, t] = min(np.exp(log_ratio), cap)
  return weights


@pytest.mark.parametrize("correction", ["token_tis", "sequence_tis"])
def test_weights_match_numpy(correction):
  rng = np.random.default_rng(0)
  old = rng.normal(-1.0, 0.5, (4, 7)).astype(np.float32)
  behaviour = old + rng.normal(0.0, 0.6, old.shape).astype(np.float32)
  mask = rng.random(old.shape) < 0.7
  mask[:, 0] = True
  weights, metrics = losses.importance_weights(old, behaviour, mask, correction=correction,
                                               cap=1.5)
  np.testing.assert_allclose(weights, _reference(old, behaviour, mask, correction, 1.5),
                             rtol=1e-5)
  assert 0 < float(metrics["tis_truncated_fraction"]) < 1  # the cap binds on some tokens here
  expected_diff = np.abs(old - behaviour)[mask].mean()
  np.testing.assert_allclose(metrics["behaviour_abs_logp_diff"], expected_diff, rtol=1e-5)


def test_on_policy_weights_are_one_and_leave_the_loss_unchanged():
  rng = np.random.default_rng(1)
  logp = rng.normal(-1.0, 0.3, (3, 5)).astype(np.float32)
  old = logp + 0.1
  advantages = np.array([1.0, -0.5, 0.2], np.float32)
  mask = np.ones_like(logp)
  weights, _ = losses.importance_weights(old, old, mask, correction="token_tis")
  np.testing.assert_array_equal(weights, 1.0)
  plain, _ = losses.policy_gradient_loss(logp, old, advantages, mask)
  weighted, _ = losses.policy_gradient_loss(logp, old, advantages, mask,
                                            importance_weights=weights)
  np.testing.assert_allclose(weighted, plain, rtol=1e-6)


def test_weighted_loss_scales_each_token_and_weights_carry_no_gradient():
  rng = np.random.default_rng(2)
  logp = jnp.asarray(rng.normal(-1.0, 0.3, (2, 4)), jnp.float32)
  old = logp
  advantages = jnp.array([1.0, -1.0])
  mask = jnp.ones((2, 4))
  w = jnp.array([[2.0, 1.0, 1.0, 1.0], [0.5, 0.5, 0.5, 0.5]])
  loss, _ = losses.policy_gradient_loss(logp, old, advantages, mask, importance_weights=w)
  # ratio 1 at old == logp: per-token loss is -A, weighted by w, token mean over 8 tokens.
  np.testing.assert_allclose(loss, -(2 + 1 + 1 + 1 - 4 * 0.5) / 8, rtol=1e-6)
  grad_w = jax.grad(lambda w: losses.policy_gradient_loss(
      logp, old, advantages, mask, importance_weights=w)[0])(w)
  np.testing.assert_array_equal(grad_w, 0.0)


def test_none_gives_ones_and_bad_names_are_refused():
  old = np.zeros((1, 3), np.float32)
  weights, _ = losses.importance_weights(old, old - 2.0, np.ones((1, 3)), correction="none")
  np.testing.assert_array_equal(weights, 1.0)
  with pytest.raises(ValueError, match="off-policy correction"):
    losses.importance_weights(old, old, np.ones((1, 3)), correction="tis")
  with pytest.raises(ValueError, match="cap"):
    losses.importance_weights(old, old, np.ones((1, 3)), cap=0.0)
  with pytest.raises(ValueError, match="behaviour_logp"):
    losses.importance_weights(old, np.zeros((1, 4)), np.ones((1, 3)))
