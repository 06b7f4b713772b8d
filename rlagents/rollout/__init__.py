"""Rollouts: multi-turn text episodes with tools.

`sample_episodes` is a host loop around jitted sampling (tools run on the host);
`make_jit_rollout` runs whole episodes of a JAX-native text environment in one compiled program.
"""

from rlagents.rollout._episode import Action
from rlagents.rollout._episode import advance
from rlagents.rollout._episode import end_unanswered
from rlagents.rollout._episode import Episode
from rlagents.rollout._jit import make_jit_rollout
from rlagents.rollout._text import episode_tokens
from rlagents.rollout._text import make_sampler
from rlagents.rollout._text import RolloutBatch
from rlagents.rollout._text import RolloutConfig
from rlagents.rollout._text import sample_episodes
from rlagents.rollout._text import stack_episodes

__all__ = [
    "Action",
    "Episode",
    "RolloutBatch",
    "RolloutConfig",
    "advance",
    "end_unanswered",
    "episode_tokens",
    "make_jit_rollout",
    "make_sampler",
    "sample_episodes",
    "stack_episodes",
]
