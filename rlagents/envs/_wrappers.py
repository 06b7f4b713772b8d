"""Wrappers: auto-reset, episode statistics, vmapped batches, run-time action checks.

A usual stack for training is `EpisodeStatistics(AutoReset(VmapEnv(env, num_envs)))`
(`wrap_for_training`). Wrappers are frozen dataclasses too, so a stack is one static object.
"""

import dataclasses

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from rlagents.envs import _api


@dataclasses.dataclass(frozen=True)
class Wrapper(_api.Environment):
  """Passes everything to `env`; subclasses override what they change.

  Args:
    env: the wrapped environment (any `Environment`, wrappers included).
  """
  env: _api.Environment

  def reset(self, key):
    return self.env.reset(key)

  def step(self, state, action, key):
    return self.env.step(state, action, key)

  def observation_spec(self):
    return self.env.observation_spec()

  def action_spec(self):
    return self.env.action_spec()


def _where(done: jax.Array, fresh: jax.Array, old: jax.Array) -> jax.Array:
  """`jnp.where` with `done` `[B]` (or `[]`) broadcast over the trailing axes of `[B, ...]`."""
  return jnp.where(done.reshape(done.shape + (1,) * (old.ndim - done.ndim)), fresh, old)


@dataclasses.dataclass(frozen=True)
class AutoReset(Wrapper):
  """Starts a new episode in the step that ends one; works on one env or a batch (`VmapEnv`).

  Where `done`, the returned state and obs are those of a fresh `reset`; the observation where the
  episode ended goes to `info["final_obs"]` (a learner bootstraps a truncated episode from it).
  Reward, done and the rest of `info` belong to the step that was taken.

  The reset runs under `lax.cond`, only in steps where some episode ended, and the step and reset
  keys are folded from `key` where they are used; so a deterministic env with no episode ending
  draws no random numbers in that step (on CPU each draw is a small loop). Under `vmap` the cond
  becomes a select and both branches run.

  Args:
    env: the environment, one or a batch (`VmapEnv`); `done` is `[]` or `[B]`.
  """

  def step(self, state, action, key):
    state, obs, reward, done, info = self.env.step(state, action, jax.random.fold_in(key, 0))
    info = {**info, "final_obs": obs}

    def reset(state, obs):
      reset_state, reset_obs = self.env.reset(jax.random.fold_in(key, 1))
      return (jax.tree.map(lambda fresh, old: _where(done, fresh, old), reset_state, state),
              _where(done, reset_obs, obs))

    state, obs = lax.cond(jnp.any(done), reset, lambda state, obs: (state, obs), state, obs)
    return state, obs, reward, done, info


@flax.struct.dataclass
class EpisodeStatisticsState:
  """The state of `EpisodeStatistics`.

  Attributes:
    env_state: the wrapped environment's state.
    episode_return: `[]` or `[B]` float32, the current episodes' returns so far.
    episode_length: `[]` or `[B]` int32, their steps so far.
  """
  env_state: _api.State
  episode_return: jax.Array
  episode_length: jax.Array


@dataclasses.dataclass(frozen=True)
class EpisodeStatistics(Wrapper):
  """Adds `info["episode_return"]` and `info["episode_length"]`: the running totals of the current
  episode including this step, so where `done` they are the finished episode's. Wrap it around
  `AutoReset` (it restarts the totals where `done`); works on one env or a batch.

  Args:
    env: the environment, usually `AutoReset(VmapEnv(...))`.
  """

  def reset(self, key):
    state, obs = self.env.reset(key)
    batch_shape = self.env.action_spec().shape
    return EpisodeStatisticsState(state, jnp.zeros(batch_shape, jnp.float32),
                                  jnp.zeros(batch_shape, jnp.int32)), obs

  def step(self, state, action, key):
    env_state, obs, reward, done, info = self.env.step(state.env_state, action, key)
    episode_return = state.episode_return + reward
    episode_length = state.episode_length + 1
    info = {**info, "episode_return": episode_return, "episode_length": episode_length}
    state = EpisodeStatisticsState(env_state, jnp.where(done, 0.0, episode_return),
                                   jnp.where(done, 0, episode_length))
    return state, obs, reward, done, info


@dataclasses.dataclass(frozen=True)
class VmapEnv(Wrapper):
  """`num_envs` independent copies stepped together; one key in, split inside (if used).

  Observations, rewards, dones and actions gain a leading `[num_envs]` axis, and so do the specs.

  Args:
    env: one environment.
    num_envs: how many copies, >= 1.
  """
  num_envs: int = 1

  def __post_init__(self):
    if self.num_envs < 1:
      raise ValueError(f"VmapEnv.num_envs must be >= 1, got {self.num_envs}")

  def reset(self, key):
    return jax.vmap(self.env.reset)(jax.random.split(key, self.num_envs))

  def step(self, state, action, key):
    keys = jax.random.split(key, self.num_envs)
    return jax.vmap(self.env.step)(state, action, keys)

  def observation_spec(self):
    return self.env.observation_spec().batched(self.num_envs)

  def action_spec(self):
    return self.env.action_spec().batched(self.num_envs)


def _raise_if_invalid(action, valid, env_name, num_values):
  """Host callback (not jittable itself): raises on the first invalid action."""
  valid = np.asarray(valid)
  if not valid.all():
    bad = np.asarray(action)[~valid].ravel()[:8].tolist()
    raise ValueError(f"{env_name}: action(s) {bad} outside the action space [0, {num_values}).")


@dataclasses.dataclass(frozen=True)
class CheckedActions(Wrapper):
  """Checks every action against `action_spec()`, also under `jit` and `vmap` (for debugging).

  Shape and dtype are checked while tracing. Values are checked in a host callback at run time;
  an invalid one raises a ValueError naming it (under `jit` it arrives wrapped in a
  `JaxRuntimeError` whose message contains it). The callback costs time: leave it out of
  training runs.

  Args:
    env: the environment whose actions are checked.
  """

  def step(self, state, action, key):
    spec = self.env.action_spec()
    name = type(self.env).__name__
    action = jnp.asarray(action)
    if action.shape != spec.shape or not jnp.issubdtype(action.dtype, jnp.integer):
      raise ValueError(f"{name}: action must be an integer array of shape {spec.shape}, got "
                       f"{action.dtype} {action.shape}.")
    valid = spec.contains(action)
    if isinstance(valid, jax.core.Tracer):
      jax.debug.callback(_raise_if_invalid, action, valid, name, spec.num_values)
    else:
      _raise_if_invalid(action, valid, name, spec.num_values)
    return self.env.step(state, action, key)


def wrap_for_training(env: _api.Environment, num_envs: int) -> EpisodeStatistics:
  """The stack a learner uses: `EpisodeStatistics(AutoReset(VmapEnv(env, num_envs)))`.

  Args:
    env: one environment.
    num_envs: parallel copies; observations become `[num_envs, ...]`, actions `[num_envs]`.
  """
  return EpisodeStatistics(AutoReset(VmapEnv(env, num_envs=num_envs)))
