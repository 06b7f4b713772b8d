"""CartPole: hand-worked steps, agreement with gymnasium CartPole-v1, time limit, bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlagents import envs

ENV = envs.CartPole()
STEP = jax.jit(ENV.step)
KEY = jax.random.key(0)


def _state(x, x_dot, theta, theta_dot, time=0):
  return envs.CartPoleState(*(jnp.float32(v) for v in (x, x_dot, theta, theta_dot)),
                            jnp.int32(time))


def test_two_hand_worked_steps():
  # From rest, push right (action 1). total_mass = 1.1, polemass_length = 0.1 * 0.5 = 0.05.
  # sin(0) = 0, cos(0) = 1: temp = 10 / 1.1 = 9.0909;
  # theta_acc = (0 - 9.0909) / (0.5 * (4/3 - 0.1 / 1.1)) = -9.0909 / 0.62121 = -14.634146;
  # x_acc = 9.0909 - 0.05 * (-14.634146) / 1.1 = 9.7560976.
  # Euler (positions use the old velocities): x = 0, x_dot = 0.02 * 9.7561 = 0.19512195,
  # theta = 0, theta_dot = 0.02 * -14.634146 = -0.29268293.
  state, obs, reward, done, info = STEP(_state(0, 0, 0, 0), jnp.int32(1), KEY)
  np.testing.assert_allclose(obs, [0.0, 0.19512195, 0.0, -0.29268293], rtol=1e-6, atol=1e-7)
  assert float(reward) == 1.0 and not done and not info["truncated"]
  assert int(state.time) == 1
  # Push left (action 0): theta is still 0, so the accelerations flip sign exactly and cancel the
  # velocities: x = 0.02 * 0.19512195 = 0.00390244, x_dot = 0, theta = 0.02 * -0.29268293 =
  # -0.00585366, theta_dot = 0.
  state, obs, reward, done, _ = STEP(state, jnp.int32(0), KEY)
  np.testing.assert_allclose(obs, [0.00390244, 0.0, -0.00585366, 0.0], rtol=1e-5, atol=1e-7)
  assert int(state.time) == 2


def test_termination_on_angle_and_position():
  # theta just inside 12 degrees (0.20944 rad) but moving out: after one step it is past it.
  _, _, reward, done, info = STEP(_state(0, 0, 0.2094, 1.0), jnp.int32(1), KEY)
  assert done and not info["truncated"] and float(reward) == 1.0  # the last step still pays 1
  _, _, _, done, _ = STEP(_state(2.399, 1.0, 0, 0), jnp.int32(1), KEY)
  assert done
  _, _, _, done, _ = STEP(_state(-2.3, -1.0, 0, 0), jnp.int32(1), KEY)
  assert not done


def test_reset_distribution_and_spec():
  states, obs = jax.vmap(ENV.reset)(jax.random.split(KEY, 256))
  assert obs.shape == (256, 4) and obs.dtype == jnp.float32
  assert np.all(np.abs(obs) <= 0.05) and np.abs(obs).max() > 0.04
  assert np.all(states.time == 0)
  spec = ENV.observation_spec()
  assert spec.shape == (4,) and spec.dtype == jnp.float32
  np.testing.assert_allclose(spec.high, [4.8, np.inf, 0.41887903, np.inf], rtol=1e-6)
  assert ENV.action_spec() == envs.DiscreteSpec(2)
  envs.check_environment(ENV)


def _balance(obs):
  """A linear controller that keeps the pole up for the whole 500 steps."""
  x, x_dot, theta, theta_dot = obs[..., 0], obs[..., 1], obs[..., 2], obs[..., 3]
  return (3 * theta + theta_dot + 0.1 * x + 0.3 * x_dot > 0).astype(jnp.int32)


def test_truncated_after_500_steps_under_scan():
  state, obs = ENV.reset(KEY)

  def body(carry, _):
    state, obs = carry
    state, obs, reward, done, info = ENV.step(state, _balance(obs), KEY)
    return (state, obs), (reward, done, info["truncated"])

  _, (rewards, dones, truncated) = jax.jit(
      lambda c: jax.lax.scan(body, c, None, 500))((state, obs))
  assert not dones[:499].any() and dones[499] and truncated[499]
  assert float(rewards.sum()) == 500.0


def test_matches_gymnasium_cartpole_v1():
  gym = pytest.importorskip("gymnasium")
  gym_env = gym.make("CartPole-v1")
  gym_env.reset(seed=0)
  rng = np.random.default_rng(0)
  state, obs = ENV.reset(KEY)
  # Step both from the same state (float32 here, float64 there), so differences cannot grow.
  for t in range(300):
    action = int(rng.integers(2)) if t % 3 else int(_balance(obs))
    gym_env.unwrapped.state = np.asarray(obs, np.float64)
    gym_obs, gym_reward, gym_terminated, gym_truncated, _ = gym_env.step(action)
    state, obs, reward, done, info = STEP(state, jnp.int32(action), KEY)
    np.testing.assert_allclose(obs, gym_obs, rtol=1e-5, atol=1e-6)
    assert float(reward) == gym_reward
    assert bool(done) == (gym_terminated or gym_truncated)
    if done:
      gym_env.reset(seed=t)
      state, obs = ENV.reset(jax.random.key(t))
  # The time limit: gymnasium's TimeLimit(500) truncates at the 500th step, as here.
  gym_env.reset(seed=1)
  state, obs = ENV.reset(KEY)
  for _ in range(500):
    gym_env.unwrapped.state = np.asarray(obs, np.float64)
    action = int(_balance(obs))
    _, _, gym_terminated, gym_truncated, _ = gym_env.step(action)
    state, obs, _, done, info = STEP(state, jnp.int32(action), KEY)
    assert not gym_terminated
    assert bool(info["truncated"]) == bool(done) == gym_truncated
  assert gym_truncated


@pytest.mark.parametrize("action, message", [
    (jnp.int32(2), "outside the action space"),
    (jnp.int32(-1), "outside the action space"),
    (jnp.float32(1.0), "must be an integer"),
    (jnp.array([0, 1], jnp.int32), "must have shape"),
])
def test_bad_action_eager(action, message):
  state, _ = ENV.reset(KEY)
  with pytest.raises(ValueError, match=message):
    ENV.step(state, action, KEY)


def test_bad_action_shape_under_jit():
  state, _ = ENV.reset(KEY)
  with pytest.raises(ValueError, match="must be an integer"):
    jax.jit(ENV.step)(state, jnp.float32(1.0), KEY)
