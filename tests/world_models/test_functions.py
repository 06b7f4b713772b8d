"""DreamerV3's numerical parts against hand-worked values: symlog, two-hot, KL balance, returns."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlagents import world_models as wm


def test_symlog_and_symexp():
  x = jnp.array([-1e6, -3.0, 0.0, np.e - 1, 50.0])
  np.testing.assert_allclose(wm.symlog(jnp.array([0.0, np.e - 1, -(np.e - 1)])), [0, 1, -1],
                             atol=1e-6)
  np.testing.assert_allclose(wm.symexp(wm.symlog(x)), x, rtol=1e-5)


def test_twohot_hand_worked():
  bins = jnp.array([-1.0, 0.0, 1.0])
  # 0.25 lies a quarter of the way from bin 0.0 to bin 1.0: weights 0.75 and 0.25.
  np.testing.assert_allclose(wm.twohot(jnp.float32(0.25), bins), [0.0, 0.75, 0.25])
  # On a bin: one-hot; outside the range: clipped to the end bin.
  np.testing.assert_allclose(wm.twohot(jnp.float32(0.0), bins), [0.0, 1.0, 0.0])
  np.testing.assert_allclose(wm.twohot(jnp.float32(5.0), bins), [0.0, 0.0, 1.0])
  np.testing.assert_allclose(wm.twohot(jnp.float32(-7.0), bins), [1.0, 0.0, 0.0])


def test_twohot_round_trip():
  bins = wm.symlog_bins(255)
  values = jnp.array([-1234.5, -3.0, -0.01, 0.0, 0.3, 1.0, 17.0, 500.0, 9e4])
  encoded = wm.twohot(wm.symlog(values), bins)
  np.testing.assert_allclose(encoded.sum(-1), 1.0, rtol=1e-6)
  np.testing.assert_allclose(wm.symexp((encoded * bins).sum(-1)), values, rtol=1e-4, atol=1e-5)
  # A head whose softmax is the two-hot itself decodes the value (log of 0 -> -inf is fine).
  np.testing.assert_allclose(wm.twohot_mean(jnp.log(encoded), bins), values, rtol=1e-4,
                             atol=1e-5)
  # The loss is smallest at the encoded distribution (cross-entropy = its entropy).
  target = encoded[4]  # 0.3 -> weight on two bins
  entropy = -np.sum(np.where(target > 0, target * np.log(np.maximum(target, 1e-30)), 0.0))
  assert float(wm.twohot_loss(jnp.log(target + 1e-12), values[4], bins)) == pytest.approx(
      entropy, abs=1e-5)
  assert float(wm.twohot_loss(jnp.log(encoded[5] + 1e-12), values[4], bins)) > entropy + 1
  assert float(wm.twohot_loss(jnp.zeros(255), values[4], bins)) == pytest.approx(np.log(255),
                                                                                 rel=1e-5)


def test_kl_balance_and_free_bits_hand_worked():
  # One latent, two classes: post (0.5, 0.5), prior (0.25, 0.75).
  # KL(post || prior) = 0.5 ln(0.5/0.25) + 0.5 ln(0.5/0.75) = 0.5 ln 2 + 0.5 ln(2/3) = 0.143841
  post = jnp.log(jnp.array([[[0.5, 0.5]]]))
  prior = jnp.log(jnp.array([[[0.25, 0.75]]]))
  kl = 0.5 * np.log(2) + 0.5 * np.log(2 / 3)
  np.testing.assert_allclose(wm.categorical_kl(post, prior), [kl], rtol=1e-6)
  # Two identical latents sum: 0.287682.
  two = jnp.concatenate([post, post], 1), jnp.concatenate([prior, prior], 1)
  np.testing.assert_allclose(wm.categorical_kl(*two), [2 * kl], rtol=1e-6)

  dyn, rep, raw = wm.kl_balance_losses(post, prior, free_nats=0.1)
  np.testing.assert_allclose([dyn[0], rep[0], raw[0]], [kl, kl, kl], rtol=1e-6)
  dyn, rep, raw = wm.kl_balance_losses(post, prior, free_nats=1.0)
  np.testing.assert_allclose([dyn[0], rep[0], raw[0]], [1.0, 1.0, kl], rtol=1e-6)

  def loss(post, prior, free, which):
    return wm.kl_balance_losses(post, prior, free_nats=free)[which].sum()

  # Above the free bits: dyn trains only the prior, rep only the posterior.
  dyn_post, dyn_prior = jax.grad(loss, argnums=(0, 1))(post, prior, 0.1, 0)
  rep_post, rep_prior = jax.grad(loss, argnums=(0, 1))(post, prior, 0.1, 1)
  np.testing.assert_array_equal(dyn_post, 0.0)
  np.testing.assert_array_equal(rep_prior, 0.0)
  # d KL / d prior_logits = q - p = (0.25 - 0.5, 0.75 - 0.5)
  np.testing.assert_allclose(dyn_prior[0, 0], [-0.25, 0.25], atol=1e-6)
  assert np.abs(rep_post).max() > 0.01
  # Below the free bits neither has a gradient.
  grads = jax.grad(loss, argnums=(0, 1))(post, prior, 1.0, 0)
  grads += jax.grad(loss, argnums=(0, 1))(post, prior, 1.0, 1)
  for g in grads:
    np.testing.assert_array_equal(g, 0.0)


def test_unimix_and_straight_through_sample():
  logits = jnp.array([[20.0, 0.0, -20.0, 0.0]])
  probs = jnp.exp(wm.unimix_logits(logits, 0.01))
  np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-6)
  assert float(probs.min()) >= 0.01 / 4 - 1e-7
  sample = wm.sample_onehot(jax.random.key(0), logits)
  np.testing.assert_allclose(sample, [[1.0, 0.0, 0.0, 0.0]], atol=1e-6)
  # The gradient is that of the probabilities (straight through).
  weights = jnp.array([[1.0, 2.0, 3.0, 4.0]])
  grad_sample = jax.grad(lambda l: (wm.sample_onehot(jax.random.key(0), l) * weights).sum())(
      jnp.zeros((1, 4)))
  grad_probs = jax.grad(lambda l: (jax.nn.softmax(l) * weights).sum())(jnp.zeros((1, 4)))
  np.testing.assert_allclose(grad_sample, grad_probs, atol=1e-6)


def test_lambda_returns_hand_worked():
  # H = 2: r = (1, 2), v = (0, 10, 20), d = (0.5, 0.5), lambda = 0.5.
  # R_2 = v_2 = 20; R_1 = 2 + 0.5 (0.5 * 20 + 0.5 * 20) = 12; R_0 = 1 + 0.5 (0.5 * 10 + 0.5 * 12)
  # = 6.5.
  returns = wm.lambda_returns(jnp.array([1.0, 2.0]), jnp.array([0.0, 10.0, 20.0]),
                              jnp.array([0.5, 0.5]), lambda_=0.5)
  np.testing.assert_allclose(returns, [6.5, 12.0])
  # lambda = 1 is the discounted Monte-Carlo return bootstrapped at the end.
  returns = wm.lambda_returns(jnp.array([1.0, 2.0]), jnp.array([0.0, 10.0, 20.0]),
                              jnp.array([0.5, 0.5]), lambda_=1.0)
  np.testing.assert_allclose(returns, [1 + 0.5 * (2 + 0.5 * 20), 2 + 0.5 * 20])
  with pytest.raises(ValueError, match="must be"):
    wm.lambda_returns(jnp.zeros(2), jnp.zeros(2), jnp.zeros(2), lambda_=0.5)


def test_return_scale_percentiles():
  scale = wm.ReturnScale.create()
  assert float(scale.scale) == 1.0  # max(1, 0)
  # Percentiles of 0..100 are 5 and 95; with decay 0.5 the EMAs go halfway from 0.
  scale = wm.update_return_scale(scale, jnp.arange(101.0), decay=0.5)
  np.testing.assert_allclose([scale.low, scale.high, scale.scale], [2.5, 47.5, 45.0])
  small = wm.update_return_scale(wm.ReturnScale.create(), jnp.linspace(0, 0.5, 11), decay=0.0)
  assert float(small.scale) == 1.0  # a spread below 1 is not blown up
