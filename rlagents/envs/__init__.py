"""JAX-native environments: pure `reset(key)` / `step(state, action, key)`, jittable and vmappable.

    env = envs.make("CartPole-v1")
    batch = envs.wrap_for_training(env, num_envs=4)   # auto-reset, episode stats, vmapped
    state, obs = batch.reset(key)                     # obs [4, 4]
    state, obs, reward, done, info = batch.step(state, action, key)

Built-ins: CartPole (gymnasium CartPole-v1 dynamics) and a key-door maze (long horizon, sparse
reward). `GymnaxEnv` adapts gymnax environments (`make('gymnax/CartPole-v1')`; needs gymnax,
imported only then). Turn-based games (`TurnBasedEnvironment`, `Turn`): pgx's Connect Four,
Othello, Go 9x9 through `make_game`, `play_games` between two policies, and a jitted minimax
opponent for Connect Four (`make_minimax_policy`). `CalculatorTextEnv` is the calculator tool-use task as a text environment
whose tool runs inside `jit` (see `rollout.make_jit_rollout`); `KeyDoorTextEnv` is the long-horizon
key-door world on token ids; both are `TextEnvironment`s, the interface every jitted rollout takes.
"""

from rlagents.envs._api import BoxSpec
from rlagents.envs._api import check_action
from rlagents.envs._api import check_environment
from rlagents.envs._api import DiscreteSpec
from rlagents.envs._api import Environment
from rlagents.envs._api import InvalidEnvironmentError
from rlagents.envs._calculator_text import CalculatorTextEnv
from rlagents.envs._calculator_text import Segment
from rlagents.envs._calculator_text import TextEpisode
from rlagents.envs._cartpole import CartPole
from rlagents.envs._cartpole import CartPoleState
from rlagents.envs._connect_four_minimax import make_minimax_policy
from rlagents.envs._connect_four_minimax import minimax_values
from rlagents.envs._craftax import CraftaxEnv
from rlagents.envs._gymnax import GymnaxEnv
from rlagents.envs._keydoor_text import EFFECT_DOOR
from rlagents.envs._keydoor_text import EFFECT_INVALID
from rlagents.envs._keydoor_text import EFFECT_KEY
from rlagents.envs._keydoor_text import EFFECT_NONE
from rlagents.envs._keydoor_text import EFFECT_WASTED
from rlagents.envs._keydoor_text import KeyDoorEpisode
from rlagents.envs._keydoor_text import NUM_EFFECTS
from rlagents.envs._keydoor_text import OBSERVATION_WIDTH
from rlagents.envs._keydoor_text import parse_keydoor_action
from rlagents.envs._keydoor_text import KeyDoorTextEnv
from rlagents.envs._keydoor_text import KeyDoorTransition
from rlagents.envs._maze import KeyDoorMaze
from rlagents.envs._maze import KeyDoorMazeState
from rlagents.envs._maze import ProceduralKeyDoorMaze
from rlagents.envs._maze import ProceduralMazeState
from rlagents.envs._pgx import GAMES
from rlagents.envs._pgx import make_game
from rlagents.envs._pgx import PgxGame
from rlagents.envs._pgx import render_connect_four
from rlagents.envs._registry import ENVIRONMENTS
from rlagents.envs._registry import make
from rlagents.envs._text_env import compose_text_reward
from rlagents.envs._text_env import join_text_pieces
from rlagents.envs._text_env import text_after_last
from rlagents.envs._text_env import text_window
from rlagents.envs._text_env import TextEnvironment
from rlagents.envs._turn_based import check_turn_based_environment
from rlagents.envs._turn_based import MatchResult
from rlagents.envs._turn_based import play_games
from rlagents.envs._turn_based import Policy
from rlagents.envs._turn_based import random_policy
from rlagents.envs._turn_based import Turn
from rlagents.envs._turn_based import TurnBasedEnvironment
from rlagents.envs._wrappers import AutoReset
from rlagents.envs._wrappers import CheckedActions
from rlagents.envs._wrappers import EpisodeStatistics
from rlagents.envs._wrappers import EpisodeStatisticsState
from rlagents.envs._wrappers import VmapEnv
from rlagents.envs._wrappers import Wrapper
from rlagents.envs._wrappers import wrap_for_training

__all__ = [
    "EFFECT_DOOR",
    "EFFECT_INVALID",
    "EFFECT_KEY",
    "EFFECT_NONE",
    "EFFECT_WASTED",
    "NUM_EFFECTS",
    "OBSERVATION_WIDTH",
    "ENVIRONMENTS",
    "GAMES",
    "AutoReset",
    "BoxSpec",
    "CalculatorTextEnv",
    "CartPole",
    "CartPoleState",
    "CheckedActions",
    "DiscreteSpec",
    "Environment",
    "EpisodeStatistics",
    "EpisodeStatisticsState",
    "CraftaxEnv",
    "GymnaxEnv",
    "InvalidEnvironmentError",
    "KeyDoorEpisode",
    "KeyDoorMaze",
    "KeyDoorTextEnv",
    "KeyDoorTransition",
    "KeyDoorMazeState",
    "ProceduralKeyDoorMaze",
    "ProceduralMazeState",
    "MatchResult",
    "PgxGame",
    "Policy",
    "Segment",
    "TextEnvironment",
    "TextEpisode",
    "Turn",
    "TurnBasedEnvironment",
    "VmapEnv",
    "Wrapper",
    "check_action",
    "compose_text_reward",
    "join_text_pieces",
    "check_environment",
    "check_turn_based_environment",
    "make",
    "make_game",
    "make_minimax_policy",
    "parse_keydoor_action",
    "minimax_values",
    "play_games",
    "random_policy",
    "text_after_last",
    "text_window",
    "render_connect_four",
    "wrap_for_training",
]
