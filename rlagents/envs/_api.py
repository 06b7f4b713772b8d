"""The functional environment API: `reset(key)`, `step(state, action, key)`, specs, checks.

An environment is an immutable object holding static parameters (Python numbers, layouts) and two
pure functions. Everything that changes lives in the state pytree, so `reset` and `step` jit,
vmap and run inside `lax.scan`:

    state, obs = env.reset(key)
    state, obs, reward, done, info = env.step(state, action, key)

`done` is True when the episode is over, whether it terminated (the next state is terminal) or was
truncated by a time limit; `info["truncated"]` tells them apart (True only for a cut that is not a
termination, so a bootstrapping learner can use `V(s_{t+1})` there). Environments may add keys
to `info`; `"success"` (bool, read where `done`) is logged by the learners when present.
"""

import abc
import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

State = Any
Info = dict[str, jax.Array]


class InvalidEnvironmentError(ValueError):
  """An environment breaks the API: not jittable, or its outputs do not match its specs."""


@dataclasses.dataclass(frozen=True)
class DiscreteSpec:
  """Integer values in `[0, num_values)`, of `shape` (`()` for one action, `(B,)` for a batch).

  Attributes:
    num_values: how many distinct values (actions); >= 1.
    shape: the shape of one value, `()` for a single action or `(B,)` for a batch.
    dtype: the values' dtype.
  """
  num_values: int
  shape: tuple[int, ...] = ()
  dtype: Any = jnp.int32

  def __post_init__(self):
    if self.num_values < 1:
      raise ValueError(f"DiscreteSpec.num_values must be >= 1, got {self.num_values}")

  def contains(self, x: jax.Array) -> jax.Array:
    """Bool array, elementwise: `x` is a value of this spec (shape and dtype not checked).

    Args:
      x: integer array of any shape.
    """
    return (x >= 0) & (x < self.num_values)

  def batched(self, batch_size: int) -> "DiscreteSpec":
    """The spec of `batch_size` stacked values: shape `(batch_size, *shape)`.

    Args:
      batch_size: the new leading axis.
    """
    return dataclasses.replace(self, shape=(batch_size, *self.shape))


@dataclasses.dataclass(frozen=True)
class BoxSpec:
  """Real arrays of `shape` with elementwise bounds `low` and `high` (may be infinite).

  Attributes:
    shape: the shape of one observation, e.g. `(4,)`.
    low: lower bound, a scalar or an array broadcastable to `shape`.
    high: upper bound, likewise.
    dtype: the arrays' dtype.
  """
  shape: tuple[int, ...]
  low: Any = -np.inf
  high: Any = np.inf
  dtype: Any = jnp.float32

  def contains(self, x: jax.Array) -> jax.Array:
    """Bool scalar: every element of `x` lies within the bounds.

    Args:
      x: array broadcastable against the bounds.
    """
    return jnp.all((x >= jnp.asarray(self.low)) & (x <= jnp.asarray(self.high)))

  def batched(self, batch_size: int) -> "BoxSpec":
    """The spec of `batch_size` stacked arrays: shape `(batch_size, *shape)`.

    Args:
      batch_size: the new leading axis.
    """
    return dataclasses.replace(self, shape=(batch_size, *self.shape))


class Environment(abc.ABC):
  """A pure functional environment. Subclasses are frozen dataclasses of static parameters."""

  @abc.abstractmethod
  def reset(self, key: jax.Array) -> tuple[State, jax.Array]:
    """Samples an initial state; returns `(state, obs)`.

    Args:
      key: a JAX PRNG key.

    Returns:
      `(state, obs)`: the environment's state (a pytree) and the first observation, of
      `observation_spec().shape`.
    """

  @abc.abstractmethod
  def step(self, state: State, action: jax.Array,
           key: jax.Array) -> tuple[State, jax.Array, jax.Array, jax.Array, Info]:
    """One transition; returns `(state, obs, reward, done, info)`, with `info["truncated"]`.

    Args:
      state: the state `reset` or the previous `step` returned.
      action: an action of `action_spec()` (shape `()` for one env, `[B]` for a batch).
      key: a JAX PRNG key for the transition's randomness (unused by deterministic envs).

    Returns:
      `(state, obs, reward, done, info)`: obs of `observation_spec().shape`, float32 reward and
      bool done of the action's shape, and a dict with at least `"truncated"` (bool, the episode
      hit its time limit rather than a terminal state).
    """

  @abc.abstractmethod
  def observation_spec(self) -> BoxSpec:
    """Shape, dtype and bounds of `obs`."""

  @abc.abstractmethod
  def action_spec(self) -> DiscreteSpec:
    """The actions `step` accepts."""


