"""Learned simulators: a Dreamer-style RSSM world model, imagination, and the model as an env.

    model = world_models.WorldModel(world_models.WorldModelConfig(), obs_size=4, num_actions=2)
    params = model.init(key)
    loss, (metrics, posterior) = model.loss(params, sequences, keys)
    states, actions = model.imagine(params, start_state, policy, key, horizon=15)
    sim = world_models.WorldModelEnv(model, params, start_obs)   # an rlagents.envs.Environment

The DreamerV3 techniques (symlog, two-hot, unimix, KL balancing with free bits, lambda-returns,
percentile return scaling) are pure functions here; `rlagents.learners.dreamer` trains a model
and an actor-critic in its imagination.

For text environments, `TextWorldModelEnv` is a small decoder transformer trained on real
key-door transitions from the audit log (`transitions_from_audit`, `fit_text_world_model`) that
predicts the next observation, the call's effect and the goal, wrapped as the same
`envs.TextEnvironment` the real world is (see `_text_simulator`).
"""

from rlagents.world_models._functions import categorical_kl
from rlagents.world_models._functions import kl_balance_losses
from rlagents.world_models._functions import lambda_returns
from rlagents.world_models._functions import ReturnScale
from rlagents.world_models._functions import sample_onehot
from rlagents.world_models._functions import symexp
from rlagents.world_models._functions import symlog
from rlagents.world_models._functions import symlog_bins
from rlagents.world_models._functions import twohot
from rlagents.world_models._functions import twohot_loss
from rlagents.world_models._functions import twohot_mean
from rlagents.world_models._functions import unimix_logits
from rlagents.world_models._functions import update_return_scale
from rlagents.world_models._rssm import MLPHead
from rlagents.world_models._rssm import RSSMNetworks
from rlagents.world_models._rssm import RSSMState
from rlagents.world_models._rssm import Sequences
from rlagents.world_models._rssm import WorldModel
from rlagents.world_models._rssm import WorldModelConfig
from rlagents.world_models._simulator import WorldModelEnv
from rlagents.world_models._simulator import WorldModelEnvState
from rlagents.world_models._text_simulator import TextHostPredictor
from rlagents.world_models._text_simulator import ImaginationConfig
from rlagents.world_models._text_simulator import SimulatedWorld
from rlagents.world_models._text_simulator import text_start_observation
from rlagents.world_models._text_simulator import TextTransition
from rlagents.world_models._text_simulator import TextWorldModelEnv
from rlagents.world_models._text_simulator import encode_text_transitions
from rlagents.world_models._text_simulator import fit_text_world_model
from rlagents.world_models._text_simulator import text_world_model_config
from rlagents.world_models._text_simulator import text_world_model_accuracy
from rlagents.world_models._text_simulator import transitions_from_audit

__all__ = [
    "ImaginationConfig",
    "SimulatedWorld",
    "TextHostPredictor",
    "TextTransition",
    "TextWorldModelEnv",
    "encode_text_transitions",
    "fit_text_world_model",
    "text_start_observation",
    "text_world_model_accuracy",
    "text_world_model_config",
    "transitions_from_audit",
    "MLPHead",
    "RSSMNetworks",
    "RSSMState",
    "ReturnScale",
    "Sequences",
    "WorldModel",
    "WorldModelConfig",
    "WorldModelEnv",
    "WorldModelEnvState",
    "categorical_kl",
    "kl_balance_losses",
    "lambda_returns",
    "sample_onehot",
    "symexp",
    "symlog",
    "symlog_bins",
    "twohot",
    "twohot_loss",
    "twohot_mean",
    "unimix_logits",
    "update_return_scale",
]
