r"""How good is a trained learned (MuZero) model of Connect Four, and does search over it help?

    python benchmarks/muzero_model.py --workdir=/tmp/selfplay_muzero --json=/tmp/muzero_model.json

Reads the newest checkpoint of a `train_selfplay` run with `az.model='learned'` and measures:

- **Immediate wins**: `--positions` positions from random play (4 to 29 random moves, games
  that ended are cut before their last move). For every legal move the true mover's reward comes
  from the game, the predicted one from `dynamics(represent(obs), move)`. Printed: the share of
  winning moves the reward head scores above 0.5 (recall), the share of other moves it scores
  above 0.5 (false alarms), and, in positions with a winning move, how often the prior's and the
  reward head's favourite legal move wins.
- **Search over the model**: the learner's evaluation search (no noise) against the uniform
  random player at each of `--simulations`, `--games` games per setting, half moving first.
  If more simulations do not win more, search is not reading anything useful from the model.

Prints the figures and writes them to `--json`; it never fails on a figure.
"""

import json
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from experiments import selfplay_job
from rlagents import envs

_WORKDIR = flags.DEFINE_string("workdir", None, "A learned-model self-play run.", required=True)
_POSITIONS = flags.DEFINE_integer("positions", 4000, "Random positions for the win checks.")
_SIMULATIONS = flags.DEFINE_list("simulations", ["2", "8", "32", "128"],
                                 "Search simulations to play random with.")
_GAMES = flags.DEFINE_integer("games", 400, "Games against random per setting.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the positions and the games.")
_JSON = flags.DEFINE_string("json", None, "Write the figures here too.")


def random_positions(game: envs.TurnBasedEnvironment, key, num: int, max_moves: int = 30):
  """`num` positions after 4 to `max_moves - 1` uniform random moves, none of them over."""
  def one(key):
    length_key, play_key = jax.random.split(key)
    length = jax.random.randint(length_key, (), 4, max_moves)
    state, turn = game.reset(play_key)

    def move(i, carry):
      state, turn, key = carry
      key, sub = jax.random.split(key)
      action = jax.random.categorical(sub, jnp.where(turn.legal_action_mask, 0.0, -jnp.inf))
      next_state, next_turn = game.step(state, action, sub)
      keep = (i < length) & ~next_turn.terminated & ~next_turn.truncated
      pick = lambda new, old: jnp.where(keep, new, old)
      return jax.tree.map(pick, next_state, state), jax.tree.map(pick, next_turn, turn), key

    state, turn, _ = jax.lax.fori_loop(0, max_moves, move, (state, turn, play_key))
    return state, turn

  return jax.vmap(one)(jax.random.split(key, num))


def mover_rewards(game: envs.TurnBasedEnvironment, state, turn, key) -> jax.Array:
  """`[N, A]`: the mover's reward for each move from each of a batch of positions."""
  def of_position(state, turn):
    def one(action):
      _, after = game.step(state, action, key)
      return after.rewards[turn.current_player]
    return jax.vmap(one)(jnp.arange(game.action_spec().num_values))
  return jax.vmap(of_position)(state, turn)


def win_checks(learner, params, key, num: int) -> dict[str, float]:
  """The model's reward head and prior on the immediate wins of `num` random positions."""
  game = envs.make_game(learner.config.game)
  network = learner.network
  num_actions = game.action_spec().num_values

  @jax.jit
  def run(key):
    state, turn = random_positions(game, key, num)
    actions = jnp.arange(num_actions)
    rewards = mover_rewards(game, state, turn, key)                     # [N, A]
    latent = network.apply(params, turn.observation, method=network.represent)
    predicted = jax.vmap(lambda a: network.apply(
        params, latent, jnp.full((num,), a), method=network.dynamics)[1])(actions).T
    logits, _ = network.apply(params, latent, method=network.predict)
    return rewards, predicted, turn.legal_action_mask, logits

  rewards, predicted, legal, logits = jax.device_get(run(key))
  win = (rewards > 0.5) & legal
  other = ~(rewards > 0.5) & legal
  has_win = win.any(axis=1)
  favourite = lambda scores: np.where(legal, scores, -np.inf)[has_win].argmax(axis=1)
  rows = np.arange(int(has_win.sum()))
  return {
      "positions": num, "positions_with_a_win": int(has_win.sum()),
      "winning_moves": int(win.sum()),
      "reward_recall": float((predicted[win] > 0.5).mean()),
      "reward_false_alarms": float((predicted[other] > 0.5).mean()),
      "prior_takes_the_win": float(win[has_win][rows, favourite(logits)].mean()),
      "reward_head_takes_the_win": float(win[has_win][rows, favourite(predicted)].mean()),
  }


def main(argv):
  del argv
  config, learner, params, iteration = selfplay_job.load_run(_WORKDIR.value)
  if learner.config.model != "learned":
    raise SystemExit(f"{_WORKDIR.value} searched over the true game (az.model = "
                     f"{learner.config.model!r}); this benchmark reads a learned model")
  key = jax.random.key(_SEED.value)
  figures = {"workdir": _WORKDIR.value, "iteration": iteration,
             "wins": win_checks(learner, params, key, _POSITIONS.value), "vs_random": {}}
  print(f"{_WORKDIR.value}, iteration {iteration}")
  print("immediate wins: " + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                                       for k, v in figures["wins"].items()))
  for simulations in (int(s) for s in _SIMULATIONS.value):
    evaluator = selfplay_job._Evaluator(learner, config, simulations)  # pylint: disable=protected-access
    start = time.time()
    result = evaluator.play(params, "random", jax.random.fold_in(key, simulations), _GAMES.value)
    figures["vs_random"][simulations] = result
    print(f"  {simulations:4d} simulations vs random: win {result['win']:.3f} (first "
          f"{result.get('win_moving_first', float('nan')):.3f}, second "
          f"{result.get('win_moving_second', float('nan')):.3f}) over {_GAMES.value} games, "
          f"{time.time() - start:.0f} s", flush=True)
  if _JSON.value:
    with open(_JSON.value, "w") as f:
      json.dump(figures, f, indent=2)


if __name__ == "__main__":
  app.run(main)
