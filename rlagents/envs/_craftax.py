"""Craftax-Classic (symbolic observations) behind this package's API (needs `craftax`).

Matthews et al. 2024, "Craftax: A Lightning-Fast Benchmark for Open-Ended Reinforcement
Learning", https://arxiv.org/abs/2402.16801: Crafter's 22 achievements re-implemented in JAX.
A reward of 1 comes with each achievement unlocked for the first time in an episode (and +-0.1
per health point gained or lost), so the largest return is 22 and scores are often reported as a
percentage of it. The symbolic observation is a flat float32 vector of 1345 values.

    env = envs.make("craftax/Craftax-Classic-Symbolic-v1")      # pip install rlagents[craftax]

The adapter binds craftax's `EnvParams`, calls its reset-free `step_env` (our `AutoReset` does
the resetting), and reports the 10,000-step time limit as `info["truncated"]`;
`info["achievements"]` counts the achievements unlocked so far in the episode.
"""

import dataclasses

import jax.numpy as jnp

from rlagents.envs import _api
from rlagents.envs import _gymnax

MAX_RETURN = 22.0  # one reward per achievement of Craftax-Classic


@dataclasses.dataclass(frozen=True, eq=False)
class CraftaxEnv(_gymnax.GymnaxEnv):
  """Wraps a craftax environment without auto-reset and its `params` (craftax follows gymnax's
  API; its specs come from the gymnax adapter, its reset and step are its own).

  Args:
    env: e.g. `craftax.craftax_env.make_craftax_env_from_name(name, auto_reset=False)`.
    params: its `EnvParams`; None uses `env.default_params`.
  """

  def __post_init__(self):
    _gymnax._bind_spaces(self, "CraftaxEnv (use a '-Symbolic-' environment)",
                observation_dtype=jnp.float32, flat=True)

  @classmethod
  def from_name(cls, name: str, **kwargs) -> "CraftaxEnv":
    """`CraftaxEnv` of craftax's environment `name` (e.g. 'Craftax-Classic-Symbolic-v1').

    Args:
      name: a craftax environment id.
      **kwargs: fields of its `EnvParams` to change (e.g. `max_timesteps=1000`).
    """
    try:
      from craftax import craftax_env  # pylint: disable=g-import-not-at-top
    except ImportError as e:
      raise ImportError("Craftax environments need the craftax package: pip install "
                        "'rlagents[craftax]' (or craftax>=1.6).") from e
    env = craftax_env.make_craftax_env_from_name(name, auto_reset=False)
    params = env.default_params.replace(**kwargs) if kwargs else env.default_params
    return cls(env, params)

  def reset(self, key):
    obs, state = self.env.reset_env(key, self.params)
    return state, obs.astype(jnp.float32)

  def step(self, state, action, key):
    action = _api.check_action(self.action_spec(), action, "CraftaxEnv")
    obs, state, reward, done, _ = self.env.step_env(key, state, action, self.params)
    done = jnp.asarray(done, bool)
    alive = state.player_health > 0
    truncated = done & (state.timestep >= self.params.max_timesteps) & alive
    info = {"truncated": truncated,
            "achievements": jnp.sum(state.achievements).astype(jnp.float32)}
    return state, obs.astype(jnp.float32), jnp.asarray(reward, jnp.float32), done, info
