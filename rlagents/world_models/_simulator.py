"""A trained world model as an `rlagents.envs.Environment`: a learned simulator.

    sim = WorldModelEnv(model, params, start_obs=real_first_observations, max_episode_steps=500)
    envs.check_environment(sim)
    ppo.make_train(ppo.PPOConfig(...), env=sim)     # PPO trains inside the model

`reset` starts from one of the given real first observations (read into the posterior); `step`
rolls the prior one step and returns the decoded observation, the predicted reward, and `done`
where the episode ends: drawn with the continue head's probability (or, with a
`continue_threshold`, where that probability falls below it), or at the time limit. Drawing
matters: a head that never puts an end above 50% (ends are rare in the data) would, thresholded,
give a simulator in which no action ever ends an episode. Observations are decoded into the real environment's space, so a policy
trained here acts in the real environment unchanged. Evaluation always uses the real one.
"""

import dataclasses
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

from rlagents import envs
from rlagents.world_models import _rssm


@flax.struct.dataclass
class WorldModelEnvState:
  """The simulator's state.

  Attributes:
    model_state: the RSSM state.
    time: int32 scalar, steps in this episode.
  """
  model_state: _rssm.RSSMState
  time: jax.Array


@dataclasses.dataclass(frozen=True, eq=False)
class WorldModelEnv(envs.Environment):
  """The environment a `WorldModel` with `params` imagines.

  Attributes:
    model: the world model.
    params: its trained parameters.
    start_obs: `[N, D]` real first observations; `reset` draws one uniformly.
    max_episode_steps: time limit (truncation), as the real environment's.
    continue_threshold: None draws each step's termination with probability 1 - the
      predicted continue probability; a number terminates where that probability is below it.
  """
  model: _rssm.WorldModel
  params: Any
  start_obs: jax.Array
  max_episode_steps: int = 500
  continue_threshold: float | None = None

  def __post_init__(self):
    start_obs = jnp.asarray(self.start_obs, jnp.float32)
    if start_obs.ndim != 2 or start_obs.shape[0] < 1 or start_obs.shape[1] != self.model.obs_size:
      raise ValueError(f"WorldModelEnv.start_obs must be [N >= 1, {self.model.obs_size}] real "
                       f"first observations, got shape {start_obs.shape}")
    object.__setattr__(self, "start_obs", start_obs)
    if self.max_episode_steps < 1:
      raise ValueError(f"WorldModelEnv.max_episode_steps must be >= 1, got "
                       f"{self.max_episode_steps}")
    if self.continue_threshold is not None and not 0 < self.continue_threshold < 1:
      raise ValueError(f"WorldModelEnv.continue_threshold must be in (0, 1), got "
                       f"{self.continue_threshold}")

  def observation_spec(self) -> envs.BoxSpec:
    return envs.BoxSpec(shape=(self.model.obs_size,))

  def action_spec(self) -> envs.DiscreteSpec:
    return envs.DiscreteSpec(self.model.num_actions)

  def reset(self, key):
    choice_key, noise_key = jax.random.split(key)
    obs = self.start_obs[jax.random.randint(choice_key, (), 0, self.start_obs.shape[0])]
    noise = self.model.latent_noise(noise_key, (), 1)[0]
    state = self.model.start(self.params, obs, noise)
    return WorldModelEnvState(state, jnp.int32(0)), obs

  def step(self, state, action, key):
    action = envs.check_action(self.action_spec(), action, "WorldModelEnv")
    noise_key, end_key = jax.random.split(key)
    noise = self.model.latent_noise(noise_key, (), 1)[0]
    model_state = self.model.imagine_step(self.params, state.model_state, action, noise)
    obs, reward, cont = self.model.predict(self.params, model_state)
    time = state.time + 1
    if self.continue_threshold is None:
      terminated = jax.random.uniform(end_key) >= cont
    else:
      terminated = cont < self.continue_threshold
    truncated = (time >= self.max_episode_steps) & ~terminated
    return (WorldModelEnvState(model_state, time), obs.astype(jnp.float32),
            reward.astype(jnp.float32), terminated | truncated, {"truncated": truncated})
