"""Tests for the clipped value loss."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlagents import losses

# Tests call the loss under jit (faster on CPU); the un-jitted path is covered by the variants.
value_loss = jax.jit(losses.value_loss,
                     static_argnames=("clip_epsilon", "aggregation", "max_len"))

V = np.array([[1.0, 2.0]], np.float32)
OLD = np.array([[0.5, 2.0]], np.float32)
RETURNS = np.array([[2.0, 1.0]], np.float32)
ALL = np.ones((1, 2), bool)


def test_value_loss_hand_worked():
  # Unclipped: 0.5 * ((1 - 2)^2 + (2 - 1)^2) / 2 = 0.5.
  loss, _ = value_loss(V, OLD, RETURNS, ALL)
  np.testing.assert_allclose(loss, 0.5, rtol=1e-6)
  # eps = 0.2. Token 0: V_clip = 0.5 + clip(0.5, -.2, .2) = 0.7, (0.7 - 2)^2 = 1.69 > 1 -> 0.845.
  # Token 1: V_clip = 2.0, (2 - 1)^2 = 1 -> 0.5. loss = (0.845 + 0.5) / 2 = 0.6725.
  loss, metrics = value_loss(V, OLD, RETURNS, ALL, clip_epsilon=0.2)
  np.testing.assert_allclose(loss, 0.6725, rtol=1e-6)
  np.testing.assert_allclose(metrics["value_loss"], 0.6725, rtol=1e-6)
  np.testing.assert_allclose(metrics["value_clip_fraction"], 0.5, rtol=1e-6)


def np_value_reference(values, old, returns, mask, eps):
  values, old, returns = (x.astype(np.float64) for x in (values, old, returns))
  loss = (values - returns) ** 2
  if eps is not None:
    clipped = old + np.clip(values - old, -eps, eps)
    loss = np.maximum(loss, (clipped - returns) ** 2)
  return 0.5 * loss[mask].mean()


@pytest.mark.parametrize("clip_epsilon", [None, 0.1])
def test_value_loss_matches_numpy_and_masks_gradient(clip_epsilon):
  rng = np.random.default_rng(0)
  values, old, returns = (rng.normal(size=(4, 7)).astype(np.float32) for _ in range(3))
  mask = rng.random((4, 7)) < 0.6
  poisoned = np.where(mask, values, np.float32(np.nan))

  def loss_fn(v):
    return losses.value_loss(v, old, returns, mask, clip_epsilon=clip_epsilon)[0]

  loss, grad = jax.jit(jax.value_and_grad(loss_fn))(poisoned)
  np.testing.assert_allclose(loss, np_value_reference(values, old, returns, mask, clip_epsilon),
                             rtol=1e-5)
  np.testing.assert_array_equal(np.asarray(grad)[~mask], 0.0)
  assert np.all(np.isfinite(grad))
  # Targets get no gradient.
  target_grads = jax.jit(jax.grad(lambda o, r: losses.value_loss(
      values, o, r, mask, clip_epsilon=clip_epsilon)[0], argnums=(0, 1)))(old, returns)
  for g in target_grads:
    np.testing.assert_array_equal(g, 0.0)


def test_explained_variance_is_one_for_perfect_predictions():
  returns = np.array([[1., 2., 3., 4.]], np.float32)
  _, metrics = value_loss(returns, returns, returns, np.ones((1, 4), bool))
  np.testing.assert_allclose(metrics["explained_variance"], 1.0, rtol=1e-6)


def test_value_loss_rejects_bad_input():
  with pytest.raises(ValueError, match="`old_values` must have shape"):
    losses.value_loss(V, OLD[:, :1], RETURNS, ALL)
  with pytest.raises(ValueError, match="`returns` must have shape"):
    losses.value_loss(V, OLD, RETURNS.T, ALL)
  with pytest.raises(ValueError, match="`values` must have rank 2"):
    losses.value_loss(V[0], OLD[0], RETURNS[0], ALL[0])
  with pytest.raises(ValueError, match="`loss_mask` must be bool or floating"):
    losses.value_loss(V, OLD, RETURNS, ALL.astype(np.int8))
  with pytest.raises(ValueError, match="`clip_epsilon` must lie in"):
    losses.value_loss(V, OLD, RETURNS, ALL, clip_epsilon=0.0)
  with pytest.raises(ValueError, match="Unknown aggregation 'mean'"):
    losses.value_loss(V, OLD, RETURNS, ALL, aggregation="mean")


class ValueLossVariantsTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True, with_pmap=True)
  def test_same_numbers_under_jit_and_pmap(self):
    loss, metrics = self.variant(functools.partial(losses.value_loss, clip_epsilon=0.2))(
        jnp.asarray(V), jnp.asarray(OLD), jnp.asarray(RETURNS), jnp.asarray(ALL))
    np.testing.assert_allclose(loss, 0.6725, rtol=1e-6)
    np.testing.assert_allclose(metrics["value_clip_fraction"], 0.5, rtol=1e-6)
