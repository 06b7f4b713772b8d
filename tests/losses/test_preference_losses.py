"""Tests for DPO (sigmoid, label smoothing, IPO), KTO and the Bradley-Terry reward-model loss."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlagents import losses

# Tests call the losses under jit (faster on CPU); the un-jitted path is covered by the variants.
dpo_loss = jax.jit(losses.dpo_loss, static_argnames=("beta", "label_smoothing", "variant"))
kto_loss = jax.jit(losses.kto_loss,
                   static_argnames=("beta", "desirable_weight", "undesirable_weight"))
bradley_terry_loss = jax.jit(losses.bradley_terry_loss)

# One pair: chosen log-ratio -1 - (-1.5) = 0.5, rejected log-ratio -2 - (-1.5) = -0.5, so h = 1.
PAIR = tuple(np.array([x], np.float32) for x in (-1.0, -2.0, -1.5, -1.5))


def softplus(x):
  return np.log1p(np.exp(x))


def test_dpo_sigmoid_hand_worked():
  # beta h = 0.1: loss = -log sigmoid(0.1) = log(1 + e^-0.1) = 0.6443967.
  loss, metrics = dpo_loss(*PAIR, beta=0.1)
  np.testing.assert_allclose(loss, softplus(-0.1), rtol=1e-6)
  np.testing.assert_allclose(metrics["chosen_reward"], 0.05, rtol=1e-6)    # 0.1 * 0.5
  np.testing.assert_allclose(metrics["rejected_reward"], -0.05, rtol=1e-6)
  np.testing.assert_allclose(metrics["reward_margin"], 0.1, rtol=1e-6)
  np.testing.assert_allclose(metrics["reward_accuracy"], 1.0)


def test_dpo_label_smoothing_hand_worked():
  # 0.9 * log(1 + e^-0.1) + 0.1 * log(1 + e^0.1) = 0.9 * 0.6443967 + 0.1 * 0.7443967 = 0.6543967.
  loss, _ = dpo_loss(*PAIR, beta=0.1, label_smoothing=0.1)
  np.testing.assert_allclose(loss, 0.6543967, rtol=1e-6)


def test_ipo_hand_worked():
  # (h - 1 / (2 beta))^2 = (1 - 5)^2 = 16.
  loss, _ = dpo_loss(*PAIR, beta=0.1, variant="ipo")
  np.testing.assert_allclose(loss, 16.0, rtol=1e-6)


@pytest.mark.parametrize("variant, label_smoothing", [("sigmoid", 0.0), ("sigmoid", 0.2),
                                                      ("ipo", 0.0)])
def test_dpo_matches_numpy_and_stops_reference_gradient(variant, label_smoothing):
  rng = np.random.default_rng(0)
  pc, pr, rc, rr = (rng.normal(-20, 3, size=8).astype(np.float32) for _ in range(4))
  h = (pc.astype(np.float64) - rc) - (pr - rr)
  if variant == "sigmoid":
    want = ((1 - label_smoothing) * softplus(-0.2 * h) + label_smoothing * softplus(0.2 * h))
  else:
    want = (h - 1 / 0.4) ** 2
  loss, metrics = dpo_loss(pc, pr, rc, rr, beta=0.2, label_smoothing=label_smoothing,
                           variant=variant)
  np.testing.assert_allclose(loss, want.mean(), rtol=1e-5)
  np.testing.assert_allclose(metrics["reward_accuracy"], np.mean(h > 0), rtol=1e-6)
  grads = jax.jit(jax.grad(lambda a, b: losses.dpo_loss(
      pc, pr, a, b, beta=0.2, label_smoothing=label_smoothing, variant=variant)[0],
      argnums=(0, 1)))(rc, rr)
  for g in grads:
    np.testing.assert_array_equal(g, 0.0)


def test_dpo_gradient_pushes_chosen_up_and_rejected_down():
  grads = jax.jit(jax.grad(lambda c, r: losses.dpo_loss(c, r, PAIR[2], PAIR[3])[0],
                           argnums=(0, 1)))(PAIR[0], PAIR[1])
  # d loss / d logp_w = -beta (1 - sigmoid(beta h)) = -0.1 * (1 - 0.5249792) = -0.0475021.
  np.testing.assert_allclose(grads[0], [-0.1 * (1 - 1 / (1 + np.exp(-0.1)))], rtol=1e-5)
  np.testing.assert_allclose(grads[1], -grads[0], rtol=1e-6)


def test_kto_hand_worked():
  # r = [-1 - (-1.5), -2 - (-1.5)] = [0.5, -0.5]; z0 = 0.2; beta = 0.1.
  # Desirable:   1 - sigmoid(0.1 * (0.5 - 0.2)) = 1 - sigmoid(0.03) = 0.4925006.
  # Undesirable: 1 - sigmoid(0.1 * (0.2 + 0.5)) = 1 - sigmoid(0.07) = 0.4825071.
  # loss = (0.4925006 + 0.4825071) / 2 = 0.4875039.
  policy = np.array([-1., -2.], np.float32)
  ref = np.array([-1.5, -1.5], np.float32)
  desirable = np.array([True, False])
  loss, metrics = kto_loss(policy, ref, desirable, np.float32(0.2))
  np.testing.assert_allclose(loss, 0.4875039, rtol=1e-6)
  np.testing.assert_allclose(metrics["kl_reference"], 0.2, rtol=1e-6)
  np.testing.assert_allclose(metrics["desirable_reward"], 0.05, rtol=1e-6)
  np.testing.assert_allclose(metrics["undesirable_reward"], -0.05, rtol=1e-6)
  # Weights scale each side: 2 * 0.4925006 and 0.5 * 0.4825071 -> (0.9850012 + 0.2412536) / 2.
  loss, _ = kto_loss(policy, ref, desirable, np.float32(0.2), desirable_weight=2.0,
                     undesirable_weight=0.5)
  np.testing.assert_allclose(loss, 0.6131274, rtol=1e-6)
  # A negative KL estimate is clamped to z0 = 0 and no gradient reaches it.
  _, metrics = kto_loss(policy, ref, desirable, np.float32(-0.3))
  assert float(metrics["kl_reference"]) == 0.0
  grad = jax.jit(jax.grad(lambda z: losses.kto_loss(policy, ref, desirable, z)[0]))(
      np.float32(0.2))
  assert float(grad) == 0.0


def test_kto_reference_kl():
  # mean([0.5, -0.1]) = 0.2; a negative mean is clamped to 0.
  np.testing.assert_allclose(losses.kto_reference_kl(np.array([-1., -2.1]), np.array([-1.5, -2.])),
                             0.2, rtol=1e-6)
  assert float(losses.kto_reference_kl(np.array([-2.]), np.array([-1.]))) == 0.0


def test_bradley_terry_hand_worked():
  # Differences [1, -1]: loss = (log(1 + e^-1) + log(1 + e^1)) / 2 = (0.3132617 + 1.3132617) / 2.
  chosen = np.array([2., 0.], np.float32)
  rejected = np.array([1., 1.], np.float32)
  loss, metrics = bradley_terry_loss(chosen, rejected)
  np.testing.assert_allclose(loss, 0.8132617, rtol=1e-6)
  np.testing.assert_allclose(metrics["accuracy"], 0.5)
  np.testing.assert_allclose(metrics["score_margin"], 0.0, atol=1e-7)
  # Margin 1: differences - 1 = [0, -2]: (log 2 + log(1 + e^2)) / 2 = (0.6931472 + 2.1269280) / 2.
  loss, _ = bradley_terry_loss(chosen, rejected, margin=np.float32(1.0))
  np.testing.assert_allclose(loss, 1.4100376, rtol=1e-6)
  loss, _ = bradley_terry_loss(chosen, rejected, margin=np.array([1., 1.], np.float32))
  np.testing.assert_allclose(loss, 1.4100376, rtol=1e-6)


def test_preference_losses_reject_bad_input():
  with pytest.raises(ValueError, match="`ref_rejected_logp` must have shape"):
    losses.dpo_loss(*PAIR[:3], np.zeros(2, np.float32))
  with pytest.raises(ValueError, match="`policy_chosen_logp` must have rank 1"):
    losses.dpo_loss(np.zeros((1, 1), np.float32), *PAIR[1:])
  with pytest.raises(ValueError, match="Unknown variant 'hinge'; valid choices: 'sigmoid', 'ipo'"):
    losses.dpo_loss(*PAIR, variant="hinge")
  with pytest.raises(ValueError, match="`label_smoothing` applies to variant='sigmoid' only"):
    losses.dpo_loss(*PAIR, variant="ipo", label_smoothing=0.1)
  with pytest.raises(ValueError, match="`label_smoothing` must lie in"):
    losses.dpo_loss(*PAIR, label_smoothing=0.7)
  with pytest.raises(ValueError, match="`beta` must lie in"):
    losses.dpo_loss(*PAIR, beta=0.0)
  with pytest.raises(ValueError, match="`is_desirable` must be bool or floating"):
    losses.kto_loss(PAIR[0], PAIR[2], np.ones(1, np.int32), 0.0)
  with pytest.raises(ValueError, match="`is_desirable` must have shape"):
    losses.kto_loss(PAIR[0], PAIR[2], np.ones(2, bool), 0.0)
  with pytest.raises(ValueError, match="`kl_reference` must have rank 0"):
    losses.kto_loss(PAIR[0], PAIR[2], np.ones(1, bool), np.zeros(1, np.float32))
  with pytest.raises(ValueError, match="`rejected_scores` must have shape"):
    losses.bradley_terry_loss(np.zeros(2, np.float32), np.zeros(3, np.float32))
  with pytest.raises(ValueError, match="`margin` must have shape"):
    losses.bradley_terry_loss(np.zeros(2, np.float32), np.zeros(2, np.float32),
                              margin=np.zeros(3, np.float32))


class PreferenceVariantsTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True, with_pmap=True)
  def test_same_numbers_under_jit_and_pmap(self):
    pair = tuple(jnp.asarray(x) for x in PAIR)
    loss, metrics = self.variant(functools.partial(losses.dpo_loss, beta=0.1,
                                                   label_smoothing=0.1))(*pair)
    np.testing.assert_allclose(loss, 0.6543967, rtol=1e-6)
    np.testing.assert_allclose(metrics["reward_margin"], 0.1, rtol=1e-6)
    loss, _ = self.variant(functools.partial(losses.kto_loss, beta=0.1))(
        jnp.array([-1., -2.]), jnp.array([-1.5, -1.5]), jnp.array([True, False]),
        jnp.float32(0.2))
    np.testing.assert_allclose(loss, 0.4875039, rtol=1e-6)
    loss, metrics = self.variant(losses.bradley_terry_loss)(jnp.array([2., 0.]),
                                                           jnp.array([1., 1.]))
    np.testing.assert_allclose(loss, 0.8132617, rtol=1e-6)
    np.testing.assert_allclose(metrics["accuracy"], 0.5)
