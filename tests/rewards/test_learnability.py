"""Tests for the self-play proposer's learnability reward."""

import jax
import numpy as np
import pytest

from rlagents import rewards

P = np.array([0.0, 0.25, 0.5, 0.75, 1.0], np.float32)
ACCEPTED = np.ones(5, bool)


@pytest.mark.parametrize("kind,expected", [
    # 4 p (1 - p): 0, 4 * .25 * .75 = .75, 1, .75, 0
    ("variance", [0.0, 0.75, 1.0, 0.75, 0.0]),
    # 1 - |2p - 1|: 0, 1 - .5 = .5, 1, .5, 0
    ("absolute", [0.0, 0.5, 1.0, 0.5, 0.0]),
])
def test_hand_worked_values_peak_at_one_half(kind, expected):
  out = jax.jit(rewards.learnability_reward, static_argnames="kind")(P, ACCEPTED, kind=kind)
  np.testing.assert_allclose(out, expected, atol=1e-6)
  grid = np.linspace(0, 1, 101, dtype=np.float32)
  values = np.asarray(rewards.learnability_reward(grid, np.ones(101, bool), kind=kind))
  assert grid[np.argmax(values)] == pytest.approx(0.5)
  assert values.max() == pytest.approx(1.0)


@pytest.mark.parametrize("kind,expected", [
    # p^(1/2) (1-p)^(3/2) / (.25^(1/2) .75^(3/2)) = p^.5 (1-p)^1.5 / .32476:
    # .25 -> 1; .5 -> .70711 * .35355 / .32476 = .76980; .75 -> .86603 * .125 / .32476 = .33333
    ("variance", [0.0, 1.0, 0.76980, 0.33333, 0.0]),
    # p / .25 below the peak, (1 - p) / .75 above: 0, 1, .66667, .33333, 0
    ("absolute", [0.0, 1.0, 0.66667, 0.33333, 0.0]),
])
def test_a_lower_peak_moves_the_maximum_and_keeps_the_ends(kind, expected):
  fn = jax.jit(rewards.learnability_reward, static_argnames=("kind", "peak"))
  np.testing.assert_allclose(fn(P, ACCEPTED, kind=kind, peak=0.25), expected, atol=1e-5)
  grid = np.linspace(0, 1, 101, dtype=np.float32)
  values = np.asarray(fn(grid, np.ones(101, bool), kind=kind, peak=0.25))
  assert grid[np.argmax(values)] == pytest.approx(0.25)
  assert values.max() == pytest.approx(1.0, abs=1e-6)
  # Easy problems (p = 7/8) earn less than under the default peak; rarely solved ones more.
  default = np.asarray(fn(grid, np.ones(101, bool), kind=kind))
  assert values[88] < default[88] and values[12] > default[12]
  np.testing.assert_array_equal(
      fn(P, np.zeros(5, bool), kind=kind, peak=0.25), np.zeros(5, np.float32))


@pytest.mark.parametrize("kind", rewards.LEARNABILITY_KINDS)
def test_rejected_proposals_earn_nothing_whatever_their_success(kind):
  # Invalid, unsolvable, duplicate or evaluation-split proposals: accepted False.
  out = rewards.learnability_reward(np.full(5, 0.5, np.float32), np.zeros(5, bool), kind=kind)
  np.testing.assert_array_equal(out, 0.0)
  mixed = rewards.learnability_reward(np.array([.5, .5], np.float32), np.array([True, False]),
                                      kind=kind)
  np.testing.assert_allclose(mixed, [1.0, 0.0])


def test_bad_arguments_are_named():
  with pytest.raises(ValueError, match="kind"):
    rewards.learnability_reward(P, ACCEPTED, kind="entropy")
  with pytest.raises(ValueError, match="peak"):
    rewards.learnability_reward(P, ACCEPTED, peak=1.0)
  with pytest.raises(ValueError, match="accepted"):
    rewards.learnability_reward(P, ACCEPTED.astype(np.float32))