def _is_concrete(x) -> bool:
  return not isinstance(x, jax.core.Tracer)


def check_action(spec: DiscreteSpec, action, env_name: str) -> jax.Array:
  """Validates an action at the API boundary; returns it as an array of the spec's dtype.

  Shape and dtype are checked while tracing, so a wrong one fails under `jit` too. The value is
  checked when it is concrete (eager calls); under `jit` or `vmap` use `CheckedActions`, which
  checks at run time.

  Args:
    spec: the environment's action spec.
    action: the action, of `spec.shape`, integer (or bool) dtype.
    env_name: names the environment in the error message.

  Returns:
    The action as an array of `spec.dtype`.

  Raises:
    ValueError: naming the wrong shape, dtype or out-of-range value.
  """
  action = jnp.asarray(action)
  if action.shape != spec.shape:
    raise ValueError(f"{env_name}: action must have shape {spec.shape}, got {action.shape}.")
  if not (jnp.issubdtype(action.dtype, jnp.integer) or action.dtype == jnp.bool_):
    raise ValueError(f"{env_name}: action must be an integer in [0, {spec.num_values}), got "
                     f"dtype {action.dtype}.")
  if _is_concrete(action) and not bool(np.all(spec.contains(np.asarray(action)))):
    raise ValueError(f"{env_name}: action {np.asarray(action).tolist()} is outside the action "
                     f"space [0, {spec.num_values}).")
  return action.astype(spec.dtype)


def check_environment(env: Environment) -> None:
  """Traces `reset` and `step` once (no compute) and checks them against the API and the specs.

  Args:
    env: the environment to check.

  Raises:
    InvalidEnvironmentError: a function is not jittable (it converts a traced value to Python),
      or an output's shape or dtype does not match the spec, or `info` lacks "truncated".
  """
  name = type(env).__name__
  key = jax.random.key(0)
  action_spec = env.action_spec()
  action = jnp.zeros(action_spec.shape, action_spec.dtype)
  try:
    state, obs = jax.eval_shape(env.reset, key)
    _, next_obs, reward, done, info = jax.eval_shape(env.step, state, action, key)
  except jax.errors.JAXTypeError as e:
    first_line = str(e).strip().splitlines()[0]
    raise InvalidEnvironmentError(
        f"{name}.reset/step is not jittable: it turns a traced value into a Python value "
        f"(`if`, `int()`, `float()`, numpy on a traced array). Use jnp.where / lax.cond. "
        f"({type(e).__name__}: {first_line})") from e
  obs_spec = env.observation_spec()
  for label, value in (("reset", obs), ("step", next_obs)):
    if value.shape != obs_spec.shape or value.dtype != jnp.dtype(obs_spec.dtype):
      raise InvalidEnvironmentError(
          f"{name}.{label} returns obs {value.shape} {value.dtype}, but observation_spec() says "
          f"{obs_spec.shape} {jnp.dtype(obs_spec.dtype)}.")
  batch_shape = action_spec.shape
  if reward.shape != batch_shape or not jnp.issubdtype(reward.dtype, jnp.floating):
    raise InvalidEnvironmentError(
        f"{name}.step must return a float reward of shape {batch_shape}, got {reward.shape} "
        f"{reward.dtype}.")
  if done.shape != batch_shape or done.dtype != jnp.bool_:
    raise InvalidEnvironmentError(
        f"{name}.step must return a bool `done` of shape {batch_shape}, got {done.shape} "
        f"{done.dtype}.")
  if "truncated" not in info:
    raise InvalidEnvironmentError(f"{name}.step must return info['truncated'] (bool).")
