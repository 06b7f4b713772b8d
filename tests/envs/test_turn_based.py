"""The turn-based API and the pgx adapter: legal masks, rewards and turns match pgx itself."""

import jax
import jax.numpy as jnp
import numpy as np
import pgx
import pytest

from rlagents import envs


@pytest.mark.parametrize("game_id", [
    "connect_four", pytest.param("othello", marks=pytest.mark.slow), "tic_tac_toe"])
def test_adapter_matches_pgx_along_random_games(game_id):
  game = envs.make_game(game_id)
  envs.check_turn_based_environment(game)
  reference = pgx.make(game_id)
  num_games, moves = 16, 70 if game_id == "othello" else 45

  @jax.jit
  def play(key):
    init_key, key = jax.random.split(key)
    keys = jax.random.split(init_key, num_games)
    ours, turn = jax.vmap(game.reset)(keys)
    theirs = jax.vmap(reference.init)(keys)

    def step(carry, key):
      ours, turn, theirs = carry
      action_key, step_key = jax.random.split(key)
      action = envs.random_policy(ours, turn, action_key)
      step_keys = jax.random.split(step_key, num_games)
      ours, turn = jax.vmap(game.step)(ours, action, step_keys)
      theirs = jax.vmap(reference.step)(theirs, action, step_keys)
      return (ours, turn, theirs), (turn, theirs)

    _, (turns, states) = jax.lax.scan(step, (ours, turn, theirs), jax.random.split(key, moves))
    return turns, states

  turns, states = play(jax.random.key(0))
  np.testing.assert_array_equal(turns.legal_action_mask, states.legal_action_mask)
  np.testing.assert_array_equal(turns.rewards, states.rewards)
  np.testing.assert_array_equal(turns.current_player, states.current_player)
  np.testing.assert_array_equal(turns.terminated, states.terminated)
  np.testing.assert_array_equal(turns.observation, states.observation.astype(np.float32))
  # Random play ends every game in the window; zero-sum rewards, and a win somewhere.
  assert bool(turns.terminated[-1].all())
  np.testing.assert_array_equal(turns.rewards.sum(-1), 0.0)
  assert float(np.abs(turns.rewards).sum()) > 0


def test_connect_four_rewards_the_winner_and_stops():
  game = envs.make_game("connect_four")
  state, turn = game.reset(jax.random.key(1))
  first = int(turn.current_player)
  # The first player stacks column 0, the second column 1: the first wins on its fourth disc.
  for action in [0, 1, 0, 1, 0, 1, 0]:
    assert not bool(turn.terminated)
    state, turn = game.step(state, jnp.int32(action), jax.random.key(0))
  assert bool(turn.terminated)
  assert turn.rewards.tolist() == ([1.0, -1.0] if first == 0 else [-1.0, 1.0])
  assert bool(turn.legal_action_mask.all())  # all legal once over (pgx's convention)
  state, after = game.step(state, jnp.int32(3), jax.random.key(0))
  assert after.rewards.tolist() == [0.0, 0.0]  # a finished game stays finished


def test_max_moves_truncates():
  game = envs.make_game("connect_four", max_moves=3)
  state, turn = game.reset(jax.random.key(0))
  for action in [3, 3, 3]:
    state, turn = game.step(state, jnp.int32(action), jax.random.key(0))
  assert bool(turn.truncated) and not bool(turn.terminated)
  assert game.max_game_length == 3


def test_bad_input_is_named():
  with pytest.raises(ValueError, match="Unknown game 'chess'.*connect_four"):
    envs.make_game("chess")
  with pytest.raises(ValueError, match="max_moves"):
    envs.make_game("connect_four", max_moves=0)
  with pytest.raises(ValueError, match=r"\(6, 7, 2\)"):
    envs.render_connect_four(np.zeros((3, 3, 2)))


def test_play_games_seats_each_policy_first_in_half_the_games():
  game = envs.make_game("tic_tac_toe")

  def first_legal(state, turn, key):
    return jnp.argmax(turn.legal_action_mask, axis=-1).astype(jnp.int32)

  result = jax.jit(lambda k: envs.play_games(game, [first_legal, envs.random_policy], k, 64))(
      jax.random.key(0))
  assert bool(result.finished.all())
  assert result.first_policy_moved_first.tolist() == [True] * 32 + [False] * 32
  assert set(np.unique(result.score).tolist()) <= {-1.0, 0.0, 1.0}
  # Against itself the same deterministic policy always produces the same game per seat.
  same = jax.jit(lambda k: envs.play_games(game, [first_legal, first_legal], k, 8))(
      jax.random.key(1))
  # First-legal vs first-legal fills 0, 1, 2, ... and the first mover wins on the diagonal 0-4-8.
  np.testing.assert_array_equal(same.score, [1.0] * 4 + [-1.0] * 4)
  np.testing.assert_array_equal(same.length, 7)


def test_render_connect_four():
  obs = np.zeros((6, 7, 2), bool)
  obs[5, 3, 0] = True
  obs[5, 4, 1] = True
  assert envs.render_connect_four(obs).splitlines()[-2:] == ["...XO..", "0123456"]
