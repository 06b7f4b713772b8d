"""Tests for role-conditioned advantages (self-play's proposer and solver in one policy)."""

import functools

import chex
import jax
import numpy as np
import pytest

from rlagents import losses

# Two solver groups of four and one proposer group of four, in any order of rows.
#   solver group 0: [1, 0, 1, 0]            mean 0.5 -> centred [.5, -.5, .5, -.5]
#   solver group 1: [1, 1, 1, 1]            all equal -> centred 0
#   proposer group 2: [0, .64, 1, .36]      mean 0.5 -> centred [-.5, .14, .5, -.14]
# Solver role: mean of c^2 over its 8 episodes = (4 * .25) / 8 = .125, std = .353553
#   -> advantages +-.5 / .353553 = +-1.414214 and 0 for group 1.
# Proposer role: mean of c^2 = (.25 + .0196 + .25 + .0196) / 4 = .1348, std = .367151
#   -> advantages [-1.361838, .381315, 1.361838, -.381315].
REWARDS = np.array([1, 0, 1, 0, 1, 1, 1, 1, 0, .64, 1, .36], np.float32)
GROUPS = np.array([0] * 4 + [1] * 4 + [2] * 4, np.int32)
ROLES = np.array([0] * 8 + [1] * 4, np.int32)
EXPECTED = np.array([1.414214, -1.414214, 1.414214, -1.414214, 0, 0, 0, 0,
                     -1.361838, .381315, 1.361838, -.381315], np.float32)


class RoleConditionedAdvantagesTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_hand_worked_example(self):
    fn = self.variant(functools.partial(losses.role_conditioned_advantages, num_groups=3,
                                        num_roles=2, epsilon=0.0))
    np.testing.assert_allclose(fn(REWARDS, GROUPS, ROLES), EXPECTED, atol=1e-5)

  def test_rows_may_come_in_any_order(self):
    order = np.random.default_rng(0).permutation(len(REWARDS))
    out = losses.role_conditioned_advantages(REWARDS[order], GROUPS[order], ROLES[order],
                                             num_groups=3, epsilon=0.0)
    np.testing.assert_allclose(out, EXPECTED[order], atol=1e-5)

  def test_a_role_is_not_scaled_by_the_other(self):
    # Multiplying the solver's rewards by 10 leaves both roles' advantages as they were.
    scaled = np.where(ROLES == 0, REWARDS * 10, REWARDS)
    out = losses.role_conditioned_advantages(scaled, GROUPS, ROLES, num_groups=3, epsilon=0.0)
    np.testing.assert_allclose(out, EXPECTED, atol=1e-5)

  def test_constant_role_gets_zero(self):
    rewards = np.array([.3, .3, .3, .3, 0, 1, 0, 1], np.float32)
    out = losses.role_conditioned_advantages(rewards, np.array([0, 0, 0, 0, 1, 1, 1, 1]),
                                             np.array([1, 1, 1, 1, 0, 0, 0, 0]), num_groups=2)
    np.testing.assert_array_equal(np.asarray(out)[:4], 0.0)
    np.testing.assert_allclose(np.asarray(out)[4:], [-1, 1, -1, 1], atol=1e-5)

  def test_bad_arguments_are_named(self):
    with pytest.raises(ValueError, match="group_ids"):
      losses.role_conditioned_advantages(REWARDS, GROUPS[:-1], ROLES, num_groups=3)
    with pytest.raises(ValueError, match="roles"):
      losses.role_conditioned_advantages(REWARDS, GROUPS, ROLES.astype(np.float32),
                                         num_groups=3)
