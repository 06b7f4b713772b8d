"""Tests for the group advantage estimators and GAE."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlagents import losses

# Most tests call the losses under jit: on CPU one compilation is several times faster than
# op-by-op dispatch. The un-jitted path is covered by the chex variants.
group_relative_advantages = jax.jit(losses.group_relative_advantages,
                                    static_argnames=("group_size",))
dr_grpo_advantages = jax.jit(losses.dr_grpo_advantages, static_argnames=("group_size",))
rloo_advantages = jax.jit(losses.rloo_advantages, static_argnames=("group_size",))
reinforce_pp_advantages = jax.jit(losses.reinforce_pp_advantages,
                                  static_argnames=("group_size", "group_baseline"))
gae_advantages = jax.jit(losses.gae_advantages, static_argnames=("discount", "gae_lambda"))


@functools.cache
def jitted_estimator(name):
  return jax.jit(losses.get_advantage_estimator(name), static_argnames=("group_size",))

# Two groups of four, group-major: [1, 0, 0, 1] and [3, 1, 2, 2].
REWARDS = np.array([1., 0., 0., 1., 3., 1., 2., 2.], np.float32)


def np_group_reference(rewards, group_size, estimator, epsilon=1e-6):
  """Independent numpy reference: loops over groups and completions."""
  out = np.zeros_like(rewards, dtype=np.float64)
  groups = [rewards[i:i + group_size].astype(np.float64)
            for i in range(0, len(rewards), group_size)]
  centred_all = []
  for g, group in enumerate(groups):
    for i, r in enumerate(group):
      if estimator == "grpo":
        value = (r - group.mean()) / (np.sqrt(((group - group.mean()) ** 2).mean()) + epsilon)
      elif estimator == "dr_grpo":
        value = r - group.mean()
      elif estimator == "rloo":
        value = r - (group.sum() - r) / (group_size - 1)
      else:  # reinforce_pp: group-centred, then divided by the batch std.
        value = r - group.mean()
      out[g * group_size + i] = value
      centred_all.append(value)
  if estimator == "reinforce_pp":
    out = out / (np.std(centred_all) + epsilon)
  return out


def test_grpo_hand_worked():
  # Group 1: mean 0.5, population std sqrt((4 * 0.25) / 4) = 0.5, so A = +-0.5 / (0.5 + 1e-6).
  # Group 2: mean 2, deviations [1, -1, 0, 0], var = 2 / 4 = 0.5, std = 0.7071068.
  a = 0.5 / (0.5 + 1e-6)
  b = 1.0 / (np.sqrt(0.5) + 1e-6)
  expected = [a, -a, -a, a, b, -b, 0., 0.]
  np.testing.assert_allclose(group_relative_advantages(REWARDS, group_size=4), expected,
                             rtol=1e-6)


def test_grpo_uses_population_std():
  # Group [0, 2]: mean 1, ddof=0 std = 1 (ddof=1 would give sqrt(2)); epsilon 0 for exactness.
  np.testing.assert_allclose(
      group_relative_advantages(np.array([0., 2.]), group_size=2, epsilon=0.0), [-1., 1.])


def test_dr_grpo_hand_worked():
  # r - group mean: group means 0.5 and 2.
  np.testing.assert_allclose(dr_grpo_advantages(REWARDS, group_size=4),
                             [.5, -.5, -.5, .5, 1., -1., 0., 0.], rtol=1e-6)


def test_rloo_hand_worked():
  # Group 1: 1 - (0 + 0 + 1) / 3 = 2/3 and 0 - (1 + 0 + 1) / 3 = -2/3.
  # Group 2: 3 - (1 + 2 + 2) / 3 = 4/3, 1 - (3 + 2 + 2) / 3 = -4/3, 2 - (3 + 1 + 2) / 3 = 0.
  expected = [2 / 3, -2 / 3, -2 / 3, 2 / 3, 4 / 3, -4 / 3, 0., 0.]
  np.testing.assert_allclose(rloo_advantages(REWARDS, group_size=4), expected, rtol=1e-6,
                             atol=1e-6)


def test_reinforce_pp_hand_worked():
  # Group-centred c = [.5, -.5, -.5, .5, 1, -1, 0, 0]; batch mean 0;
  # batch var = (4 * 0.25 + 1 + 1) / 8 = 0.375, std = 0.6123724.
  c = np.array([.5, -.5, -.5, .5, 1., -1., 0., 0.])
  np.testing.assert_allclose(reinforce_pp_advantages(REWARDS, group_size=4),
                             c / (np.sqrt(0.375) + 1e-6), rtol=1e-6)


def test_reinforce_pp_without_group_baseline_whitens_raw_rewards():
  # Batch mean 10 / 8 = 1.25; squared deviations sum to 7.5, var = 0.9375, std = 0.9682458.
  expected = (REWARDS - 1.25) / (np.sqrt(0.9375) + 1e-6)
  np.testing.assert_allclose(
      reinforce_pp_advantages(REWARDS, group_size=4, group_baseline=False), expected,
      rtol=1e-6)
  # A group of one is allowed only without the group baseline.
  np.testing.assert_allclose(
      reinforce_pp_advantages(REWARDS, group_size=1, group_baseline=False), expected,
      rtol=1e-6)


@pytest.mark.parametrize("estimator", ["grpo", "dr_grpo", "rloo", "reinforce_pp"])
@pytest.mark.parametrize("group_size", [2, 3, 8])
def test_group_estimators_match_numpy_reference(estimator, group_size):
  rewards = np.random.default_rng(group_size).normal(size=6 * group_size).astype(np.float32)
  got = jitted_estimator(estimator)(rewards, group_size=group_size, epsilon=1e-6)
  np.testing.assert_allclose(got, np_group_reference(rewards, group_size, estimator), rtol=1e-5,
                             atol=1e-5)


@pytest.mark.parametrize("estimator", losses.ADVANTAGE_ESTIMATORS)
@pytest.mark.parametrize("constant", [0.0, 1.0, 0.1, 0.7, 1 / 3])
def test_equal_reward_group_gets_exactly_zero_advantage(estimator, constant):
  # 16 copies of 0.7: the float32 mean is off by one ulp, and (r - mean) / (std + 1e-6) would
  # give ~0.1 without the exact-zero rule.
  group_size = 16
  varied = np.linspace(0., 1., group_size, dtype=np.float32)
  rewards = np.concatenate([varied, np.full(group_size, constant, np.float32), varied[::-1]])
  advantages = np.asarray(jitted_estimator(estimator)(
      rewards, group_size=group_size, epsilon=1e-6))
  np.testing.assert_array_equal(advantages[group_size:2 * group_size], 0.0)
  assert np.all(advantages[:group_size] != 0.0) or estimator == "rloo"


def test_all_groups_constant_gives_all_zero():
  rewards = np.array([0.3] * 4 + [1.0] * 4, np.float32)
  for name in losses.ADVANTAGE_ESTIMATORS:
    np.testing.assert_array_equal(
        jitted_estimator(name)(rewards, group_size=4, epsilon=1e-6), 0.0)


@pytest.mark.parametrize("fn", [losses.group_relative_advantages, losses.dr_grpo_advantages,
                                losses.rloo_advantages, losses.reinforce_pp_advantages])
def test_group_estimators_reject_bad_input(fn):
  with pytest.raises(ValueError, match="`rewards` has 7 entries"):
    fn(np.zeros(7, np.float32), group_size=4)
  with pytest.raises(ValueError, match="`rewards` must have rank 1"):
    fn(np.zeros((2, 4), np.float32), group_size=4)
  with pytest.raises(ValueError, match="`group_size` must be >= 2"):
    fn(np.zeros(4, np.float32), group_size=1)
  with pytest.raises(ValueError, match="`group_size` must be a Python int"):
    fn(np.zeros(4, np.float32), group_size=2.0)
  with pytest.raises(ValueError, match="`rewards` must be a floating-point array"):
    fn(np.zeros(4, np.complex64), group_size=2)


def test_integer_and_bool_rewards_are_converted():
  # Verifiers often return 0/1 integers or bools.
  as_float = group_relative_advantages(REWARDS[:4], group_size=4)
  np.testing.assert_array_equal(group_relative_advantages(REWARDS[:4].astype(np.int32),
                                                          group_size=4), as_float)
  np.testing.assert_array_equal(group_relative_advantages(REWARDS[:4].astype(bool),
                                                          group_size=4), as_float)


def test_estimators_take_no_unused_kwargs():
  with pytest.raises(TypeError):
    dr_grpo_advantages(REWARDS, group_size=4, epsilon=1e-6)  # pytype: disable=wrong-keyword-args


class GroupEstimatorVariantsTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True, with_pmap=True)
  def test_same_numbers_under_jit_and_pmap(self):
    for name in losses.ADVANTAGE_ESTIMATORS:
      estimator = functools.partial(losses.get_advantage_estimator(name), group_size=4,
                                    epsilon=1e-6)
      got = self.variant(estimator)(jnp.asarray(REWARDS))
      np.testing.assert_allclose(got, np_group_reference(REWARDS, 4, name), rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------------------------
# GAE.

GAMMA, LAMBDA = 0.9, 0.5
R = np.array([1., 0., 2.], np.float32)
V = np.array([0.5, 1.0, 1.5], np.float32)
BOOTSTRAP = np.float32(2.0)


def np_gae_reference(rewards, values, dones, bootstrap, gamma, lam, truncations=None,
                     truncation_values=None):
  """Independent numpy reference: an explicit backward loop."""
  T = len(rewards)
  truncations = np.zeros(T) if truncations is None else truncations
  advantages = np.zeros(T)
  next_advantage = 0.0
  for t in reversed(range(T)):
    if dones[t]:
      delta, next_advantage = rewards[t] - values[t], 0.0
    elif truncations[t]:
      delta, next_advantage = rewards[t] + gamma * truncation_values[t] - values[t], 0.0
    else:
      next_value = values[t + 1] if t + 1 < T else bootstrap
      delta = rewards[t] + gamma * next_value - values[t]
    advantages[t] = delta + gamma * lam * next_advantage
    next_advantage = advantages[t]
  return advantages, advantages + values


def test_gae_hand_worked_no_done():
  # next values [1.0, 1.5, 2.0]
  # delta0 = 1 + .9 * 1.0 - .5 = 1.4; delta1 = 0 + .9 * 1.5 - 1 = .35;
  # delta2 = 2 + .9 * 2 - 1.5 = 2.3
  # A2 = 2.3; A1 = .35 + .45 * 2.3 = 1.385; A0 = 1.4 + .45 * 1.385 = 2.02325
  advantages, returns = gae_advantages(R, V, np.zeros(3, bool), discount=GAMMA,
                                              gae_lambda=LAMBDA, bootstrap_value=BOOTSTRAP)
  np.testing.assert_allclose(advantages, [2.02325, 1.385, 2.3], rtol=1e-6)
  np.testing.assert_allclose(returns, [2.52325, 2.385, 3.8], rtol=1e-6)


def test_gae_done_stops_bootstrap_and_trace():
  # Episode ends after step 1: delta1 = 0 - 1 = -1, A1 = -1 (no A2 term); A2 = 2.3 (new episode);
  # A0 = 1.4 + .45 * (-1) = 0.95.
  advantages, _ = gae_advantages(R, V, np.array([False, True, False]), discount=GAMMA,
                                        gae_lambda=LAMBDA, bootstrap_value=BOOTSTRAP)
  np.testing.assert_allclose(advantages, [0.95, -1.0, 2.3], rtol=1e-6)


def test_gae_truncation_bootstraps_from_truncation_value():
  # Cut after step 1, V(cut state) = 3: delta1 = 0 + .9 * 3 - 1 = 1.7, A1 = 1.7 (no A2 term);
  # A0 = 1.4 + .45 * 1.7 = 2.165; A2 = 2.3.
  advantages, returns = gae_advantages(
      R, V, np.zeros(3, bool), discount=GAMMA, gae_lambda=LAMBDA, bootstrap_value=BOOTSTRAP,
      truncations=np.array([False, True, False]),
      truncation_values=np.array([9., 3., 9.], np.float32))
  np.testing.assert_allclose(advantages, [2.165, 1.7, 2.3], rtol=1e-6)
  np.testing.assert_allclose(returns, [2.665, 2.7, 3.8], rtol=1e-6)


def test_gae_done_wins_over_truncation():
  advantages, _ = gae_advantages(
      R, V, np.array([0., 1., 0.], np.float32), discount=GAMMA, gae_lambda=LAMBDA,
      bootstrap_value=BOOTSTRAP, truncations=np.array([False, True, False]),
      truncation_values=np.full(3, 3., np.float32))
  np.testing.assert_allclose(advantages, [0.95, -1.0, 2.3], rtol=1e-6)


def test_gae_lambda_one_gives_discounted_returns_minus_values():
  # lambda = 1, no dones: returns are the discounted sums bootstrapped from V(s_T):
  # G2 = 2 + .9 * 2 = 3.8; G1 = 0 + .9 * 3.8 = 3.42; G0 = 1 + .9 * 3.42 = 4.078.
  _, returns = gae_advantages(R, V, np.zeros(3, bool), discount=GAMMA, gae_lambda=1.0,
                                     bootstrap_value=BOOTSTRAP)
  np.testing.assert_allclose(returns, [4.078, 3.42, 3.8], rtol=1e-6)


def random_trajectories(seed, T=12, B=5):
  rng = np.random.default_rng(seed)
  return dict(
      rewards=rng.normal(size=(T, B)).astype(np.float32),
      values=rng.normal(size=(T, B)).astype(np.float32),
      dones=rng.random((T, B)) < 0.2,
      bootstrap_value=rng.normal(size=B).astype(np.float32),
      truncations=rng.random((T, B)) < 0.15,
      truncation_values=rng.normal(size=(T, B)).astype(np.float32),
  )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gae_time_major_batch_matches_numpy_and_vmap(seed):
  data = random_trajectories(seed)
  advantages, returns = gae_advantages(
      data["rewards"], data["values"], data["dones"], discount=0.97, gae_lambda=0.9,
      bootstrap_value=data["bootstrap_value"], truncations=data["truncations"],
      truncation_values=data["truncation_values"])
  for b in range(data["rewards"].shape[1]):
    want_adv, want_ret = np_gae_reference(
        data["rewards"][:, b], data["values"][:, b], data["dones"][:, b],
        data["bootstrap_value"][b], 0.97, 0.9, data["truncations"][:, b],
        data["truncation_values"][:, b])
    np.testing.assert_allclose(advantages[:, b], want_adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(returns[:, b], want_ret, rtol=1e-5, atol=1e-5)

  def one_trajectory(r, v, d, bootstrap_value, truncations, truncation_values):
    return losses.gae_advantages(r, v, d, discount=0.97, gae_lambda=0.9,
                                 bootstrap_value=bootstrap_value, truncations=truncations,
                                 truncation_values=truncation_values)

  vmapped = jax.jit(jax.vmap(one_trajectory, in_axes=(1, 1, 1, 0, 1, 1), out_axes=1))
  vm_adv, vm_ret = vmapped(*data.values())  # The dict is in argument order.
  np.testing.assert_allclose(vm_adv, advantages, rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(vm_ret, returns, rtol=1e-6, atol=1e-6)


def test_gae_outputs_are_stopped_targets():
  def total_advantage(values):
    advantages, returns = losses.gae_advantages(R, values, np.zeros(3, bool), discount=GAMMA,
                                                gae_lambda=LAMBDA, bootstrap_value=BOOTSTRAP)
    return advantages.sum() + returns.sum()
  np.testing.assert_array_equal(jax.jit(jax.grad(total_advantage))(jnp.asarray(V)), 0.0)


def test_gae_rejects_bad_input():
  zeros = np.zeros(3, np.float32)
  call = functools.partial(losses.gae_advantages, discount=GAMMA, gae_lambda=LAMBDA,
                           bootstrap_value=BOOTSTRAP)
  with pytest.raises(ValueError, match="`values` must have shape"):
    call(R, np.zeros(4, np.float32), zeros)
  with pytest.raises(ValueError, match="`dones` must have shape"):
    call(R, V, np.zeros(2))
  with pytest.raises(ValueError, match="`rewards` must have rank 1 or 2"):
    call(np.zeros((3, 2, 2), np.float32), V, zeros)
  with pytest.raises(ValueError, match="`bootstrap_value` must have shape"):
    losses.gae_advantages(R, V, zeros, discount=GAMMA, gae_lambda=LAMBDA,
                          bootstrap_value=np.zeros(3, np.float32))
  with pytest.raises(ValueError, match="`truncation_values`"):
    call(R, V, zeros, truncations=np.zeros(3, bool))
  with pytest.raises(ValueError, match="`discount` must lie in"):
    losses.gae_advantages(R, V, zeros, discount=1.5, gae_lambda=LAMBDA, bootstrap_value=0.)


class GaeVariantsTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True, with_pmap=True)
  def test_same_numbers_under_jit_and_pmap(self):
    gae = functools.partial(losses.gae_advantages, discount=GAMMA, gae_lambda=LAMBDA)
    advantages, returns = self.variant(
        lambda r, v, d, bv: gae(r, v, d, bootstrap_value=bv))(
            jnp.asarray(R), jnp.asarray(V), jnp.array([False, True, False]), jnp.asarray(BOOTSTRAP))
    np.testing.assert_allclose(advantages, [0.95, -1.0, 2.3], rtol=1e-6)
    np.testing.assert_allclose(returns, [1.45, 0.0, 3.8], rtol=1e-6, atol=1e-6)
