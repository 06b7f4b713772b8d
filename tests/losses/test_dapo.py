"""Tests for DAPO's dynamic sampling and overlong reward shaping."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlagents import losses

# Three groups of three: all wrong, mixed, all right.
REWARDS = np.array([0., 0., 0., 1., 0., 1., 1., 1., 1.], np.float32)


def test_dynamic_sampling_mask_hand_worked():
  np.testing.assert_array_equal(losses.dynamic_sampling_mask(REWARDS, group_size=3),
                                [False, True, False])


def test_select_informative_groups_drops_and_refills():
  # Want 2 groups from 3 candidates: only group 1 varies, so the batch is short (3 indices).
  keep = losses.select_informative_groups(REWARDS, group_size=3, num_groups=2)
  np.testing.assert_array_equal(keep, [3, 4, 5])
  # Two extra groups arrive; group 3 is all equal, group 4 varies and fills the batch.
  pool = np.concatenate([REWARDS, [.5, .5, .5], [0., .2, 0.]]).astype(np.float32)
  keep = losses.select_informative_groups(pool, group_size=3, num_groups=2)
  np.testing.assert_array_equal(keep, [3, 4, 5, 12, 13, 14])
  assert keep.dtype == np.int64
  # Once full, extra informative groups are not taken.
  keep = losses.select_informative_groups(np.tile(pool[9:15], 3), group_size=3, num_groups=2)
  np.testing.assert_array_equal(keep, [3, 4, 5, 9, 10, 11])


def test_select_informative_groups_rejects_bad_input():
  with pytest.raises(ValueError, match="`num_groups` must be a positive int"):
    losses.select_informative_groups(REWARDS, group_size=3, num_groups=0)
  with pytest.raises(ValueError, match="`rewards` has 9 entries"):
    losses.select_informative_groups(REWARDS, group_size=4, num_groups=1)


def test_overlong_penalty_hand_worked():
  # L = 10, C = 4, soft zone (6, 10]: 5 -> 0, 6 -> 0, 8 -> (6 - 8) / 4 = -0.5, 9 -> -0.75,
  # 10 -> -1, 12 -> -1 (beyond the budget).
  lengths = np.array([5, 6, 8, 9, 10, 12], np.int32)
  got = losses.overlong_penalty(lengths, max_len=10, buffer_len=4)
  np.testing.assert_allclose(got, [0., 0., -0.5, -0.75, -1., -1.], rtol=1e-6)
  assert got.dtype == jnp.float32
  np.testing.assert_allclose(losses.overlong_penalty(lengths, max_len=10, buffer_len=4,
                                                     penalty=2.0),
                             [0., 0., -1., -1.5, -2., -2.], rtol=1e-6)


def test_overlong_penalty_matches_numpy_reference():
  lengths = np.arange(0, 70, dtype=np.int32)
  max_len, buffer_len = 60, 16

  def reference(n):
    if n <= max_len - buffer_len:
      return 0.0
    if n <= max_len:
      return ((max_len - buffer_len) - n) / buffer_len
    return -1.0

  np.testing.assert_allclose(
      jax.jit(functools.partial(losses.overlong_penalty, max_len=max_len,
                                buffer_len=buffer_len))(lengths),
      [reference(n) for n in lengths], rtol=1e-6, atol=1e-7)


def test_overlong_penalty_rejects_bad_input():
  with pytest.raises(ValueError, match="`buffer_len` must lie in"):
    losses.overlong_penalty(np.array([1]), max_len=10, buffer_len=11)
  with pytest.raises(ValueError, match="`buffer_len` must lie in"):
    losses.overlong_penalty(np.array([1]), max_len=10, buffer_len=0)
  with pytest.raises(ValueError, match="`lengths` must have rank 1"):
    losses.overlong_penalty(np.array([[1]]), max_len=10, buffer_len=4)
  with pytest.raises(ValueError, match="`lengths` must be an int or float array"):
    losses.overlong_penalty(np.array([True]), max_len=10, buffer_len=4)


class DapoVariantsTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True, with_pmap=True)
  def test_same_numbers_under_jit_and_pmap(self):
    keep = self.variant(functools.partial(losses.dynamic_sampling_mask, group_size=3))(
        jnp.asarray(REWARDS))
    np.testing.assert_array_equal(keep, [False, True, False])
    penalty = self.variant(functools.partial(losses.overlong_penalty, max_len=10,
                                             buffer_len=4))(jnp.array([5, 8, 12]))
    np.testing.assert_allclose(penalty, [0., -0.5, -1.], rtol=1e-6)
