r"""AlphaZero-style self-play with a league on pgx games (Connect Four by default).

Run (times on the shared 2-core dev CPU; see docs/selfplay.md for the measured figures):

    python -m experiments.train_selfplay --workdir=/tmp/selfplay_c4
        Connect Four from scratch, search over the true game (Gumbel MuZero, 32 simulations),
        256 games per iteration, a league of 8 past selves; stops after `time_budget_minutes`
        of training, then plays 1,000 games against random and 200 against depth-4 minimax.
    python -m experiments.train_selfplay --workdir=/tmp/selfplay_muzero \
        --config=experiments/configs/selfplay.py:muzero
        The same with search over a learned model (MuZero; consistency loss, reward weight 5).
    python -m experiments.train_selfplay --workdir=/tmp/smoke \
        --config=experiments/configs/selfplay.py:smoke
        A few iterations of a tiny setting (~1-2 min with compilation).

Variants, comma-separated after the colon: 'connect_four' (default), 'othello' or 'go_9x9';
'muzero' (learned model); 'smoke'. Override any field, e.g. `--config.az.num_games=128
--config.time_budget_minutes=30`.

Fields: `az` (the fields of `rlagents.learners.alphazero.AlphaZeroConfig`, `az.search` those of
`rlagents.search.SearchConfig`; validated when the run starts); `seed`; `num_iterations` (the
most iterations; the run also stops after `time_budget_minutes` of training, whichever is first);
`log_every` (iterations between CSV rows and progress lines); `eval_every` (iterations between
evaluations: games against random, against minimax (Connect Four), against the previous
evaluation's parameters; each feeds the Elo table); `eval_games` (games per opponent there);
`eval_minimax_depths`; `eval_simulations` (the evaluation search's simulations);
`final_random_games` and `final_minimax_games` (the final evaluation, at `final_minimax_depth`, the learner searching
with `final_simulations`); `checkpoint_every`
(iterations between Orbax checkpoints; the run resumes from the newest); `num_devices` (devices
the iteration is split over, 1 = plain jit).
"""

import dataclasses

import ml_collections

from experiments import _cli
from rlagents.learners import alphazero
from rlagents.search import SearchConfig

GAMES = ("connect_four", "othello", "go_9x9")
OPTIONS = ("muzero", "smoke")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  parts = [p for p in (arg or "").split(",") if p]
  unknown = [p for p in parts if p not in GAMES + OPTIONS]
  if unknown:
    hint = _cli.closest(unknown[0], GAMES + OPTIONS)
    raise ValueError(f"unknown config variant(s) {unknown}{hint} (choose one of {GAMES} and "
                     f"optionally {OPTIONS}, comma-separated)")
  games = [p for p in parts if p in GAMES]
  if len(games) > 1:
    raise ValueError(f"choose one game, got {games}")
  game = games[0] if games else "connect_four"

  config = ml_collections.ConfigDict()
  config.seed = 0
  values = dataclasses.asdict(alphazero.AlphaZeroConfig())
  values["search"] = dataclasses.asdict(SearchConfig())
  config.az = ml_collections.ConfigDict(values)
  config.az.game = game
  config.num_iterations = 100_000
  # One command trains Connect Four within 60 minutes: training stops after 52, leaving time for
  # compilation and the final games (~4 minutes with 128 simulations).
  config.time_budget_minutes = 52.0
  config.log_every = 10
  config.eval_every = 50
  config.eval_games = 100
  config.eval_minimax_depths = (2, 4)
  config.eval_simulations = 32
  config.final_simulations = 128
  config.final_random_games = 1000
  config.final_minimax_games = 200
  config.final_minimax_depth = 4
  config.checkpoint_every = 50
  config.num_devices = 1
  # Connect Four is symmetric left to right: half of each minibatch is mirrored.
  config.az.mirror = game == "connect_four"
  if game == "connect_four":
    # At a constant step size the strength swings from evaluation to evaluation (depth-4 minimax
    # won against 0.34 to 0.95 in one run); the step size decays to a tenth over the run instead.
    # 1,200 iterations (1,000 with the learned model, ~2.6 s each) take 45-50 minutes on the
    # quiet 2-core machine (`time_budget_minutes` caps a slower one).
    config.num_iterations = 1000 if "muzero" in parts else 1200
    config.az.lr_decay_iterations = config.num_iterations

  if game != "connect_four":
    config.eval_minimax_depths = ()
    config.final_minimax_games = 0
    config.az.num_moves = 64
    config.az.num_games = 128
    config.az.torso = "conv"
  if "muzero" in parts:
    config.az.model = "learned"
    # The learned model's dynamics get a target at every unrolled move (the representation of
    # the real next position) and its sparse rewards 5x the weight: at the defaults (0 and 1)
    # the model called 27% of the immediate wins in random positions and search over it was no
    # better at 128 simulations than at 2 (docs/selfplay.md).
    config.az.consistency_coef = 1.0
    config.az.reward_coef = 5.0
  if "smoke" in parts:
    config.az.num_games = 32
    config.az.num_moves = 42 if game == "connect_four" else 64
    config.az.batch_size = 128
    config.az.updates_per_iteration = 8
    config.az.search.num_simulations = 8
    config.az.hidden_sizes = (64, 64)
    config.az.league_size = 2
    config.az.league_add_every = 2
    config.num_iterations = 6
    config.log_every = 2
    config.eval_every = 3
    config.eval_games = 20
    config.eval_minimax_depths = (1,) if game == "connect_four" else ()
    config.eval_simulations = 8
    config.final_simulations = 8
    config.final_random_games = 40
    config.final_minimax_games = 20 if game == "connect_four" else 0
    config.final_minimax_depth = 1
    config.checkpoint_every = 3
  return config
