"""The job's phases, registered by name: SFT, GRPO (host, jit, with imagined episodes, or
self-play on the policy's own proposals), PPO, DPO, KTO.

`register_phase` adds one (`config.algorithm` then names it as the phase after SFT); the job's
one loop (`pipeline.run_phase`) gives every phase the same cadence and guards. See `_base`.
"""

from rlagents.pipeline.phases import grpo
from rlagents.pipeline.phases import grpo_dyna
from rlagents.pipeline.phases import grpo_jit
from rlagents.pipeline.phases import offline
from rlagents.pipeline.phases import ppo
from rlagents.pipeline.phases import selfplay
from rlagents.pipeline.phases import sft
from rlagents.pipeline.phases._base import get_phase
from rlagents.pipeline.phases._base import Phase
from rlagents.pipeline.phases._base import phase_names
from rlagents.pipeline.phases._base import PhaseError
from rlagents.pipeline.phases._base import policy_batch
from rlagents.pipeline.phases._base import register_phase
from rlagents.pipeline.phases._base import StepResult

# Phases that are not a choice of `config.algorithm`: SFT always runs first.
NOT_ALGORITHMS = ("sft",)


def algorithms() -> tuple[str, ...]:
  """The names `config.algorithm` accepts: every registered phase but SFT."""
  return tuple(n for n in phase_names() if n not in NOT_ALGORITHMS)


def rl_phase_name(config) -> str:
  """The phase after SFT: `config.algorithm`, in jit for GRPO with `rollout_mode='jit'`."""
  if config.algorithm == "grpo" and config.rollout_mode == "jit":
    return "grpo_jit"
  return config.algorithm


__all__ = [
    "NOT_ALGORITHMS",
    "Phase",
    "PhaseError",
    "StepResult",
    "algorithms",
    "get_phase",
    "grpo",
    "grpo_dyna",
    "grpo_jit",
    "offline",
    "phase_names",
    "policy_batch",
    "ppo",
    "register_phase",
    "rl_phase_name",
    "selfplay",
    "sft",
]
