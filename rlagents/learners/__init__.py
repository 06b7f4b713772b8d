"""Training procedures: one module each, with jitted pure update steps."""

from rlagents.learners._preference_data import encode_feedback
from rlagents.learners._preference_data import encode_pairs
from rlagents.learners._preference_data import Feedback
from rlagents.learners._preference_data import feedback_records
from rlagents.learners._preference_data import load_feedback
from rlagents.learners._preference_data import load_preferences
from rlagents.learners._preference_data import pair_records
from rlagents.learners._preference_data import PreferenceDataError
from rlagents.learners._preference_data import PreferencePair
from rlagents.learners._preference_data import verified_feedback
from rlagents.learners._preference_data import verified_preferences
from rlagents.learners._preference_data import write_jsonl
from rlagents.learners._state import create_train_state
from rlagents.learners._state import forward_logprobs
from rlagents.learners._state import make_optimizer
from rlagents.learners._state import OptimizerConfig
from rlagents.learners.alphazero import AlphaZeroConfig
from rlagents.learners.dpo import DPOConfig
from rlagents.learners.dpo import make_dpo_step
from rlagents.learners.dpo import make_kto_step
from rlagents.learners.grpo import GRPOConfig
from rlagents.learners.grpo import make_grpo_step
from rlagents.learners.grpo import MicrobatchedGRPOStep
from rlagents.learners.grpo_jit import make_jit_grpo_step
from rlagents.learners.league import EloTable
from rlagents.learners.ppo_agent import PPOAgentConfig
from rlagents.learners.ppo_agent import PPOAgentStep
from rlagents.learners.ppo_agent import policy_token_gae
from rlagents.learners.reward_model import make_reward_model_step
from rlagents.learners.reward_model import pairwise_accuracy
from rlagents.learners.reward_model import RewardModelConfig
from rlagents.learners.reward_model import train_reward_model
from rlagents.learners.sft import make_sft_step
from rlagents.learners.sft import SFTConfig

__all__ = [
    "AlphaZeroConfig",
    "DPOConfig",
    "EloTable",
    "Feedback",
    "GRPOConfig",
    "MicrobatchedGRPOStep",
    "OptimizerConfig",
    "PPOAgentConfig",
    "PPOAgentStep",
    "PreferenceDataError",
    "PreferencePair",
    "RewardModelConfig",
    "SFTConfig",
    "create_train_state",
    "forward_logprobs",
    "encode_feedback",
    "encode_pairs",
    "feedback_records",
    "load_feedback",
    "load_preferences",
    "make_dpo_step",
    "make_grpo_step",
    "make_jit_grpo_step",
    "make_kto_step",
    "make_optimizer",
    "make_reward_model_step",
    "make_sft_step",
    "pair_records",
    "pairwise_accuracy",
    "policy_token_gae",
    "train_reward_model",
    "verified_feedback",
    "verified_preferences",
    "write_jsonl",
]
