"""The learned (soft) reward term: normalizations and how it adds to the verifiable reward."""

import numpy as np
import pytest

from rlagents import rewards
from rlagents.episodes import Episode


def test_group_normalization_is_a_z_score_per_group():
  config = rewards.SoftRewardConfig(weight=1.0, normalization="group", clip=0.0)
  out = rewards.normalize_scores(np.array([1., 3., 10., 10., 0., 4.]), config, group_size=2)
  np.testing.assert_allclose(out, [-1, 1, 0, 0, -1, 1], atol=1e-5)


def test_running_normalization_uses_every_score_seen():
  config = rewards.SoftRewardConfig(weight=1.0, normalization="running", clip=0.0)
  running = rewards.RunningMeanStd()
  rewards.normalize_scores(np.array([0., 2.]), config, running=running)
  out = rewards.normalize_scores(np.array([4., 6.]), config, running=running)
  all_seen = np.array([0., 2., 4., 6.])
  np.testing.assert_allclose(out, (np.array([4., 6.]) - all_seen.mean()) / all_seen.std(),
                             rtol=1e-5)
  assert running.count == 4


def test_added_term_is_weighted_clipped_and_logged():
  episodes = [Episode(task=None, reward=1.0), Episode(task=None, reward=0.0)]
  config = rewards.SoftRewardConfig(weight=0.5, normalization="none", clip=3.0)
  rewards.add_learned_reward(episodes, np.array([10.0, -1.0]), config)
  assert episodes[0].reward == pytest.approx(1.0 + 0.5 * 3.0)  # clipped at 3
  assert episodes[1].reward == pytest.approx(-0.5)
  assert episodes[0].reward_terms == {"learned_score": 10.0, "learned_term": 3.0}


def test_bad_settings():
  with pytest.raises(ValueError, match="normalization"):
    rewards.SoftRewardConfig(normalization="minmax")
  with pytest.raises(ValueError, match="group_size"):
    rewards.normalize_scores(np.ones(3), rewards.SoftRewardConfig(normalization="group"),
                             group_size=2)
