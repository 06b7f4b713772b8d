"""PPO: it learns CartPole and the key-door maze on small budgets, vmapped over seeds; bad input."""

import dataclasses

import jax
import numpy as np
import pytest

from rlagents import envs
from rlagents.learners import ppo

# Learns CartPole in 50k steps (~2 s after a ~10 s compile on one core). A random policy averages
# ~22 per episode.
CARTPOLE = ppo.PPOConfig(total_timesteps=50_000, num_envs=8, num_steps=32, num_minibatches=2,
                         learning_rate=2.5e-3)
# The maze pays only at the goal (22 steps away at best, 200-step limit; a random walk succeeds
# ~2.5% of the time). Without advantage normalisation (which blows up the near-zero advantages
# of the first, rewardless batches into noise) each of 12 seeds tried solved it within ~50k of
# these 200k steps.
MAZE = ppo.PPOConfig(env_name="KeyDoorMaze-v0", total_timesteps=200 * 1024, num_envs=16,
                     num_steps=64, learning_rate=2.5e-3, entropy_coef=0.01,
                     normalize_advantages=False)


@pytest.fixture(scope="module")
def cartpole_run():
  train = jax.jit(jax.vmap(ppo.make_train(CARTPOLE)))
  return jax.device_get(train(jax.random.split(jax.random.key(0), 2)))


def test_cartpole_learns_with_two_vmapped_seeds(cartpole_run):
  _, metrics = cartpole_run
  assert metrics["episode_return"].shape == (2, CARTPOLE.num_updates)
  rolling = ppo.rolling_episode_mean(metrics["episode_return"], metrics["episodes"], window=20)
  assert np.all(rolling[:, 4] < 60), rolling[:, 4]  # the first updates are near random
  assert np.all(rolling[:, -1] > 200), rolling[:, -1]  # clearly learned (random: ~22)
  assert not np.allclose(metrics["episode_return"][0], metrics["episode_return"][1],
                         equal_nan=True)  # the seeds are independent


def test_metrics_and_schedule(cartpole_run):
  state, metrics = cartpole_run
  for name in ("loss", "pg_loss", "value_loss", "entropy", "approx_kl", "clip_fraction",
               "explained_variance", "grad_norm", "learning_rate", "episodes"):
    assert np.all(np.isfinite(metrics[name])), name
  np.testing.assert_array_equal(metrics["env_steps"][:, -1],
                                CARTPOLE.num_updates * CARTPOLE.batch_size)
  np.testing.assert_array_equal(state.update_step, CARTPOLE.num_updates)
  # Linear annealing, constant within an update: lr * (1 - u / num_updates) at update u.
  np.testing.assert_allclose(metrics["learning_rate"][0, [0, -1]],
                             [2.5e-3, 2.5e-3 / CARTPOLE.num_updates], rtol=1e-5)
  assert "episode_success" not in metrics  # CartPole has no notion of success
  assert np.all(metrics["entropy"][:, 0] > 0.68)  # ~log 2 = 0.693: the initial policy is uniform


def test_key_door_maze_is_learned():
  train = jax.jit(jax.vmap(ppo.make_train(MAZE)))
  _, metrics = jax.device_get(train(jax.random.split(jax.random.key(0), 2)))
  successes = np.nan_to_num(metrics["episode_success"]) * metrics["episodes"]

  def success_rate(updates):  # over all episodes that ended in those updates
    return successes[:, updates].sum(1) / metrics["episodes"][:, updates].sum(1)

  assert np.all(success_rate(slice(0, 8)) < 0.2)  # near a random walk at first
  final = success_rate(slice(-5, None))
  assert np.all(final > 0.9), final
  assert np.all(np.nanmean(metrics["episode_length"][:, -5:], axis=1) < 60)


@pytest.mark.parametrize("kwargs, message", [
    (dict(num_envs=3, num_steps=10, num_minibatches=4),
     r"num_envs \* num_steps = 3 \* 10 = 30 transitions is not divisible by num_minibatches = 4"),
    (dict(total_timesteps=100), "less than one batch"),
    (dict(activation="swish"), "Unknown activation 'swish'"),
    (dict(discount=1.5), r"discount must be in \[0, 1\]"),
    (dict(value_clip_epsilon=0.0), "value_clip_epsilon must be > 0 or None"),
    (dict(num_envs=0), "num_envs must be >= 1"),
])
def test_bad_config(kwargs, message):
  with pytest.raises(ValueError, match=message):
    ppo.PPOConfig(**kwargs)


