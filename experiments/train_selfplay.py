r"""Trains an AlphaZero-style agent by self-play with a league on a pgx game (Connect Four default).

    python -m experiments.train_selfplay --workdir=/tmp/selfplay_c4
    python -m experiments.train_selfplay --workdir=/tmp/selfplay_muzero \
        --config=experiments/configs/selfplay.py:muzero
    python -m experiments.train_selfplay --workdir=/tmp/smoke \
        --config=experiments/configs/selfplay.py:smoke

The workdir gets `config.json`, `metrics.csv` (a row per metric every `log_every` iterations and
at every evaluation; step = iteration) and TensorBoard events, `selfplay.png` (Elo and win rates
over training, losses), `summary.json` (the final evaluation, the Elo table, times) and
`checkpoints/` (Orbax: the learner's state, replay and league included, with the Elo games in the
metadata). Run again on the same workdir and it resumes from the newest checkpoint, exactly: the
iterations and evaluations after it are those of an uninterrupted run.
"""

import os
import sys

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from experiments import _cli
from experiments import selfplay_job
from experiments.configs import selfplay as selfplay_configs
from rlagents import envs

if __name__ == "__main__":
  _cli.exit_on_bad_config(sys.argv, "selfplay.py", selfplay_configs.get_config)

_CONFIG = config_flags.DEFINE_config_file(
    "config", os.path.join(os.path.dirname(__file__), "configs", "selfplay.py"),
    "Experiment config file, optionally with variants after a colon "
    "(experiments/configs/selfplay.py:muzero,smoke; variants: connect_four, othello, go_9x9, "
    "muzero, smoke). Override any field with --config.<field>=<value>, e.g. "
    "--config.az.num_games=128; the az fields are documented in "
    "rlagents.learners.alphazero.AlphaZeroConfig.", lock_config=True)
_WORKDIR = flags.DEFINE_string(
    "workdir", "/tmp/selfplay",
    "Where the run's files go: config.json, metrics.csv, tensorboard/, selfplay.png, "
    "summary.json, checkpoints/. An existing run there is resumed.")


def main(argv):
  del argv
  logging.set_verbosity(logging.ERROR)
  try:
    summary = selfplay_job.train_and_evaluate(_CONFIG.value, _WORKDIR.value)
  except (ValueError, envs.InvalidEnvironmentError) as e:
    sys.exit(f"error: {e}")
  for opponent, rates in summary["final"].items():
    print(f"vs {opponent}: win {rates['win']:.3f} draw {rates['draw']:.3f} loss "
          f"{rates['loss']:.3f} over {rates['games']} games")
  print(f"plot: {summary['plot']}  ({summary['train_seconds']:.0f} s of training)")


if __name__ == "__main__":
  app.run(main)
