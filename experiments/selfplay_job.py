"""The self-play job behind `python -m experiments.train_selfplay`: train, evaluate, plot and
checkpoint, importable without defining flags (the entry point holds the flags)."""

import json
import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from rlagents import checkpoint
from rlagents import envs
from rlagents import metrics as metrics_lib
from rlagents import parallel
from rlagents import search
from rlagents.learners import alphazero
from rlagents.learners import league as league_lib

def alphazero_config(config: ml_collections.ConfigDict) -> alphazero.AlphaZeroConfig:
  """The learner's settings from the experiment config (validated here)."""
  values = config.az.to_dict()
  values["search"] = search.SearchConfig(**values["search"])
  return alphazero.AlphaZeroConfig(**values)


def load_run(workdir: str) -> tuple[ml_collections.ConfigDict, alphazero.AlphaZeroLearner, Any,
                                    int]:
  """A run's config, learner, newest checkpointed parameters and their iteration (host code).

  Args:
    workdir: a directory `train_and_evaluate` wrote (its `config.json` and `checkpoints/`).

  Returns:
    `(config, learner, params, iteration)`.
  """
  path = os.path.join(workdir, "config.json")
  if not os.path.exists(path):
    raise FileNotFoundError(f"{path} not found: {workdir!r} is not a self-play run's workdir")
  with open(path) as f:
    config = ml_collections.ConfigDict(json.load(f))
  # JSON turned tuples into lists; the learner's config wants tuples back.
  config.az.hidden_sizes = tuple(config.az.hidden_sizes)
  config.eval_minimax_depths = tuple(config.eval_minimax_depths)
  learner = alphazero.make_learner(alphazero_config(config))
  state = learner.init(jax.random.key(config.seed))
  with checkpoint.Checkpointer(os.path.join(workdir, "checkpoints")) as checkpointer:
    restored = checkpointer.restore_latest(target={"learner": state, "previous": state.params})
  if restored is None:
    raise FileNotFoundError(f"no checkpoint under {os.path.join(workdir, 'checkpoints')}")
  return config, learner, restored.state["learner"].params, restored.step


def random_positions(game: envs.TurnBasedEnvironment, key, num: int, max_moves: int = 30):
  """Positions after uniform random moves; pure, jittable.

  Args:
    game: a turn-based environment.
    key: PRNG key.
    num: positions.
    max_moves: each position follows 4 to `max_moves - 1` random moves (a move that would end
      the game is not played, so none is over).

  Returns:
    `(state, turn)` with a leading axis `[num]`.
  """
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
  """The mover's reward for every move of a batch of positions; pure, jittable.

  Args:
    game: a turn-based environment.
    state: the positions' states (leading axis `[N]`).
    turn: their `Turn`s.
    key: the PRNG key the steps get.

  Returns:
    `[N, A]` rewards.
  """
  def of_position(state, turn):
    def one(action):
      _, after = game.step(state, action, key)
      return after.rewards[turn.current_player]
    return jax.vmap(one)(jnp.arange(game.action_spec().num_values))
  return jax.vmap(of_position)(state, turn)


def model_win_checks(learner, params, key, num: int) -> dict[str, float]:
  """A learned model's reward head and prior on the immediate wins of `num` random positions.

  Args:
    learner: a learner with `config.model == 'learned'`.
    params: its network's parameters.
    key: the positions' PRNG key.
    num: positions (from `random_positions`).

  Returns:
    Counts ('positions', 'positions_with_a_win', 'winning_moves') and rates:
    'reward_recall' (winning moves the reward head scores above 0.5), 'reward_false_alarms'
    (other legal moves it scores above 0.5), 'prior_takes_the_win' and
    'reward_head_takes_the_win' (in positions with a win, the favourite legal move wins).
  """
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


def _rates(result: envs.MatchResult) -> dict[str, float]:
  """Win, draw and loss rates and the mean score in [0, 1]; wins per seat (the learner moving
  first or second), since the first player has the edge in most games."""
  score = np.asarray(result.score)
  first = np.asarray(result.first_policy_moved_first, bool)
  per_seat = {f"win_moving_{seat}": float(np.mean(score[games] > 0))
              for seat, games in (("first", first), ("second", ~first)) if games.any()}
  return {"win": float(np.mean(score > 0)), "draw": float(np.mean(score == 0)),
          "loss": float(np.mean(score < 0)), "score": float(np.mean(0.5 + 0.5 * score)),
          **per_seat}


