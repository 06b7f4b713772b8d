"""The learned model's win checks (`benchmarks/muzero_model.py`): random positions and their
immediate wins against a numpy reading of the board."""

import jax
import numpy as np

from experiments import selfplay_job
from rlagents import envs
from rlagents import search
from rlagents.learners import alphazero


def _numpy_wins(board: np.ndarray) -> np.ndarray:
  """`board [6, 7, 2]` (channel 0 the mover's stones): does dropping in each column win?"""
  occupied = board.any(-1)
  wins = np.zeros(7, bool)
  for column in range(7):
    empty = np.flatnonzero(~occupied[:, column])
    if not len(empty):
      continue
    row = empty.max()  # stones fall to the lowest empty row
    mine = board[..., 0].astype(bool).copy()
    mine[row, column] = True
    for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
      run = 1
      for sign in (1, -1):
        r, c = row + sign * dr, column + sign * dc
        while 0 <= r < 6 and 0 <= c < 7 and mine[r, c]:
          run += 1
          r, c = r + sign * dr, c + sign * dc
      wins[column] |= run >= 4
  return wins


def test_random_positions_and_their_immediate_wins_match_the_board():
  game = envs.make_game("connect_four")
  key = jax.random.key(3)
  state, turn = jax.jit(lambda k: selfplay_job.random_positions(game, k, 300))(key)
  rewards = np.asarray(jax.jit(lambda s, t: selfplay_job.mover_rewards(game, s, t, key))(
      state, turn))
  boards = np.asarray(turn.observation)
  stones = boards.sum(axis=(1, 2, 3))
  assert not np.asarray(turn.terminated).any()
  assert stones.min() >= 4 and stones.max() <= 29
  legal = np.asarray(turn.legal_action_mask)
  expected = np.stack([_numpy_wins(b) for b in boards])
  np.testing.assert_array_equal((rewards > 0.5) & legal, expected & legal)
  assert expected.any(axis=1).sum() > 50  # positions with a win to find are common


def test_win_checks_of_an_untrained_model_are_rates():
  config = alphazero.AlphaZeroConfig(model="learned", num_games=8, hidden_sizes=(16,),
                                     latent_size=8, search=search.SearchConfig(num_simulations=2))
  learner = alphazero.make_learner(config)
  params = learner.init(jax.random.key(0)).params
  figures = selfplay_job.model_win_checks(learner, params, jax.random.key(1), 200)
  assert figures["positions"] == 200 and figures["winning_moves"] > 0
  for name in ("reward_recall", "reward_false_alarms", "prior_takes_the_win",
               "reward_head_takes_the_win"):
    assert 0.0 <= figures[name] <= 1.0, (name, figures)
