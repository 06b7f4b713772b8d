"""Training procedures: one module each, with jitted pure update steps."""

from rlagents.learners._state import create_train_state
from rlagents.learners._state import make_optimizer
from rlagents.learners._state import OptimizerConfig
from rlagents.learners.grpo import GRPOConfig
from rlagents.learners.grpo import make_grpo_step
from rlagents.learners.grpo import MicrobatchedGRPOStep
from rlagents.learners.grpo_jit import make_jit_grpo_step
from rlagents.learners.sft import make_sft_step
from rlagents.learners.sft import SFTConfig

__all__ = [
    "GRPOConfig",
    "MicrobatchedGRPOStep",
    "OptimizerConfig",
    "SFTConfig",
    "create_train_state",
    "make_grpo_step",
    "make_jit_grpo_step",
    "make_optimizer",
    "make_sft_step",
]
