"""pgx games behind the turn-based API: Connect Four, Othello, Go 9x9, Tic-tac-toe.

pgx (Koyamada et al. 2023, "Pgx: Hardware-Accelerated Parallel Game Simulators for Reinforcement
Learning", https://arxiv.org/abs/2303.17503) holds board games as pure JAX functions. The adapter
keeps pgx's state as ours and reads a `Turn` off it: the observation (pgx's, as float32, from the
player to move), the player to move, the legal-action mask, per-player rewards, terminated, and
truncated, which pgx games never set by themselves: `max_moves` cuts a game after that many moves
(pgx's own illegal-move rule, stepping a finished game, and Go's internal move limit are kept).
"""

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rlagents.envs import _api
from rlagents.envs import _turn_based

# Upper bounds on the moves of a game: Connect Four fills 42 cells; an Othello game places at most
# 60 discs with passes in between (two passes in a row end it); pgx ends Go 9x9 after 2 * 81 moves.
_MAX_GAME_LENGTH = {"connect_four": 42, "othello": 128, "go_9x9": 162, "tic_tac_toe": 9}
GAMES = tuple(_MAX_GAME_LENGTH)


@dataclasses.dataclass(frozen=True, eq=False)
class PgxGame(_turn_based.TurnBasedEnvironment):
  """A pgx two-player game by its pgx id (see `GAMES`).

  Attributes:
    game_id: 'connect_four', 'othello', 'go_9x9' or 'tic_tac_toe'.
    max_moves: cut (truncate) a game after this many moves; None plays games to their end.
  """
  game_id: str = "connect_four"
  max_moves: int | None = None

  def __post_init__(self):
    if self.game_id not in _MAX_GAME_LENGTH:
      raise ValueError(f"Unknown game {self.game_id!r}; valid choices: "
                       f"{', '.join(repr(g) for g in GAMES)}.")
    if self.max_moves is not None and self.max_moves < 1:
      raise ValueError(f"PgxGame.max_moves must be >= 1 or None, got {self.max_moves}")
    import pgx  # pylint: disable=g-import-not-at-top
    env = pgx.make(self.game_id)
    object.__setattr__(self, "pgx_env", env)
    with jax.ensure_compile_time_eval():
      state = env.init(jax.random.key(0))
    object.__setattr__(self, "_obs_shape", tuple(state.observation.shape))
    object.__setattr__(self, "_num_actions", int(state.legal_action_mask.shape[0]))

  @property
  def num_players(self) -> int:
    return self.pgx_env.num_players

  @property
  def max_game_length(self) -> int:
    length = _MAX_GAME_LENGTH[self.game_id]
    return length if self.max_moves is None else min(length, self.max_moves)

  def observation_spec(self) -> _api.BoxSpec:
    return _api.BoxSpec(shape=self._obs_shape, low=0.0, high=1.0)

  def action_spec(self) -> _api.DiscreteSpec:
    return _api.DiscreteSpec(self._num_actions)

  def _turn(self, state) -> _turn_based.Turn:
    return _turn_based.Turn(
        observation=state.observation.astype(jnp.float32),
        current_player=state.current_player.astype(jnp.int32),
        legal_action_mask=state.legal_action_mask,
        rewards=state.rewards.astype(jnp.float32),
        terminated=state.terminated,
        truncated=state.truncated)

  def reset(self, key: jax.Array) -> tuple[Any, _turn_based.Turn]:
    state = self.pgx_env.init(key)
    return state, self._turn(state)

  def step(self, state, action: jax.Array, key: jax.Array) -> tuple[Any, _turn_based.Turn]:
    state = self.pgx_env.step(state, jnp.asarray(action, jnp.int32), key)
    if self.max_moves is not None:
      moves = state._step_count  # pylint: disable=protected-access
      cut = (moves >= self.max_moves) & ~state.terminated
      state = state.replace(truncated=state.truncated | cut)
    return state, self._turn(state)


def make_game(name: str, **kwargs) -> PgxGame:
  """A turn-based game by name (`GAMES`), e.g. `make_game('connect_four')`.

  Args:
    name: a pgx game id in `GAMES`.
    **kwargs: `PgxGame`'s other fields (`max_moves`).

  Raises:
    ValueError: an unknown name (the message lists the valid ones).
  """
  return PgxGame(name, **kwargs)


def render_connect_four(observation) -> str:
  """The board of a Connect Four observation as text: 'X' the player to move, 'O' the other.

  Host code. Rows top to bottom, column numbers (the actions) underneath.

  Args:
    observation: `[6, 7, 2]`, a pgx Connect Four observation.
  """
  obs = np.asarray(observation)
  if obs.shape != (6, 7, 2):
    raise ValueError(f"a Connect Four observation is (6, 7, 2), got {obs.shape}")
  rows = ["".join("X" if obs[r, c, 0] else "O" if obs[r, c, 1] else "." for c in range(7))
          for r in range(6)]
  return "\n".join(rows + ["0123456"])
