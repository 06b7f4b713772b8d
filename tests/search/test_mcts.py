"""mctx search over the true game and over a learned model."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlagents import envs
from rlagents import search

GAME = envs.make_game("connect_four")


def _play(moves):
  """The Connect Four position after `moves` (columns, alternating from the first player)."""
  state, turn = GAME.reset(jax.random.key(0))
  for action in moves:
    state, turn = GAME.step(state, jnp.int32(action), jax.random.key(0))
  return state, turn


# One move to win for the player to move (X, the first player here): three stacked in column 2,
# three along the bottom row (0-1-2, win at 3), a rising diagonal from the bottom left (win at 3).
ONE_MOVE_TO_WIN = [
    ([2, 5, 2, 5, 2, 6], 2),          # vertical in column 2
    ([0, 0, 1, 1, 2, 6], 3),          # bottom row 0-1-2, O on 0,1 above and 6: play 3
    ([0, 1, 1, 2, 2, 3, 2, 3, 3, 6], 3),   # diagonal 0,1,2,3 from the bottom left up
]


def _batch(positions):
  states, turns = zip(*[_play(moves) for moves, _ in positions])
  return jax.tree.map(lambda *x: jnp.stack(x), *states), jax.tree.map(lambda *x: jnp.stack(x),
                                                                        *turns)


@pytest.mark.parametrize("algorithm", search.ALGORITHMS)
def test_true_dynamics_search_finds_the_winning_move(algorithm):
  # An uninformed network (all parameters zero: a uniform prior, value 0 everywhere): only the
  # search can find the win.
  network = search.PolicyValueNet(num_actions=7, obs_ndim=3, hidden_sizes=(32,))
  state, turn = _batch(ONE_MOVE_TO_WIN)
  params = jax.tree.map(jnp.zeros_like, network.init(jax.random.key(1), turn.observation))
  model = search.true_dynamics(GAME, network.apply)
  config = search.SearchConfig(algorithm=algorithm, num_simulations=64).for_evaluation()
  keys = jax.random.split(jax.random.key(2), len(ONE_MOVE_TO_WIN))
  out = jax.jit(lambda p, k, s, t: search.search(model, config, p, k, s, t))(
      params, keys, state, turn)
  winning = [w for _, w in ONE_MOVE_TO_WIN]
  assert out.action.tolist() == winning
  # The search policy (the training target) puts its largest weight on the win.
  assert jnp.argmax(out.action_weights, -1).tolist() == winning
  np.testing.assert_allclose(out.action_weights.sum(-1), 1.0, rtol=1e-5)


def test_illegal_moves_get_no_weight():
  network = search.PolicyValueNet(num_actions=7, obs_ndim=3, hidden_sizes=(16,))
  state, turn = _batch([([3, 3, 3, 3, 3, 3], None)])   # column 3 full
  params = network.init(jax.random.key(0), turn.observation)
  model = search.true_dynamics(GAME, network.apply)
  for algorithm in search.ALGORITHMS:
    config = search.SearchConfig(algorithm=algorithm, num_simulations=16)
    out = jax.jit(lambda k, config=config: search.search(model, config, params, k, state, turn))(
        jax.random.split(jax.random.key(3), 1))
    assert float(out.action_weights[0, 3]) == 0.0
    assert int(out.action[0]) != 3


def test_learned_model_search_runs_and_respects_legal_moves():
  network = search.MuZeroNet(num_actions=7, obs_ndim=3, latent_size=16, hidden_sizes=(16,))
  state, turn = _batch([([3, 3, 3, 3, 3, 3], None), ([0], None)])
  params = network.init(jax.random.key(0), turn.observation)
  model = search.learned_dynamics(network)
  config = search.SearchConfig(num_simulations=8)
  out = jax.jit(lambda p, k: search.search(model, config, p, k, state, turn))(
      params, jax.random.split(jax.random.key(1), 2))
  assert out.action.shape == (2,) and out.action_weights.shape == (2, 7)
  assert float(out.action_weights[0, 3]) == 0.0


@pytest.mark.slow  # also implied by the learner's 1 vs 8 devices test, which is in the default run
def test_each_game_search_depends_only_on_its_key():
  network = search.PolicyValueNet(num_actions=7, obs_ndim=3, hidden_sizes=(16,))
  state, turn = _batch(ONE_MOVE_TO_WIN)
  params = network.init(jax.random.key(0), turn.observation)
  model = search.true_dynamics(GAME, network.apply)
  config = search.SearchConfig(num_simulations=8)
  keys = jax.random.split(jax.random.key(5), 3)
  run = jax.jit(lambda k, s, t: search.search(model, config, params, k, s, t))
  whole = run(keys, state, turn)
  part = run(keys[1:], *jax.tree.map(lambda x: x[1:], (state, turn)))
  np.testing.assert_allclose(whole.action_weights[1:], part.action_weights, atol=1e-6)


def test_config_errors_name_the_field():
  with pytest.raises(ValueError, match="Unknown search algorithm 'mcts'"):
    search.SearchConfig(algorithm="mcts")
  with pytest.raises(ValueError, match="num_simulations"):
    search.SearchConfig(num_simulations=0)
  with pytest.raises(ValueError, match="dirichlet_fraction"):
    search.SearchConfig(dirichlet_fraction=1.5)
  with pytest.raises(ValueError, match="Unknown torso"):
    network = search.PolicyValueNet(num_actions=7, obs_ndim=3, torso="transformer")
    network.init(jax.random.key(0), jnp.zeros((1, 6, 7, 2)))
