"""The Craftax adapter: the API checks pass and episodes run under jit (skipped without craftax)."""

import jax
import numpy as np
import pytest

from rlagents import envs

pytest.importorskip("craftax")


@pytest.fixture(scope="module")
def env():
  return envs.make("craftax/Craftax-Classic-Symbolic-v1", max_timesteps=20)


def test_passes_check_environment(env):
  envs.check_environment(env)
  assert env.observation_spec().shape == (1345,) and env.action_spec().num_values == 17


@pytest.mark.slow  # compiling craftax's step takes minutes on a loaded 2-core CPU
def test_episodes_run_and_the_time_limit_is_a_cut(env):
  stack = envs.wrap_for_training(env, 2)
  state, obs = stack.reset(jax.random.key(0))

  def step(carry, key):
    state, _ = carry
    action = jax.random.randint(key, (2,), 0, 17)
    state, obs, reward, done, info = stack.step(state, action, key)
    return (state, obs), (reward, done, info["truncated"], info["episode_length"])

  _, (reward, done, truncated, length) = jax.jit(
      lambda s, o: jax.lax.scan(step, (s, o), jax.random.split(jax.random.key(1), 25)))(state, obs)
  # The 20-step limit (set through EnvParams) ends every episode that lives that long, as a cut.
  cut = np.asarray(truncated)
  assert cut.any() and np.all(np.asarray(length)[cut] == 20)
  assert np.all(np.asarray(done)[cut])
  assert np.isfinite(np.asarray(reward)).all()


@pytest.mark.slow
def test_bad_observation_kind_is_refused():
  with pytest.raises(ValueError, match="symbolic"):
    envs.make("craftax/Craftax-Classic-Pixels-v1")


@pytest.mark.slow
def test_ppo_runs_on_it(env):
  from rlagents.learners import ppo  # pylint: disable=g-import-not-at-top
  learner = ppo.make_learner(ppo.PPOConfig(num_envs=2, num_steps=8, num_minibatches=1,
                                           total_timesteps=16, hidden_sizes=(16,)), env)
  _, metrics = jax.jit(learner.update)(learner.init(jax.random.key(0)))
  assert np.isfinite(float(metrics["loss"]))
