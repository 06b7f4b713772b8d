"""Rewards: the verifiable gate, shaping terms, learned (soft) terms, composition, hacking detectors."""

from rlagents.rewards._bugfix import BUGFIX_TERMS
from rlagents.rewards._bugfix import BugFixRewardConfig
from rlagents.rewards._bugfix import bugfix_reward_terms
from rlagents.rewards._bugfix import compose_bugfix_reward
from rlagents.rewards._bugfix import detect_special_casing
from rlagents.rewards._composition import compose_reward
from rlagents.rewards._composition import reward_terms
from rlagents.rewards._composition import RewardConfig
from rlagents.rewards._composition import TERMS
from rlagents.rewards._hacking import copied_passage
from rlagents.rewards._hacking import count_detections
from rlagents.rewards._hacking import detect_padding
from rlagents.rewards._hacking import detect_test_tampering
from rlagents.rewards._hacking import DETECTORS
from rlagents.rewards._hacking import diversity_penalty
from rlagents.rewards._hacking import ProxyDriftConfig
from rlagents.rewards._hacking import ProxyDriftMonitor
from rlagents.rewards._hacking import redundant_calls
from rlagents.rewards._learnability import LEARNABILITY_KINDS
from rlagents.rewards._learnability import learnability_reward
from rlagents.rewards._learned import add_learned_reward
from rlagents.rewards._learned import normalize_scores
from rlagents.rewards._learned import NORMALIZATIONS
from rlagents.rewards._learned import RunningMeanStd
from rlagents.rewards._learned import SoftRewardConfig
from rlagents.rewards._suites import CODEFIX_TERMS
from rlagents.rewards._suites import codefix_reward_terms
from rlagents.rewards._suites import compose_codefix_reward
from rlagents.rewards._suites import compose_retrieval_reward
from rlagents.rewards._suites import RETRIEVAL_TERMS
from rlagents.rewards._suites import retrieval_reward_terms
from rlagents.rewards._suites import SuiteRewardConfig

__all__ = [
    "BUGFIX_TERMS",
    "BugFixRewardConfig",
    "bugfix_reward_terms",
    "compose_bugfix_reward",
    "detect_special_casing",
    "CODEFIX_TERMS",
    "DETECTORS",
    "LEARNABILITY_KINDS",
    "NORMALIZATIONS",
    "ProxyDriftConfig",
    "ProxyDriftMonitor",
    "RETRIEVAL_TERMS",
    "RewardConfig",
    "RunningMeanStd",
    "SoftRewardConfig",
    "SuiteRewardConfig",
    "TERMS",
    "add_learned_reward",
    "learnability_reward",
    "codefix_reward_terms",
    "compose_codefix_reward",
    "compose_reward",
    "compose_retrieval_reward",
    "copied_passage",
    "count_detections",
    "detect_padding",
    "detect_test_tampering",
    "diversity_penalty",
    "normalize_scores",
    "redundant_calls",
    "retrieval_reward_terms",
    "reward_terms",
]
