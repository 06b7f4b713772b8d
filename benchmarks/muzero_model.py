r"""How good is a trained learned (MuZero) model of Connect Four, and does search over it help?

    python benchmarks/muzero_model.py --workdir=/tmp/selfplay_muzero --json=/tmp/muzero_model.json

Reads the newest checkpoint of a `train_selfplay` run with `az.model='learned'` and measures:

- **Immediate wins** (`selfplay_job.model_win_checks`): `--positions` positions from random
  play (4 to 29 random moves, games that ended are cut before their last move). For every
  legal move the true mover's reward comes from the game, the predicted one from
  `dynamics(represent(obs), move)`. Printed: the share of winning moves the reward head scores
  above 0.5 (recall), the share of other moves it scores above 0.5 (false alarms), and, in
  positions with a winning move, how often the prior's and the reward head's favourite legal
  move wins.
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
from experiments import selfplay_job

_WORKDIR = flags.DEFINE_string("workdir", None, "A learned-model self-play run.", required=True)
_POSITIONS = flags.DEFINE_integer("positions", 4000, "Random positions for the win checks.")
_SIMULATIONS = flags.DEFINE_list("simulations", ["2", "8", "32", "128"],
                                 "Search simulations to play random with.")
_GAMES = flags.DEFINE_integer("games", 400, "Games against random per setting.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the positions and the games.")
_JSON = flags.DEFINE_string("json", None, "Write the figures here too.")


def main(argv):
  del argv
  config, learner, params, iteration = selfplay_job.load_run(_WORKDIR.value)
  if learner.config.model != "learned":
    raise SystemExit(f"{_WORKDIR.value} searched over the true game (az.model = "
                     f"{learner.config.model!r}); this benchmark reads a learned model")
  key = jax.random.key(_SEED.value)
  figures = {"workdir": _WORKDIR.value, "iteration": iteration,
             "wins": selfplay_job.model_win_checks(learner, params, key, _POSITIONS.value),
             "vs_random": {}}
  print(f"{_WORKDIR.value}, iteration {iteration}")
  print("immediate wins: " + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                                       for k, v in figures["wins"].items()))
  for simulations in (int(s) for s in _SIMULATIONS.value):
    # pylint: disable-next=protected-access
    evaluator = selfplay_job._Evaluator(learner, config, simulations)
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
