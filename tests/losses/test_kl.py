"""Tests for the KL estimators, the KL loss term and the KL penalty folded into the reward."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlagents import losses

# Most tests call the losses under jit: on CPU one compilation is several times faster than
# op-by-op dispatch. The un-jitted path is covered by the chex variants.
kl_divergence = jax.jit(losses.kl_divergence, static_argnames=("estimator",))
kl_loss = jax.jit(losses.kl_loss, static_argnames=("estimator", "aggregation", "max_len"))
kl_penalty_in_reward = jax.jit(losses.kl_penalty_in_reward, static_argnames=("beta", "estimator"))

# pi = 0.5, pi_ref = 0.25 on the sampled token: x = log(pi_ref / pi) = log 0.5 = -0.6931472.
LOGP = np.log(np.array([[0.5]], np.float32))
REF = np.log(np.array([[0.25]], np.float32))


@pytest.mark.parametrize("estimator, expected", [
    ("k1", np.log(2)),                      # -x = 0.6931472
    ("k2", 0.5 * np.log(2) ** 2),           # x^2 / 2 = 0.2402265
    ("k3", 0.5 + np.log(0.5) * -1 - 1),     # e^x - x - 1 = 0.5 + 0.6931472 - 1 = 0.1931472
])
def test_kl_estimators_hand_worked(estimator, expected):
  np.testing.assert_allclose(kl_divergence(LOGP, REF, estimator=estimator), [[expected]],
                             rtol=1e-6)


def np_kl_reference(logp, ref, estimator):
  x = ref.astype(np.float64) - logp.astype(np.float64)
  return {"k1": -x, "k2": 0.5 * x ** 2, "k3": np.exp(x) - x - 1}[estimator]


@pytest.mark.parametrize("estimator", losses.KL_ESTIMATORS)
def test_kl_estimators_match_numpy_and_are_unbiased_where_claimed(estimator):
  rng = np.random.default_rng(0)
  logp = rng.normal(-2, 1, size=(6, 9)).astype(np.float32)
  ref = rng.normal(-2, 1, size=(6, 9)).astype(np.float32)
  np.testing.assert_allclose(kl_divergence(logp, ref, estimator=estimator),
                             np_kl_reference(logp, ref, estimator), rtol=1e-5, atol=1e-6)


def test_k1_and_k3_are_unbiased_estimators_of_kl():
  # Exact KL(p || q) of two categoricals vs the sample mean of k1 / k3 over draws from p.
  p = np.array([0.5, 0.3, 0.2])
  q = np.array([0.2, 0.3, 0.5])
  exact = float((p * np.log(p / q)).sum())  # 0.2748872
  samples = np.random.default_rng(0).choice(3, size=200_000, p=p)
  logp, ref = np.log(p[samples]).astype(np.float32), np.log(q[samples]).astype(np.float32)
  for estimator in ("k1", "k3"):
    estimate = float(kl_divergence(logp, ref, estimator=estimator).mean())
    np.testing.assert_allclose(estimate, exact, atol=5e-3)


def test_k3_is_non_negative_and_zero_when_policies_agree():
  rng = np.random.default_rng(1)
  logp = rng.uniform(-30, 0, size=(64, 64)).astype(np.float32)
  ref = np.concatenate([logp[:, :32] + rng.normal(0, 1e-3, size=(64, 32)).astype(np.float32),
                        rng.uniform(-30, 0, size=(64, 32)).astype(np.float32)], axis=1)
  assert np.all(np.asarray(kl_divergence(logp, ref, estimator="k3")) >= 0.0)
  np.testing.assert_array_equal(kl_divergence(logp, logp, estimator="k3"), 0.0)


def test_kl_loss_aggregates_masked_tokens_and_ignores_masked_nonfinite():
  # k3 per token: [[0.1931472, 0], [0.1931472, masked]] -> token_mean = 0.3862944 / 3 = 0.1287648.
  logp = np.array([[np.log(0.5), np.log(0.5)], [np.log(0.5), -np.inf]], np.float32)  # -inf: masked
  ref = np.log(np.array([[0.25, 0.5], [0.25, 0.3]], np.float32))
  mask = np.array([[True, True], [True, False]])
  kl, grad = jax.jit(jax.value_and_grad(lambda lp: losses.kl_loss(lp, ref, mask)[0]))(logp)
  np.testing.assert_allclose(kl, 2 * (0.5 + np.log(0.5) * -1 - 1) / 3, rtol=1e-6)
  assert grad[1, 1] == 0.0 and np.all(np.isfinite(grad))
  # d k3 / d logp = 1 - pi_ref / pi: 1 - 0.5 = 0.5 on the first token, / 3 tokens.
  np.testing.assert_allclose(grad[0, 0], 0.5 / 3, rtol=1e-6)
  np.testing.assert_array_equal(jax.jit(jax.grad(
      lambda r: losses.kl_loss(logp, r, mask)[0]))(ref), 0.0)  # reference is frozen


def test_kl_penalty_in_reward_hand_worked():
  # k1 per token = logp - ref = [log 2, 0, masked]; beta = 0.1:
  # r' = [0 - 0.1 * 0.6931472, 0 - 0, 1 (masked, unchanged)].
  rewards = np.array([[0., 0., 1.]], np.float32)
  logp = np.log(np.array([[0.5, 0.5, 0.5]], np.float32))
  ref = np.log(np.array([[0.25, 0.5, 0.01]], np.float32))
  mask = np.array([[True, True, False]])
  got = kl_penalty_in_reward(rewards, logp, ref, mask, beta=0.1)
  np.testing.assert_allclose(got, [[-0.1 * np.log(2), 0., 1.]], rtol=1e-6)
  grad = jax.jit(jax.grad(lambda lp: losses.kl_penalty_in_reward(
      rewards, lp, ref, mask, beta=0.1).sum()))(logp)
  np.testing.assert_array_equal(grad, 0.0)  # a reward is data


def test_kl_rejects_bad_input():
  with pytest.raises(ValueError, match="Unknown estimator 'k4'; valid choices: 'k1', 'k2', 'k3'"):
    losses.kl_divergence(LOGP, REF, estimator="k4")
  with pytest.raises(ValueError, match="`ref_logp` must have shape"):
    losses.kl_divergence(LOGP, REF[0])
  with pytest.raises(ValueError, match="`loss_mask` must be bool or floating"):
    losses.kl_loss(LOGP, REF, np.ones((1, 1), np.int32))
  with pytest.raises(ValueError, match="`logp` must have rank 2"):
    losses.kl_loss(LOGP[0], REF[0], np.ones(1, bool))
  with pytest.raises(ValueError, match="`rewards_per_token` must have shape"):
    losses.kl_penalty_in_reward(np.zeros((1, 2), np.float32), LOGP, REF, np.ones((1, 1), bool),
                                beta=0.1)
  with pytest.raises(ValueError, match="`beta` must lie in"):
    losses.kl_penalty_in_reward(np.zeros((1, 1), np.float32), LOGP, REF, np.ones((1, 1), bool),
                                beta=-1.0)
  with pytest.raises(ValueError, match="Unknown estimator 'kl'"):
    losses.kl_penalty_in_reward(np.zeros((1, 1), np.float32), LOGP, REF, np.ones((1, 1), bool),
                                beta=0.1, estimator="kl")


class KlVariantsTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True, with_pmap=True)
  def test_same_numbers_under_jit_and_pmap(self):
    logp = jnp.log(jnp.array([[0.5, 0.5], [0.5, 0.9]]))
    ref = jnp.log(jnp.array([[0.25, 0.5], [0.25, 0.3]]))
    mask = jnp.array([[True, True], [True, False]])
    rewards = jnp.zeros((2, 2))
    k3 = 0.5 + np.log(2) - 1

    kl, metrics = self.variant(functools.partial(losses.kl_loss, estimator="k3",
                                                 aggregation="seq_mean_token_mean"))(
                                                     logp, ref, mask)
    np.testing.assert_allclose(kl, (k3 / 2 + k3) / 2, rtol=1e-6)  # mean(k3 / 2, k3)
    np.testing.assert_allclose(metrics["kl"], kl)
    per_token = self.variant(functools.partial(losses.kl_divergence, estimator="k2"))(logp, ref)
    np.testing.assert_allclose(per_token, np_kl_reference(np.asarray(logp), np.asarray(ref), "k2"),
                               rtol=1e-6)
    shaped = self.variant(functools.partial(losses.kl_penalty_in_reward, beta=0.5))(
        rewards, logp, ref, mask)
    np.testing.assert_allclose(shaped, [[-0.5 * np.log(2), 0.], [-0.5 * np.log(2), 0.]],
                               rtol=1e-6)