class _Evaluator:
  """Jitted matches of the learner's search against fixed opponents (host side)."""

  def __init__(self, learner: alphazero.AlphaZeroLearner, config: ml_collections.ConfigDict,
               num_simulations: int):
    self.learner = learner
    search_config = learner.config.search.for_evaluation()
    self.search_config = search.SearchConfig(**{
        **search_config.__dict__, "num_simulations": num_simulations})
    self._opponents = {"random": envs.random_policy}
    depths = set(config.eval_minimax_depths)
    if learner.config.game == "connect_four" and config.final_minimax_games:
      depths.add(config.final_minimax_depth)
    for depth in sorted(depths):
      self._opponents[f"minimax_{depth}"] = envs.make_minimax_policy(depth)
    self._compiled = {}

  def play(self, params, opponent: str, key, num_games: int, opponent_params=None):
    """The learner's result against `opponent` ('random', 'minimax_<d>' or 'self')."""
    if (opponent, num_games) not in self._compiled:
      def match(params, opponent_params, key):
        if opponent == "self":
          policy = self.learner.search_policy(opponent_params, self.search_config)
        else:
          policy = self._opponents[opponent]
        return alphazero.evaluate(self.learner, params, policy, key, num_games,
                                  search_config=self.search_config)
      self._compiled[(opponent, num_games)] = jax.jit(match)
    other = params if opponent_params is None else opponent_params
    return _rates(self._compiled[(opponent, num_games)](params, other, key))


