"""The gymnax adapter (skipped without gymnax): same trajectories as our CartPole, time limit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlagents import envs

gymnax = pytest.importorskip("gymnax")
KEY = jax.random.key(0)


def test_gymnax_cartpole_matches_builtin():
  adapted = envs.make("gymnax/CartPole-v1")
  assert adapted.observation_spec().shape == (4,)
  assert adapted.action_spec() == envs.DiscreteSpec(2)
  envs.check_environment(adapted)
  ours = envs.CartPole()
  # Both draw the initial state as uniform(key, (4,), -0.05, 0.05).
  gx_state, gx_obs = adapted.reset(KEY)
  state, obs = ours.reset(KEY)
  np.testing.assert_allclose(gx_obs, obs, rtol=1e-6)
  rng = np.random.default_rng(0)
  for _ in range(30):
    action = jnp.int32(rng.integers(2))
    gx_state, gx_obs, gx_reward, gx_done, gx_info = adapted.step(gx_state, action, KEY)
    state, obs, reward, done, info = ours.step(state, action, KEY)
    np.testing.assert_allclose(gx_obs, obs, rtol=1e-5, atol=1e-6)
    assert float(gx_reward) == float(reward) and bool(gx_done) == bool(done)
    assert bool(gx_info["truncated"]) == bool(info["truncated"])
    if done:
      break


def test_gymnax_time_limit_is_a_truncation():
  adapted = envs.make("gymnax/CartPole-v1")
  env = envs.wrap_for_training(adapted, num_envs=2)
  state, obs = env.reset(KEY)

  def body(carry, _):
    state, obs = carry
    x, x_dot, theta, theta_dot = (obs[:, i] for i in range(4))
    action = (3 * theta + theta_dot + 0.1 * x + 0.3 * x_dot > 0).astype(jnp.int32)
    state, obs, _, done, info = env.step(state, action, KEY)
    return (state, obs), (done, info["truncated"])

  _, (done, truncated) = jax.jit(lambda c: jax.lax.scan(body, c, None, 500))((state, obs))
  assert not done[:499].any() and done[499].all() and truncated[499].all()


def test_ppo_traces_with_a_gymnax_env():
  from rlagents.learners import ppo  # pylint: disable=g-import-not-at-top
  learner = ppo.make_learner(ppo.PPOConfig(env_name="gymnax/Acrobot-v1"))
  state = jax.eval_shape(learner.init, KEY)  # specs are read outside the trace
  assert state.obs.shape == (4, 6)
  _, metrics = jax.eval_shape(learner.update, state)
  assert metrics["episode_return"].shape == ()
