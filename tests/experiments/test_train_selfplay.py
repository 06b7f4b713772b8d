"""`python -m experiments.train_selfplay` end to end: the run's files, and a run stopped after some
iterations and resumed equals the uninterrupted run."""

import json
import os

import jax
import numpy as np
import pytest

from experiments import selfplay_job
from experiments.configs import selfplay as selfplay_configs
from rlagents import checkpoint
from rlagents import envs
from rlagents.metrics import read_csv


def tiny_config(num_iterations):
  """The smoke variant, smaller still: 16 games of 16-move windows, 4 simulations."""
  config = selfplay_configs.get_config("smoke")
  config.az.num_games = 16
  config.az.num_moves = 16
  config.az.batch_size = 32
  config.az.updates_per_iteration = 2
  config.az.search.num_simulations = 4
  config.az.hidden_sizes = (16,)
  config.num_iterations = num_iterations
  config.eval_every = 2
  config.eval_games = 8
  config.eval_simulations = 4
  config.final_simulations = 4
  config.final_random_games = 8
  config.final_minimax_games = 4
  config.checkpoint_every = 2
  return config


def _final_checkpoint(workdir):
  with checkpoint.Checkpointer(os.path.join(workdir, "checkpoints")) as loader:
    restored = loader.restore_latest()
  return restored.step, restored.state


def _rows(workdir, skip=("elo_final",)):
  """metrics.csv as {(step, name): value}, without the names in `skip`."""
  return {(r["step"], r["name"]): r["value"]
          for r in read_csv(os.path.join(workdir, "metrics.csv")) if r["name"] not in skip}


# Three sessions of the entry point, each compiling the iteration and the evaluation games:
# 405 s on the shared 2-core CPU under load.
@pytest.mark.slow
def test_stopped_and_resumed_run_equals_the_uninterrupted_run(tmp_path):
  straight = str(tmp_path / "straight")
  stopped = str(tmp_path / "stopped")
  summary = selfplay_job.train_and_evaluate(tiny_config(4), straight)
  # The same run stopped after 2 iterations (it writes its final evaluation, as a finished run
  # does), then resumed on its workdir up to 4.
  first = selfplay_job.train_and_evaluate(tiny_config(2), stopped)
  assert first["iterations"] == 2
  resumed = selfplay_job.train_and_evaluate(tiny_config(4), stopped)
  assert resumed["iterations"] == summary["iterations"] == 4

  # The run's files.
  for name in ("config.json", "metrics.csv", "selfplay.png", "summary.json"):
    assert os.path.exists(os.path.join(straight, name)), name
  with open(os.path.join(straight, "summary.json")) as f:
    assert json.load(f)["final"]["random"]["games"] == 8

  # The learner's state (parameters, optimizer, replay, league, the games in progress, key) and
  # the previous evaluation's parameters, bit for bit.
  step_a, state_a = _final_checkpoint(straight)
  step_b, state_b = _final_checkpoint(stopped)
  assert step_a == step_b == 4
  assert jax.tree.structure(state_a) == jax.tree.structure(state_b)
  jax.tree.map(np.testing.assert_array_equal, state_a, state_b)
  # The games after the stop, the final games and the Elo table are those of the straight run.
  assert resumed["final"] == summary["final"]
  assert resumed["elo"] == pytest.approx(summary["elo"])
  # Every metric row: the training metrics, the evaluations' win rates and Elo. The final re-rated
  # Elo ('elo_final') is written by each finished session, so the stopped run's first session
  # left its own rows at its steps; the last session's rows after the stop must be equal.
  rows_a, rows_b = _rows(straight), _rows(stopped)
  assert rows_a.keys() <= rows_b.keys()
  assert {k for k in rows_b if k not in rows_a} <= {(2, n) for n in
                                                    ("loss", "policy_loss", "value_loss",
                                                     "grad_norm", "games", "game_length",
                                                     "score", "policy_entropy", "root_value",
                                                     "replay_samples", "league_score",
                                                     "league_opponent", "league_members")}
  for key, value in rows_a.items():
    assert rows_b[key] == pytest.approx(value, rel=1e-6), key
  finals_a = {k: v for k, v in _rows(straight, skip=()).items() if k[1] == "elo_final"}
  assert finals_a and max(step for step, _ in finals_a) == 4


def test_match_rates_split_wins_by_seat():
  # Four games: as first player a win and a draw; as second player a win and a loss.
  result = envs.MatchResult(
      score=np.array([1.0, 0.0, 1.0, -1.0]),
      first_policy_moved_first=np.array([True, True, False, False]),
      length=np.array([7, 42, 9, 12]), finished=np.ones(4, bool))
  rates = selfplay_job._rates(result)  # pylint: disable=protected-access
  assert rates == {"win": 0.5, "draw": 0.25, "loss": 0.25, "score": 0.625,
                   "win_moving_first": 0.5, "win_moving_second": 0.5}
