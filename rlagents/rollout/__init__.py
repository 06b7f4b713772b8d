"""Rollouts: multi-turn text episodes with tools.

`sample_episodes` is a host loop around jitted sampling (tools run on the host);
`make_jit_rollout` runs whole episodes of a JAX-native text environment in one compiled program,
and `decode_jit_episodes` replays them on the host as `Episode` records for audit and guards.
The episode types, markers and encoding they share live in `rlagents.episodes`.
"""

from rlagents.rollout._decode import decode_jit_episodes
from rlagents.rollout._decode import DecodedEpisodes
from rlagents.rollout._jit import make_jit_rollout
from rlagents.rollout._text import LatestParams
from rlagents.rollout._text import make_sampler
from rlagents.rollout._text import RolloutConfig
from rlagents.rollout._text import sample_episodes

__all__ = [
    "DecodedEpisodes",
    "LatestParams",
    "RolloutConfig",
    "decode_jit_episodes",
    "make_jit_rollout",
    "make_sampler",
    "sample_episodes",
]
