"""Wrappers (auto-reset, episode statistics, vmapped batches, action checks) and the API checks."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlagents import envs

KEY = jax.random.key(0)


@dataclasses.dataclass(frozen=True)
class Countdown(envs.Environment):
  """Obs is the steps left; done when it reaches 0 (terminal) or after `limit` steps (cut).
  Reset draws the start count from {2, 3, 4}; reward = the action."""
  limit: int = 100

  def observation_spec(self):
    return envs.BoxSpec(shape=(1,))

  def action_spec(self):
    return envs.DiscreteSpec(3)

  def reset(self, key):
    left = jax.random.randint(key, (), 2, 5)
    return (left, jnp.int32(0)), left.astype(jnp.float32)[None]

  def step(self, state, action, key):
    left, time = state[0] - 1, state[1] + 1
    terminated = left == 0
    truncated = (time >= self.limit) & ~terminated
    return ((left, time), left.astype(jnp.float32)[None], action.astype(jnp.float32),
            terminated | truncated, {"truncated": truncated})


def test_auto_reset_single_env():
  env = envs.AutoReset(Countdown())
  state, obs = jax.jit(env.reset)(KEY)
  start = int(obs[0])
  step = jax.jit(env.step)
  for t in range(start):
    state, obs, reward, done, info = step(state, jnp.int32(1), jax.random.key(t + 1))
  # The step that ends the episode: done, final_obs is the terminal observation (0 left), and
  # the returned state and obs already belong to a fresh episode.
  assert done and not info["truncated"]
  assert float(info["final_obs"][0]) == 0.0
  assert 2 <= int(obs[0]) <= 4 and int(state[1]) == 0


def test_auto_reset_batch_resets_only_finished_envs():
  env = envs.wrap_for_training(Countdown(), num_envs=64)
  state, obs = jax.jit(env.reset)(KEY)
  starts = np.asarray(obs[:, 0])
  assert set(starts.tolist()) == {2.0, 3.0, 4.0}  # independent keys per env
  step = jax.jit(env.step)
  state, obs, reward, done, info = step(state, jnp.ones(64, jnp.int32), jax.random.key(1))
  state, obs, reward, done, info = step(state, jnp.ones(64, jnp.int32), jax.random.key(2))
  finished = starts == 2
  np.testing.assert_array_equal(done, finished)
  np.testing.assert_array_equal(info["final_obs"][:, 0], starts - 2)
  np.testing.assert_array_equal(obs[~finished, 0], starts[~finished] - 2)
  assert np.all(np.isin(obs[finished, 0], [2, 3, 4]))
  # Episode statistics: the finished episodes paid 1 per step for 2 steps.
  np.testing.assert_array_equal(info["episode_return"][finished], 2.0)
  np.testing.assert_array_equal(info["episode_length"][finished], 2)
  np.testing.assert_array_equal(state.episode_return[finished], 0.0)
  np.testing.assert_array_equal(state.episode_return[~finished], 2.0)


def test_truncation_reported_and_reset():
  env = envs.wrap_for_training(Countdown(limit=1), num_envs=4)
  state, _ = jax.jit(env.reset)(KEY)
  state, obs, _, done, info = jax.jit(env.step)(state, jnp.zeros(4, jnp.int32), KEY)
  assert np.all(done) and np.all(info["truncated"])
  assert np.all(np.isin(obs[:, 0], [2, 3, 4]))


def test_vmap_env_specs():
  env = envs.VmapEnv(envs.CartPole(), num_envs=8)
  assert env.observation_spec().shape == (8, 4)
  assert env.action_spec() == envs.DiscreteSpec(2, shape=(8,))
  state, obs = jax.jit(env.reset)(KEY)
  assert obs.shape == (8, 4) and len(np.unique(np.asarray(obs[:, 0]))) == 8
  envs.check_environment(env)
  envs.check_environment(envs.wrap_for_training(envs.CartPole(), num_envs=3))
  with pytest.raises(ValueError, match="num_envs"):
    envs.VmapEnv(envs.CartPole(), num_envs=0)


def test_checked_actions_under_jit_and_vmap():
  env = envs.CheckedActions(envs.VmapEnv(envs.CartPole(), num_envs=4))
  state, _ = jax.jit(env.reset)(KEY)
  step = jax.jit(env.step)
  jax.block_until_ready(step(state, jnp.array([0, 1, 1, 0], jnp.int32), KEY))
  with pytest.raises(Exception, match=r"action\(s\) \[2\] outside the action space \[0, 2\)"):
    jax.block_until_ready(step(state, jnp.array([0, 1, 2, 0], jnp.int32), KEY))
  with pytest.raises(ValueError, match="integer array of shape"):
    step(state, jnp.zeros(4, jnp.float32), KEY)
  with pytest.raises(ValueError, match="outside the action space"):
    env.step(state, jnp.array([0, 5, 0, 0], jnp.int32), KEY)  # eager: a plain ValueError


@dataclasses.dataclass(frozen=True)
class PythonIfEnv(Countdown):
  def step(self, state, action, key):
    if state[0] > 0:  # a Python branch on a traced value: not jittable
      return super().step(state, action, key)
    return super().step(state, action, key)


@dataclasses.dataclass(frozen=True)
class WrongObsEnv(Countdown):
  def reset(self, key):
    state, obs = super().reset(key)
    return state, jnp.concatenate([obs, obs])


@dataclasses.dataclass(frozen=True)
class NoTruncatedEnv(Countdown):
  def step(self, state, action, key):
    state, obs, reward, done, _ = super().step(state, action, key)
    return state, obs, reward, done, {}


@pytest.mark.parametrize("env, message", [
    (PythonIfEnv(), "not jittable"),
    (WrongObsEnv(), r"returns obs \(2,\) float32, but observation_spec\(\) says \(1,\)"),
    (NoTruncatedEnv(), "info\\['truncated'\\]"),
])
def test_check_environment_rejects_broken_envs(env, message):
  with pytest.raises(envs.InvalidEnvironmentError, match=message):
    envs.check_environment(env)


def test_make():
  assert isinstance(envs.make("CartPole-v1"), envs.CartPole)
  assert envs.make("KeyDoorMaze-v0", max_episode_steps=50).max_episode_steps == 50
  with pytest.raises(ValueError, match="Unknown environment 'Pong'"):
    envs.make("Pong")
