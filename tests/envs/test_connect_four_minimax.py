"""The Connect Four minimax opponent: hand-made positions, and the value alpha-beta returns."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlagents import envs
from rlagents.envs import _connect_four_minimax as minimax


def board(rows: list[str]) -> np.ndarray:
  """An observation from 6 strings, top row first: 'X' the player to move, 'O' the opponent."""
  obs = np.zeros((6, 7, 2), bool)
  for r, row in enumerate(rows):
    for c, cell in enumerate(row):
      obs[r, c, 0] = cell == "X"
      obs[r, c, 1] = cell == "O"
  return obs


IMMEDIATE_WIN = board([".......",
                       ".......",
                       ".......",
                       ".......",
                       "OOO....",
                       "XXX.O.."])     # X plays 3 and wins along the bottom row
FORCED_BLOCK = board([".......",
                      ".......",
                      ".......",
                      "....O..",
                      "....O..",
                      "X.X.O.X"])      # O threatens column 4; X must block there
WIN_BEATS_BLOCK = board([".......",
                         ".......",
                         ".......",
                         ".X.....",
                         ".X..O..",
                         ".X..O.O"])   # X can win in column 1 instead of blocking O


@pytest.mark.parametrize("depth", [1, 2, 4])
def test_takes_an_immediate_win(depth):
  values = minimax.minimax_values(jnp.asarray(IMMEDIATE_WIN), depth)
  assert int(jnp.argmax(values)) == 3
  assert float(values[3]) == minimax.WIN + depth


@pytest.mark.parametrize("depth", [2, 4])
def test_blocks_a_forced_threat(depth):
  values = minimax.minimax_values(jnp.asarray(FORCED_BLOCK), depth)
  assert int(jnp.argmax(values)) == 4
  # Every other move lets O win on its next move: the value is minus a win two plies deep.
  others = np.delete(np.asarray(values), 4)
  np.testing.assert_array_equal(others, -(minimax.WIN + depth - 1))


def test_prefers_winning_to_blocking():
  values = minimax.minimax_values(jnp.asarray(WIN_BEATS_BLOCK), 2)
  assert int(jnp.argmax(values)) == 1


def test_full_columns_are_never_played():
  obs = board(["X......", "O......", "X......", "O......", "X......", "O......"])
  values = minimax.minimax_values(jnp.asarray(obs), 2)
  assert float(values[0]) == -np.inf
  policy = envs.make_minimax_policy(2)
  turn = envs.Turn(observation=jnp.asarray(obs, jnp.float32)[None],
                   current_player=jnp.zeros(1, jnp.int32),
                   legal_action_mask=jnp.asarray([[False] + [True] * 6]),
                   rewards=jnp.zeros((1, 2)), terminated=jnp.zeros(1, bool),
                   truncated=jnp.zeros(1, bool))
  actions = [int(policy(None, turn, jax.random.key(s))[0]) for s in range(5)]
  assert 0 not in actions


def _heuristic(mine, theirs):
  """The module's line heuristic, written again in numpy from its docstring."""
  m = mine[minimax.LINES].sum(-1)
  t = theirs[minimax.LINES].sum(-1)
  scores = np.array([0.0, 1.0, 4.0, 16.0, 0.0])
  centre = mine.reshape(6, 7)[:, 3].sum() - theirs.reshape(6, 7)[:, 3].sum()
  return float(np.where(t == 0, scores[m], 0.0).sum() - np.where(m == 0, scores[t], 0.0).sum()
               + 2.0 * centre)


def _alpha_beta(mine, theirs, depth, alpha, beta):
  """Textbook alpha-beta negamax in plain Python on the same scores (the reference)."""
  best = -math.inf
  filled = (mine | theirs).reshape(6, 7).sum(0)
  for col in range(7):
    if filled[col] >= 6:
      continue
    after = mine.copy()
    after[(5 - filled[col]) * 7 + col] = True
    if after[minimax.LINES].all(-1).any():
      value = minimax.WIN + depth
    elif (after | theirs).all():
      value = 0.0
    elif depth == 1:
      value = _heuristic(after, theirs)
    else:
      value = -_alpha_beta(theirs, after, depth - 1, -beta, -alpha)
    best = max(best, value)
    alpha = max(alpha, value)
    if alpha >= beta:
      break
  return best


@pytest.mark.slow  # 123 s of the default suite under load (a compile per depth and position)
def test_value_equals_alpha_beta_on_random_positions():
  game = envs.make_game("connect_four")
  values_fn = jax.jit(lambda obs: minimax.minimax_values(obs, 3))
  rng = np.random.default_rng(0)
  checked = 0
  for seed in range(6):
    state, turn = game.reset(jax.random.key(seed))
    for _ in range(int(rng.integers(4, 14))):
      legal = np.flatnonzero(np.asarray(turn.legal_action_mask))
      state, turn = game.step(state, jnp.int32(rng.choice(legal)), jax.random.key(0))
    if bool(turn.terminated):
      continue
    obs = np.asarray(turn.observation, bool).reshape(42, 2)
    expected = _alpha_beta(obs[:, 0], obs[:, 1], 3, -math.inf, math.inf)
    assert float(jnp.max(values_fn(turn.observation))) == pytest.approx(expected)
    checked += 1
  assert checked >= 4


def test_beats_random_play():
  game = envs.make_game("connect_four")
  result = jax.jit(lambda k: envs.play_games(
      game, [envs.make_minimax_policy(2), envs.random_policy], k, 40))(jax.random.key(0))
  assert float(np.mean(np.asarray(result.score) > 0)) >= 0.95


def test_bad_depth():
  with pytest.raises(ValueError, match="depth must be >= 1"):
    envs.make_minimax_policy(0)
