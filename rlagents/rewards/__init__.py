"""Rewards: the verifiable gate, shaping terms and their weighted composition."""

from rlagents.rewards._composition import compose_reward
from rlagents.rewards._composition import reward_terms
from rlagents.rewards._composition import RewardConfig
from rlagents.rewards._composition import TERMS

__all__ = ["RewardConfig", "TERMS", "compose_reward", "reward_terms"]
