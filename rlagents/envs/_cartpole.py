"""CartPole with the dynamics of gymnasium's CartPole-v1, including its 500-step time limit.

Barto, Sutton & Anderson 1983, "Neuronlike adaptive elements that can solve difficult learning
control problems"; equations of motion from Florian 2007, "Correct equations for the dynamics of
the cart-pole system" (https://coneural.org/florian/papers/05_cart_pole.pdf). Explicit Euler with
tau = 0.02 s, as gymnasium's default. gymnasium integrates in float64 and returns float32
observations; this runs in float32, so trajectories agree to float32 rounding.
"""

import dataclasses
import math

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from rlagents.envs import _api


@flax.struct.dataclass
class CartPoleState:
  """The cart-pole's state (float32 scalars, as in gymnasium).

  Attributes:
    x: cart position.
    x_dot: cart velocity.
    theta: pole angle from vertical, radians.
    theta_dot: pole angular velocity.
    time: int32, steps taken in this episode.
  """
  x: jax.Array
  x_dot: jax.Array
  theta: jax.Array
  theta_dot: jax.Array
  time: jax.Array  # steps taken in this episode


@dataclasses.dataclass(frozen=True)
class CartPole(_api.Environment):
  """Balance a pole on a cart by pushing it left (action 0) or right (action 1).

  Observation `[x, x_dot, theta, theta_dot]` (float32). Reward 1 for every step, the terminating
  one included. The episode terminates when |x| > 2.4 or |theta| > 12 degrees, and is truncated
  after `max_episode_steps` steps. Reset draws all four state variables from U(-0.05, 0.05).

  Attributes:
    gravity: m/s^2.
    masscart: cart mass.
    masspole: pole mass.
    length: half the pole's length.
    force_mag: the push's force.
    tau: seconds per step (Euler integration).
    theta_threshold_radians: the episode terminates beyond this angle.
    x_threshold: and beyond this cart position.
    max_episode_steps: time limit; the step that reaches it is truncated.
  """
  gravity: float = 9.8
  masscart: float = 1.0
  masspole: float = 0.1
  length: float = 0.5  # half the pole's length
  force_mag: float = 10.0
  tau: float = 0.02
  theta_threshold_radians: float = 12 * 2 * math.pi / 360
  x_threshold: float = 2.4
  max_episode_steps: int = 500

  def observation_spec(self) -> _api.BoxSpec:
    high = np.array([2 * self.x_threshold, np.inf, 2 * self.theta_threshold_radians, np.inf],
                    np.float32)
    return _api.BoxSpec(shape=(4,), low=-high, high=high)

  def action_spec(self) -> _api.DiscreteSpec:
    return _api.DiscreteSpec(2)

  def reset(self, key):
    x, x_dot, theta, theta_dot = jax.random.uniform(key, (4,), minval=-0.05, maxval=0.05)
    state = CartPoleState(x, x_dot, theta, theta_dot, jnp.int32(0))
    return state, self._observe(state)

  def step(self, state, action, key):
    del key  # deterministic
    action = _api.check_action(self.action_spec(), action, "CartPole")
    total_mass = self.masspole + self.masscart
    polemass_length = self.masspole * self.length
    force = jnp.where(action == 1, self.force_mag, -self.force_mag)
    cos_theta = jnp.cos(state.theta)
    sin_theta = jnp.sin(state.theta)
    temp = (force + polemass_length * jnp.square(state.theta_dot) * sin_theta) / total_mass
    theta_acc = (self.gravity * sin_theta - cos_theta * temp) / (
        self.length * (4.0 / 3.0 - self.masspole * jnp.square(cos_theta) / total_mass))
    x_acc = temp - polemass_length * theta_acc * cos_theta / total_mass
    state = CartPoleState(
        x=state.x + self.tau * state.x_dot,
        x_dot=state.x_dot + self.tau * x_acc,
        theta=state.theta + self.tau * state.theta_dot,
        theta_dot=state.theta_dot + self.tau * theta_acc,
        time=state.time + 1,
    )
    terminated = ((jnp.abs(state.x) > self.x_threshold)
                  | (jnp.abs(state.theta) > self.theta_threshold_radians))
    truncated = (state.time >= self.max_episode_steps) & ~terminated
    reward = jnp.float32(1.0)
    return (state, self._observe(state), reward, terminated | truncated,
            {"truncated": truncated})

  def _observe(self, state):
    return jnp.stack([state.x, state.x_dot, state.theta, state.theta_dot])
