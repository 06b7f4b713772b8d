"""An adapter that runs a gymnax environment behind this package's API (needs `gymnax`).

gymnax (Lange 2022, https://github.com/RobertTLange/gymnax) environments take `params` in every
call and auto-reset inside `step`. The adapter binds the params, calls the reset-free
`step_env` (our `AutoReset` wrapper does the resetting, so `final_obs` is available), and reports
time-limit cuts as `info["truncated"]`.
"""

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rlagents.envs import _api


def _bind_spaces(adapter, name: str, *, observation_dtype=None, flat: bool = False) -> None:
  """Sets `adapter.params` (default: its env's) and its action and observation specs from a
  gymnax-style env's spaces (gymnax, craftax), read once outside any trace.

  Args:
    adapter: a frozen dataclass with `env` and `params` fields.
    name: the adapter's name, for errors.
    observation_dtype: the observations' dtype after the adapter's cast (default: the space's).
    flat: only 1-D observations are supported.

  Raises:
    ValueError: a non-discrete action space, or (with `flat`) a non-flat observation space.
  """
  if adapter.params is None:
    object.__setattr__(adapter, "params", adapter.env.default_params)
  with jax.ensure_compile_time_eval():
    actions = adapter.env.action_space(adapter.params)
    observations = adapter.env.observation_space(adapter.params)
    if not hasattr(actions, "n"):
      raise ValueError(f"{name} supports discrete action spaces only, got {actions!r}")
    if flat and len(observations.shape) != 1:
      raise ValueError(f"{name} supports flat observations; this one has shape "
                       f"{observations.shape}")
    object.__setattr__(adapter, "_action_spec", _api.DiscreteSpec(int(actions.n)))
    object.__setattr__(adapter, "_observation_spec", _api.BoxSpec(
        shape=tuple(observations.shape), low=np.asarray(observations.low),
        high=np.asarray(observations.high),
        dtype=jnp.dtype(observation_dtype or observations.dtype)))


@dataclasses.dataclass(frozen=True, eq=False)
class GymnaxEnv(_api.Environment):
  """Wraps `env` (a gymnax `Environment`) and its `params` (default params when None).

  Only discrete action spaces and array observations are supported. With gymnax >= 1.0 a step is
  truncated where `env.is_truncated` says so; with older gymnax, whose `step_env` folds the time
  limit into `done`, a step that ends at the time limit counts as truncated.

  Args:
    env: a gymnax environment with a discrete action space and array observations.
    params: its `EnvParams`; None uses `env.default_params`.
  """
  env: Any
  params: Any = None

  def __post_init__(self):
    _bind_spaces(self, "GymnaxEnv")

  @classmethod
  def from_name(cls, name: str, **kwargs) -> "GymnaxEnv":
    import gymnax  # pylint: disable=g-import-not-at-top
    env, params = gymnax.make(name, **kwargs)
    return cls(env, params)

  def observation_spec(self) -> _api.BoxSpec:
    return self._observation_spec

  def action_spec(self) -> _api.DiscreteSpec:
    return self._action_spec

  def reset(self, key):
    obs, state = self.env.reset_env(key, self.params)
    return state, obs

  def step(self, state, action, key):
    obs, state, reward, done, info = self.env.step_env(key, state, action, self.params)
    if hasattr(self.env, "is_truncated"):
      truncated = self.env.is_truncated(state, self.params) & ~done
    else:
      truncated = done & (state.time >= self.params.max_steps_in_episode)
    info = {k: v for k, v in info.items() if k not in ("truncated", "terminated")}
    return (state, obs, jnp.asarray(reward, jnp.float32), jnp.asarray(done | truncated, bool),
            {**info, "truncated": jnp.asarray(truncated, bool)})