def _plot(workdir: str, minimax_names: list[str]) -> str:
  png = os.path.join(workdir, "selfplay.png")
  panels = {"Elo (random = 0)": ["elo", "elo_final"],
            "win rate": ["win_rate_random"] + [f"win_rate_{n}" for n in minimax_names],
            "losses": ["policy_loss", "value_loss", "reward_loss"],
            "league": ["league_score"]}
  metrics_lib.plot_learning_curves(os.path.join(workdir, "metrics.csv"), png, panels=panels)
  return png


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
  """Trains until `num_iterations` or the time budget, evaluates, writes the run's files; host
  code (not jittable). Returns the summary written to `workdir/summary.json`."""
  start = time.time()
  az_config = alphazero_config(config)
  os.makedirs(workdir, exist_ok=True)
  with open(os.path.join(workdir, "config.json"), "w") as f:
    f.write(config.to_json(indent=2))

  if config.num_devices > 1:
    if jax.device_count() < config.num_devices:
      raise ValueError(f"num_devices = {config.num_devices}, but only {jax.device_count()} "
                       "devices are present (on CPU: XLA_FLAGS="
                       "--xla_force_host_platform_device_count=N)")
    mesh = parallel.make_mesh(parallel.MeshConfig(data=config.num_devices),
                              devices=jax.devices()[:config.num_devices])
    learner, step = alphazero.make_data_parallel_iteration(az_config, mesh)
  else:
    learner = alphazero.make_learner(az_config)
    step = jax.jit(learner.iteration, donate_argnums=(0,))
  evaluator = _Evaluator(learner, config, config.eval_simulations)
  final_evaluator = _Evaluator(learner, config, config.final_simulations)
  minimax_names = [f"minimax_{d}" for d in config.eval_minimax_depths
                   if az_config.game == "connect_four"]

  state = learner.init(jax.random.key(config.seed))
  checkpoint_state = {"learner": state, "previous": state.params}
  table = league_lib.EloTable(anchor="random")
  previous_name, train_seconds, iteration = None, 0.0, 0
  checkpointer = checkpoint.Checkpointer(os.path.join(workdir, "checkpoints"), max_to_keep=2)
  restored = checkpointer.restore_latest(target=checkpoint_state)
  if restored is not None:
    checkpoint_state = restored.state
    iteration = restored.step
    table = league_lib.EloTable.from_json(restored.metadata["elo"])
    previous_name = restored.metadata["previous_name"]
    train_seconds = restored.metadata["train_seconds"]
    print(f"resumed from iteration {iteration}", flush=True)
  state, previous = checkpoint_state["learner"], checkpoint_state["previous"]
  writer = metrics_lib.MetricsWriter(workdir, resume_step=iteration if restored else None)
  eval_key = jax.random.key(config.seed + 1)
  budget = 60.0 * config.time_budget_minutes
  print(f"self-play on {az_config.game} ({az_config.model} model): {az_config.num_games} games "
        f"x {az_config.num_moves} moves per iteration, {az_config.search.num_simulations} "
        f"simulations per move", flush=True)

  def evaluate(iteration, state, previous, previous_name):
    """Evaluation games at `iteration`; returns (metrics, new previous params and name)."""
    name = f"iter_{iteration}"
    key = jax.random.fold_in(eval_key, iteration)
    row = {}
    for i, opponent in enumerate(["random"] + minimax_names):
      rates = evaluator.play(state.params, opponent, jax.random.fold_in(key, i),
                             config.eval_games)
      table.record(name, opponent, score=rates["score"], games=config.eval_games)
      row[f"win_rate_{opponent}"] = rates["win"]
    if previous_name is not None:
      rates = evaluator.play(state.params, "self", jax.random.fold_in(key, 99), config.eval_games,
                             opponent_params=previous)
      table.record(name, previous_name, score=rates["score"], games=config.eval_games)
      row["score_vs_previous"] = rates["score"]
    row["elo"] = table.ratings()[name]
    return row, jax.tree.map(np.asarray, state.params), name

  segment_start = time.time()
  last_line = time.time()

  def within_budget():
    return train_seconds + (time.time() - segment_start) < budget

  while iteration < config.num_iterations and within_budget():
    state, iteration_metrics = step(state)
    iteration += 1
    row = {}
    if iteration % config.log_every == 0 or iteration == config.num_iterations:
      row.update({k: float(v) for k, v in jax.device_get(iteration_metrics).items()})
    if iteration % config.eval_every == 0:
      eval_row, previous, previous_name = evaluate(iteration, state, previous, previous_name)
      row.update(eval_row)
      parts = "  ".join(f"{k} {v:.3f}" for k, v in eval_row.items() if k.startswith("win"))
      print(f"  iteration {iteration:>6d}  Elo {eval_row['elo']:7.1f}  {parts}  "
            f"{train_seconds + time.time() - segment_start:7.1f} s", flush=True)
    if row:
      writer.write(iteration, row)
    if iteration % config.log_every == 0 and time.time() - last_line > 30:
      m = jax.device_get(iteration_metrics)
      print(f"  iteration {iteration:>6d}  loss {float(m['loss']):.3f}  game length "
            f"{float(m['game_length']):.1f}  {train_seconds + time.time() - segment_start:7.1f} s",
            flush=True)
      last_line = time.time()
    if iteration % config.checkpoint_every == 0:
      checkpointer.save(iteration, {"learner": state, "previous": previous}, {
          "elo": table.to_json(), "previous_name": previous_name,
          "train_seconds": train_seconds + time.time() - segment_start})
  train_seconds += time.time() - segment_start
  checkpointer.close()

  # The final evaluation: games against random and minimax, and the Elo table.
  final_key = jax.random.fold_in(jax.random.key(config.seed + 2), iteration)
  final = {"random": final_evaluator.play(state.params, "random", final_key,
                                         config.final_random_games)}
  # Its own name in the table: the final games search with `final_simulations`, a stronger player
  # than the same parameters at `eval_simulations`.
  final_name = f"final_{iteration}"
  table.record(final_name, "random", score=final["random"]["score"],
               games=config.final_random_games)
  if az_config.game == "connect_four" and config.final_minimax_games:
    name = f"minimax_{config.final_minimax_depth}"
    final[name] = final_evaluator.play(state.params, name, jax.random.fold_in(final_key, 1),
                                 config.final_minimax_games)
    table.record(final_name, name, score=final[name]["score"],
                 games=config.final_minimax_games)
  ratings = table.ratings()
  for name, rating in ratings.items():
    if name.startswith("iter_"):
      writer.write(int(name[len("iter_"):]), {"elo_final": rating})
  writer.close()
  png = _plot(workdir, minimax_names)
  summary = {
      "game": az_config.game,
      "model": az_config.model,
      "iterations": iteration,
      "games_per_iteration": az_config.num_games,
      "simulations": az_config.search.num_simulations,
      "eval_simulations": config.eval_simulations,
      "final_simulations": config.final_simulations,
      "final": {k: {**v, "games": config.final_random_games if k == "random"
                    else config.final_minimax_games} for k, v in final.items()},
      "elo": dict(sorted(ratings.items(), key=lambda kv: -kv[1])),
      "train_seconds": train_seconds,
      "wall_seconds_this_session": time.time() - start,
      "plot": png,
  }
  with open(os.path.join(workdir, "summary.json"), "w") as f:
    json.dump(summary, f, indent=2)
  return summary
