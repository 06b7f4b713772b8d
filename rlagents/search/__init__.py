"""MCTS through mctx over the true game dynamics or a learned MuZero model, and the networks.

    game = envs.make_game("connect_four")
    network = search.PolicyValueNet(num_actions=7, obs_ndim=3)
    model = search.true_dynamics(game, network.apply)
    out = search.search(model, search.SearchConfig(num_simulations=32), params, keys, state, turn)
    out.action, out.action_weights                   # [B], [B, 7]: the move, the policy target

`learned_dynamics(MuZeroNet(...))` searches over a learned model instead (MuZero).
"""

from rlagents.search._mcts import ALGORITHMS
from rlagents.search._mcts import learned_dynamics
from rlagents.search._mcts import make_search_policy
from rlagents.search._mcts import Model
from rlagents.search._mcts import search
from rlagents.search._mcts import SearchConfig
from rlagents.search._mcts import SearchOutput
from rlagents.search._mcts import true_dynamics
from rlagents.search._networks import MuZeroNet
from rlagents.search._networks import PolicyValueNet
from rlagents.search._networks import TORSOS

__all__ = [
    "ALGORITHMS",
    "Model",
    "MuZeroNet",
    "PolicyValueNet",
    "SearchConfig",
    "SearchOutput",
    "TORSOS",
    "learned_dynamics",
    "make_search_policy",
    "search",
    "true_dynamics",
]
