"""Losses for policy optimization: advantages, policy/value/KL terms, preference losses, DAPO parts.

Every function is pure and jittable; hyper-parameters are keyword-only (bind the static ones with
functools.partial before jit); `loss_mask` excludes prompt, padding and tool-output tokens. See
docs/losses.md for the formulas and usage.
"""

from rlagents.losses._advantages import dr_grpo_advantages
from rlagents.losses._advantages import gae_advantages
from rlagents.losses._advantages import group_relative_advantages
from rlagents.losses._advantages import reinforce_pp_advantages
from rlagents.losses._advantages import rloo_advantages
from rlagents.losses._aggregation import aggregate_loss
from rlagents.losses._dapo import dynamic_sampling_mask
from rlagents.losses._dapo import overlong_penalty
from rlagents.losses._dapo import select_informative_groups
from rlagents.losses._kl import kl_divergence
from rlagents.losses._kl import kl_loss
from rlagents.losses._kl import kl_penalty_in_reward
from rlagents.losses._policy import entropy_from_logits
from rlagents.losses._policy import policy_gradient_loss
from rlagents.losses._off_policy import importance_weights
from rlagents.losses._off_policy import OFF_POLICY_CORRECTIONS
from rlagents.losses._preference import bradley_terry_loss
from rlagents.losses._preference import DPO_VARIANTS
from rlagents.losses._preference import dpo_loss
from rlagents.losses._preference import kto_loss
from rlagents.losses._preference import kto_reference_kl
from rlagents.losses._registry import ADVANTAGE_ESTIMATORS
from rlagents.losses._registry import AGGREGATIONS
from rlagents.losses._registry import get_advantage_estimator
from rlagents.losses._registry import get_aggregation
from rlagents.losses._registry import get_kl_estimator
from rlagents.losses._registry import get_policy_loss
from rlagents.losses._registry import KL_ESTIMATORS
from rlagents.losses._registry import POLICY_LOSSES
from rlagents.losses._roles import role_conditioned_advantages
from rlagents.losses._value import value_loss

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AGGREGATIONS",
    "DPO_VARIANTS",
    "KL_ESTIMATORS",
    "OFF_POLICY_CORRECTIONS",
    "POLICY_LOSSES",
    "aggregate_loss",
    "bradley_terry_loss",
    "dpo_loss",
    "dr_grpo_advantages",
    "dynamic_sampling_mask",
    "entropy_from_logits",
    "gae_advantages",
    "get_advantage_estimator",
    "get_aggregation",
    "get_kl_estimator",
    "get_policy_loss",
    "group_relative_advantages",
    "importance_weights",
    "kl_divergence",
    "kl_loss",
    "kl_penalty_in_reward",
    "kto_loss",
    "kto_reference_kl",
    "overlong_penalty",
    "policy_gradient_loss",
    "reinforce_pp_advantages",
    "rloo_advantages",
    "role_conditioned_advantages",
    "select_informative_groups",
    "value_loss",
]
