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
  with pytest.raises(ValueError, match="accepted"):
    rewards.learnability_reward(P, ACCEPTED.astype(np.float32))