@dataclasses.dataclass(frozen=True)
class BranchingCartPole(envs.CartPole):
  def step(self, state, action, key):
    if state.theta > 0:  # a Python `if` on a traced value
      action = 1 - action
    return super().step(state, action, key)


def test_rejects_an_env_that_is_not_jittable():
  with pytest.raises(envs.InvalidEnvironmentError, match="BranchingCartPole.reset/step is not "
                     "jittable"):
    ppo.make_train(CARTPOLE, BranchingCartPole())


def test_unknown_env_name():
  with pytest.raises(ValueError, match="Unknown environment 'Acrobot'"):
    ppo.make_train(dataclasses.replace(CARTPOLE, env_name="Acrobot"))


def test_rolling_episode_mean_hand_worked():
  # Updates end 2, 0, 1 and 3 episodes with mean returns 10, -, 40 and 20. With a window of 3
  # episodes: after update 0, both (10); update 1, still both (10); update 2, the latest updates
  # holding >= 3 episodes are 0..2: (2*10 + 40) / 3 = 20; update 3 alone holds 3: 20.
  returns = np.array([10.0, np.nan, 40.0, 20.0])
  episodes = np.array([2, 0, 1, 3])
  np.testing.assert_allclose(ppo.rolling_episode_mean(returns, episodes, window=3),
                             [10.0, 10.0, 20.0, 20.0])
  # Leading axes (seeds) are kept; NaN until an episode ends.
  out = ppo.rolling_episode_mean(np.array([[np.nan, 5.0]]), np.array([[0, 1]]), window=3)
  np.testing.assert_allclose(out, [[np.nan, 5.0]])


def test_steps_to_rolling_target_waits_for_a_full_window():
  # A maze's first episodes to end are its successes (failures run to the time limit): the mean
  # over the 2 episodes of update 0 is 1.0, but the window of 3 is full only at update 2, whose
  # mean is (2*1 + 0) / 3; update 3 alone holds 3 successes.
  success = np.array([[1.0, np.nan, 0.0, 1.0], [1.0, 0.0, 0.0, 0.0]])
  episodes = np.array([[2, 0, 1, 3], [1, 1, 1, 1]])
  env_steps = np.array([[10, 20, 30, 40], [10, 20, 30, 40]])
  assert ppo.rolling_episode_mean(success, episodes, 3)[0, 0] == 1.0
  assert ppo.steps_to_rolling_target(success, episodes, env_steps, 0.95, window=3) == [40, None]
  assert ppo.steps_to_rolling_target(success, episodes, env_steps, 0.6, window=3) == [30, None]


def test_data_parallel_keeps_parameters_equal_across_devices_and_learns():
  # The CartPole budget above with its 8 environments split over 2 devices (4 each).
  train = ppo.make_data_parallel_train(CARTPOLE, num_devices=2)
  state, metrics = jax.device_get(train(jax.random.key(0)))
  leaves = jax.tree.leaves(state.params)
  for leaf in leaves:
    np.testing.assert_array_equal(leaf[0], leaf[1])  # gradients averaged over 'data'
  assert not np.array_equal(state.obs[0], state.obs[1])  # the devices step different envs
  np.testing.assert_array_equal(metrics["env_steps"][-1], CARTPOLE.num_updates
                                * CARTPOLE.batch_size)
  rolling = ppo.rolling_episode_mean(metrics["episode_return"], metrics["episodes"], window=20)
  assert rolling[-1] > 200, rolling[-1]


@pytest.mark.parametrize("num_envs, num_devices, message", [
    (6, 4, "num_envs = 6 is not divisible by the device count 4"),
    (8, 8, r"each of the 8 devices holds 32 transitions of the batch, not divisible by "
           r"num_minibatches = 64"),
    (8, 16, "num_envs = 8 is not divisible by the device count 16"),
    (16, 16, "only 8 local device"),
])
def test_data_parallel_rejects_a_batch_that_does_not_split(num_envs, num_devices, message):
  config = dataclasses.replace(CARTPOLE, num_envs=num_envs,
                               num_minibatches=64 if num_envs == 8 and num_devices == 8 else 2)
  with pytest.raises(ValueError, match=message):
    ppo.make_data_parallel_train(config, num_devices=num_devices)
