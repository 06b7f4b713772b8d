"""AlphaZero and MuZero self-play for two-player games: one jitted program per iteration.

AlphaZero (Silver et al. 2018, https://www.science.org/doi/10.1126/science.aar6404) with the search
of Gumbel MuZero (Danihelka et al. 2022) by default, as pgx's AlphaZero example does; with
`model='learned'` the search runs over a learned model instead (MuZero, Schrittwieser et al. 2020,
https://arxiv.org/abs/1911.08265) while the games are still played in the real environment.

    learner = make_learner(AlphaZeroConfig())                  # Connect Four
    state = learner.init(jax.random.key(0))
    state, metrics = jax.jit(learner.iteration)(state)         # or make_data_parallel_iteration

One iteration (`AlphaZeroLearner.iteration`), readable top to bottom:
    SELF-PLAY  `num_moves` moves of each of `num_games` game slots (`lax.scan`), a search
               (`rlagents.search`) before every move; a finished game restarts in its slot, and a
               game still running at the end of the window goes on in the next iteration (the
               games in progress are part of the state); every `league_period`-th game is
               played against a past self from the league instead (only the learner's moves
               become training targets there)
    REPLAY     the iteration's block of `[num_moves, num_games]` samples replaces the oldest of
               `replay_iterations` blocks of an on-device buffer
    TARGETS    each move's search policy, and the game's outcome from the mover's side, by a
               reverse scan over the whole buffer in the order the moves were played, so a game
               that ends in this iteration also gives its moves of earlier iterations their
               outcome; moves of games still running have no outcome yet and are not trained
    UPDATE     `updates_per_iteration` Adam steps on minibatches drawn uniformly from the buffer:
               policy cross-entropy + value MSE (+ reward MSE over `unroll_steps` for MuZero)
    LEAGUE     every `league_add_every` iterations the parameters join the league (a ring of
               `league_size` past selves); league opponents are drawn by prioritised fictitious
               self-play (weight (1 - p)^2, p the learner's score rate against that opponent, a
               running mean of the league games) or the most recent one ('recent')

Data parallelism: the iteration is written once with an `axis_name`; `rlagents.parallel`'s
`shard_map_update` maps it over a mesh with the games' keys as the batch, so each device plays its
share of the games, the samples are gathered into a replay buffer every device holds whole, each
device computes the gradient of its slice of every (shared) minibatch and the gradients are
averaged. Every game's randomness comes from its own key, and the minibatches from the shared key,
so one device and eight devices compute the same iteration.
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import optax
from jax import lax

from rlagents import envs
from rlagents import parallel
from rlagents import search as search_lib

Metrics = dict[str, jax.Array]
MODELS = ("true", "learned")
OPPONENT_SAMPLING = ("pfsp", "recent")


@dataclasses.dataclass(frozen=True, kw_only=True)
class AlphaZeroConfig:
  """Self-play settings; the defaults train Connect Four.

  Attributes:
    game: a pgx game id (`rlagents.envs.GAMES`).
    model: 'true' (search over the real game: AlphaZero) or 'learned' (over a MuZero model).
    search: how each move is searched (`rlagents.search.SearchConfig`).
    num_games: games played side by side in self-play (the batch, split across devices).
    num_moves: moves per game slot per iteration; a game that ends restarts in its slot, one
      still running goes on in the next iteration. Its moves are trained once it ends, if
      they are still in the buffer then (`replay_iterations * num_moves` moves per slot).
    replay_iterations: the buffer holds the samples of this many iterations.
    batch_size: samples per minibatch.
    updates_per_iteration: optimizer steps per iteration.
    learning_rate: Adam's step size (the peak, when it decays).
    lr_decay_iterations: 0 keeps the step size constant; n > 0 decays it along a cosine to
      `final_lr_fraction * learning_rate` over the updates of n iterations, then holds it.
      Self-play against a moving target oscillates at a constant step size; the decay lets the
      last iterations settle.
    final_lr_fraction: the step size after the decay, as a fraction of `learning_rate`.
    weight_decay: AdamW's decoupled weight decay.
    max_grad_norm: global-norm gradient clip.
    value_coef: weight of the value loss (and of the reward loss for 'learned').
    reward_coef: a further factor on the learned model's reward loss ('learned'): its targets
      are sparse (in Connect Four only a game's last move has a reward), so at weight 1 the
      reward head gets a small share of the gradient.
    hidden_sizes: widths of the networks' dense layers.
    torso: 'mlp' or 'conv' (`rlagents.search.PolicyValueNet`).
    channels: convolution channels of the conv torso.
    latent_size: the learned model's latent width ('learned').
    unroll_steps: moves the learned model is unrolled in training ('learned').
    consistency_coef: weight of the learned model's consistency loss ('learned'; 0 turns it
      off): at each unrolled step k the dynamics' latent is pulled towards the representation of
      the real observation k moves later (held fixed), by the negative cosine similarity of the
      centred latents, averaged over the steps where the game still runs (as EfficientZero's
      temporal consistency, Ye et al. 2021, without its projection heads). Reward and value
      alone supervise the dynamics sparsely; this gives it a target at every step.
    league_size: past selves kept as opponents; 0 turns the league off.
    league_period: every `league_period`-th game of a device's games is a league game (> 1).
    league_add_every: iterations between additions to the league.
    opponent_sampling: 'pfsp' or 'recent'.
    mirror: Connect Four only: every other sample of a minibatch is mirrored left to right
      (the board, the policy's columns, the unrolled moves), a symmetry of the game, so the
      network learns both sides of each position.
  """
  game: str = "connect_four"
  model: str = "true"
  search: search_lib.SearchConfig = search_lib.SearchConfig()
  num_games: int = 256
  num_moves: int = 42
  replay_iterations: int = 4
  batch_size: int = 512
  updates_per_iteration: int = 32
  learning_rate: float = 1e-3
  lr_decay_iterations: int = 0
  final_lr_fraction: float = 0.1
  weight_decay: float = 1e-4
  max_grad_norm: float = 1.0
  value_coef: float = 1.0
  reward_coef: float = 1.0
  hidden_sizes: tuple[int, ...] = (128, 128)
  torso: str = "mlp"
  channels: int = 32
  latent_size: int = 128
  unroll_steps: int = 5
  consistency_coef: float = 0.0
  league_size: int = 8
  league_period: int = 4
  league_add_every: int = 10
  opponent_sampling: str = "pfsp"
  mirror: bool = False

  def __post_init__(self):
    object.__setattr__(self, "hidden_sizes", tuple(self.hidden_sizes))
    if isinstance(self.search, dict):
      object.__setattr__(self, "search", search_lib.SearchConfig(**self.search))
    if self.game not in envs.GAMES:
      raise ValueError(f"Unknown game {self.game!r}; valid choices: {envs.GAMES}.")
    if self.model not in MODELS:
      raise ValueError(f"AlphaZeroConfig.model must be one of {MODELS}, got {self.model!r}")
    if self.mirror and self.game != "connect_four":
      raise ValueError(f"AlphaZeroConfig.mirror is a Connect Four symmetry; game is "
                       f"{self.game!r}")
    if self.opponent_sampling not in OPPONENT_SAMPLING:
      raise ValueError(f"AlphaZeroConfig.opponent_sampling must be one of {OPPONENT_SAMPLING}, "
                       f"got {self.opponent_sampling!r}")
    if self.torso not in search_lib.TORSOS:
      raise ValueError(f"AlphaZeroConfig.torso must be one of {search_lib.TORSOS}, got "
                       f"{self.torso!r}")
    for name in ("num_games", "num_moves", "replay_iterations", "batch_size",
                 "updates_per_iteration", "latent_size", "unroll_steps", "league_add_every"):
      if getattr(self, name) < 1:
        raise ValueError(f"AlphaZeroConfig.{name} must be >= 1, got {getattr(self, name)}")
    if self.league_size < 0:
      raise ValueError(f"AlphaZeroConfig.league_size must be >= 0, got {self.league_size}")
    if self.league_size and self.league_period < 2:
      raise ValueError(f"AlphaZeroConfig.league_period must be >= 2 (every n-th game is a "
                       f"league game), got {self.league_period}")
    if self.league_size and self.num_games % self.league_period:
      raise ValueError(f"AlphaZeroConfig.num_games = {self.num_games} is not divisible by "
                       f"league_period = {self.league_period}")
    if self.lr_decay_iterations < 0:
      raise ValueError(f"AlphaZeroConfig.lr_decay_iterations must be >= 0 (0: constant), got "
                       f"{self.lr_decay_iterations}")
    if not 0 <= self.final_lr_fraction <= 1:
      raise ValueError(f"AlphaZeroConfig.final_lr_fraction must be in [0, 1], got "
                       f"{self.final_lr_fraction}")
    for name in ("learning_rate", "max_grad_norm"):
      if getattr(self, name) <= 0:
        raise ValueError(f"AlphaZeroConfig.{name} must be > 0, got {getattr(self, name)}")
    for name in ("weight_decay", "value_coef", "reward_coef", "consistency_coef"):
      if getattr(self, name) < 0:
        raise ValueError(f"AlphaZeroConfig.{name} must be >= 0, got {getattr(self, name)}")
    if not self.hidden_sizes or min(self.hidden_sizes) < 1:
      raise ValueError(f"AlphaZeroConfig.hidden_sizes must be positive widths, got "
                       f"{self.hidden_sizes}")


def learning_rate_schedule(config: AlphaZeroConfig) -> float | optax.Schedule:
  """The step size by update: the constant `learning_rate`, or its cosine decay over
  `lr_decay_iterations * updates_per_iteration` updates.

  Args:
    config: the self-play settings (`learning_rate`, `lr_decay_iterations`,
      `final_lr_fraction`, `updates_per_iteration`).

  Returns:
    A float (constant) or an optax schedule of the update count.
  """
  if not config.lr_decay_iterations:
    return config.learning_rate
  return optax.cosine_decay_schedule(
      config.learning_rate, config.lr_decay_iterations * config.updates_per_iteration,
      alpha=config.final_lr_fraction)


@flax.struct.dataclass
class Replay:
  """The on-device buffer: `replay_iterations` blocks of `[num_moves, num_games]` samples.

  Attributes:
    obs: `[C, T, B, *O]` the observation before each move.
    policy: `[C, T, B, A]` the search's policy there.
    value: `[C, T, B]` the game's outcome from the mover's side.
    action: `[C, T, B]` the move played.
    reward: `[C, T, B]` the mover's reward for it.
    game_end: `[C, T, B]` the move ended its game.
    finished: `[C, T, B]` the game of the move has ended (its value is known).
    learner_move: `[C, T, B]` the learner made the move (not a league opponent).
    mover: `[C, T, B]` the player who made the move.
    filled: `[C]` the block holds samples.
  """
  obs: jax.Array
  policy: jax.Array
  value: jax.Array
  action: jax.Array
  reward: jax.Array
  game_end: jax.Array
  finished: jax.Array
  learner_move: jax.Array
  mover: jax.Array
  filled: jax.Array


@flax.struct.dataclass
class Games:
  """The self-play games in progress, one per slot; an iteration goes on from where the last one
  stopped.

  Attributes:
    state: `[G]` the games' states.
    turn: `[G]` their `envs.Turn`s.
    learner_seat: `[G]` int32, the learner's player in a league game.
    length: `[G]` int32, moves played in the game so far.
    first_mover: `[G]` int32, the player who moved first in it.
  """
  state: Any
  turn: envs.Turn
  learner_seat: jax.Array
  length: jax.Array
  first_mover: jax.Array


@flax.struct.dataclass
class League:
  """Past selves: a ring of `league_size` parameter snapshots.

  Attributes:
    params: the snapshots, stacked on a leading `[K]` axis.
    filled: `[K]` the slot holds a snapshot.
    added_at: `[K]` the iteration each snapshot was taken.
    score_rate: `[K]` running mean of the learner's score rate (win 1, draw 0.5) against it.
    next_slot: int32, the slot the next snapshot goes to.
  """
  params: Any
  filled: jax.Array
  added_at: jax.Array
  score_rate: jax.Array
  next_slot: jax.Array


@flax.struct.dataclass
class AlphaZeroState:
  """Everything an iteration reads and writes; a pytree, so it jits and checkpoints.

  Attributes:
    params: the network's parameters.
    opt_state: the optimizer's state.
    replay: the on-device replay buffer.
    games: the `num_games` self-play games in progress.
    league: past selves (None when `league_size` is 0).
    key: uint32 key data of the next iteration's randomness.
    iteration: int32, iterations done.
  """
  params: Any
  opt_state: Any
  replay: Replay
  games: Games
  league: League | None
  key: jax.Array
  iteration: jax.Array


@dataclasses.dataclass(frozen=True)
class AlphaZeroLearner:
  """The learner's pure functions and the objects they close over.

  Attributes:
    config: the settings.
    game: the turn-based game.
    network: a `PolicyValueNet` ('true') or `MuZeroNet` ('learned').
    model: what the search runs over (`rlagents.search.Model`).
    optimizer: clip_by_global_norm then AdamW.
    init: `key -> AlphaZeroState`.
    self_play: `(params, game_keys [G, 2] uint32) -> samples`, the SELF-PLAY part of an
      iteration without league games, from new games started with `game_keys`, with the
      outcome targets of the games that end in the window: a dict of `[num_moves, G, ...]`
      arrays (obs, policy, value, finished, ...).
    iteration: `(state, game_keys=None) -> (state, metrics)`; see the module
      docstring. `game_keys` (`[num_games, 2]` uint32, this device's share under a device map)
      default to keys drawn from the state.
  """
  config: AlphaZeroConfig
  game: envs.TurnBasedEnvironment
  network: Any
  model: search_lib.Model
  optimizer: optax.GradientTransformation
  init: Callable[[jax.Array], AlphaZeroState]
  self_play: Callable[[Any, jax.Array], dict[str, jax.Array]]
  iteration: Callable[..., tuple[AlphaZeroState, Metrics]]

  def game_keys(self, state: AlphaZeroState) -> jax.Array:
    """`[num_games, 2]` uint32: the keys of the iteration's games, drawn from `state.key`."""
    key = jax.random.fold_in(jax.random.wrap_key_data(state.key), 1)
    return jax.random.key_data(jax.random.split(key, self.config.num_games))

  def search_policy(self, params, search_config: search_lib.SearchConfig | None = None):
    """An `envs.Policy` that plays by search with `params` (the evaluation search by default)."""
    config = search_config or self.config.search.for_evaluation()
    return search_lib.make_search_policy(self.model, config, params)


def _select(condition, on_true, on_false):
  """`where` over two pytrees, `condition` `[B]` broadcast over each leaf's trailing axes."""
  def pick(a, b):
    return jnp.where(condition.reshape(condition.shape + (1,) * (a.ndim - 1)), a, b)
  return jax.tree.map(pick, on_true, on_false)


def _outcome_targets(reward, game_end, same_mover_next):
  """Per move: the mover's return to the end of its game, and whether the game ended in the
  window. All `[T, B]`; a reverse scan over time."""
  def back(carry, x):
    value_next, finished_next = carry
    r, end, same = x
    value = r + jnp.where(end, 0.0, jnp.where(same, 1.0, -1.0)) * value_next
    finished = end | finished_next
    return (value, finished), (value, finished)

  b = reward.shape[1]
  init = (jnp.zeros(b, jnp.float32), jnp.zeros(b, bool))
  _, (value, finished) = lax.scan(back, init, (reward, game_end, same_mover_next), reverse=True)
  return value, finished


def make_learner(config: AlphaZeroConfig, *, axis_name=None,
                 num_devices: int = 1) -> AlphaZeroLearner:
  """Builds the self-play learner's `init` and `iteration`.

  With `axis_name`, `iteration` runs on one of `num_devices` devices mapped over that axis (use
  `make_data_parallel_iteration`): it plays `num_games / num_devices` games.

  The metrics of an iteration (scalars): 'games' (finished in self-play), 'game_length', 'score'
  (mean final reward of the first player; ~0 when both sides are alike), 'policy_entropy' (of
  the search policy), 'root_value', 'loss', 'policy_loss', 'value_loss' (and 'reward_loss' for
  'learned', 'consistency_loss' when its coefficient is > 0), 'grad_norm', 'replay_samples'
  (trainable samples in the buffer), and with a league 'league_score' (the learner's score rate
  in this iteration's league games, NaN if none ended), 'league_opponent' (its slot) and
  'league_members'.

  Args:
    config: the settings.
    axis_name: the device axis (or axes) to reduce over, or None on one device.
    num_devices: devices mapped over `axis_name`.

  Raises:
    ValueError: the games do not split evenly across `num_devices`, or the batch does not.
  """
  if axis_name is None and num_devices != 1:
    raise ValueError(f"num_devices = {num_devices} needs an axis_name to reduce over")
  if config.num_games % num_devices:
    raise ValueError(f"AlphaZeroConfig.num_games = {config.num_games} is not divisible by the "
                     f"{num_devices} devices")
  if config.batch_size % num_devices:
    raise ValueError(f"AlphaZeroConfig.batch_size = {config.batch_size} is not divisible by the "
                     f"{num_devices} devices")
  local_games = config.num_games // num_devices
  if config.league_size and local_games % config.league_period:
    raise ValueError(f"each of the {num_devices} devices plays {local_games} games, not "
                     f"divisible by league_period = {config.league_period}")
  game = envs.make_game(config.game)
  num_actions = game.action_spec().num_values
  obs_shape = game.observation_spec().shape
  if config.model == "true":
    network = search_lib.PolicyValueNet(
        num_actions=num_actions, obs_ndim=len(obs_shape), hidden_sizes=config.hidden_sizes,
        torso=config.torso, channels=config.channels)
    model = search_lib.true_dynamics(game, network.apply)
  else:
    network = search_lib.MuZeroNet(
        num_actions=num_actions, obs_ndim=len(obs_shape), latent_size=config.latent_size,
        hidden_sizes=config.hidden_sizes, torso=config.torso, channels=config.channels)
    model = search_lib.learned_dynamics(network)
  optimizer = optax.chain(
      optax.clip_by_global_norm(config.max_grad_norm),
      optax.adamw(learning_rate_schedule(config), weight_decay=config.weight_decay))
  use_league = config.league_size > 0
  capacity = config.replay_iterations
  moves, num_games = config.num_moves, config.num_games
  local_batch = config.batch_size // num_devices

  def gather_games(x):
    """This device's `[T, local_games, ...]` samples -> all games' `[T, num_games, ...]`."""
    return x if axis_name is None else lax.all_gather(x, axis_name, axis=1, tiled=True)

  def psum(x):
    return x if axis_name is None else lax.psum(x, axis_name)

  def new_games(game_keys) -> Games:
    """Games at their first move, one per key (`[G, 2]` uint32); the learner's seat drawn."""
    keys = jax.vmap(lambda k: jax.random.split(jax.random.wrap_key_data(k)))(game_keys)
    state, turn = jax.vmap(game.reset)(keys[:, 0])
    learner_seat = jax.vmap(jax.random.bernoulli)(keys[:, 1]).astype(jnp.int32)
    return Games(state=state, turn=turn, learner_seat=learner_seat,
                 length=jnp.zeros(game_keys.shape[0], jnp.int32), first_mover=turn.current_player)

  def init(key: jax.Array) -> AlphaZeroState:
    network_key, games_key, key = jax.random.split(key, 3)
    params = network.init(network_key, jnp.zeros((1, *obs_shape), jnp.float32))
    zeros = lambda *shape, dtype=jnp.float32: jnp.zeros((capacity, moves, num_games, *shape),
                                                        dtype)
    replay = Replay(obs=zeros(*obs_shape), policy=zeros(num_actions), value=zeros(),
                    action=zeros(dtype=jnp.int32), reward=zeros(), game_end=zeros(dtype=bool),
                    finished=zeros(dtype=bool), learner_move=zeros(dtype=bool),
                    mover=zeros(dtype=jnp.int32), filled=jnp.zeros(capacity, bool))
    games = new_games(jax.random.key_data(jax.random.split(games_key, num_games)))
    # Copies: the turn shares arrays with the game's state, and two leaves of one buffer
    # cannot both be donated to a jitted iteration.
    games = jax.tree.map(lambda x: jnp.array(x, copy=True), games)
    league = None
    if use_league:
      league = League(
          params=jax.tree.map(lambda x: jnp.zeros((config.league_size, *x.shape), x.dtype),
                              params),
          filled=jnp.zeros(config.league_size, bool),
          added_at=jnp.zeros(config.league_size, jnp.int32),
          score_rate=jnp.full(config.league_size, 0.5, jnp.float32),
          next_slot=jnp.int32(0))
    return AlphaZeroState(params=params, opt_state=optimizer.init(params), replay=replay,
                          games=games, league=league, key=jax.random.key_data(key),
                          iteration=jnp.int32(0))

  def pick_opponent(league: League, key):
    """A league slot: by PFSP weight or the newest; -1 when the league is empty."""
    if config.opponent_sampling == "recent":
      newest = jnp.argmax(jnp.where(league.filled, league.added_at, -1))
      return jnp.where(league.filled.any(), newest, -1)
    weights = jnp.where(league.filled, jnp.square(1.0 - league.score_rate) + 1e-3, 0.0)
    slot = jax.random.categorical(key, jnp.log(weights))
    return jnp.where(league.filled.any(), slot, -1)

  # SELF-PLAY
  def self_play(params, opponent_params, league_game, games: Games, game_keys):
    """`num_moves` moves of this device's games from `games`, the randomness of each from its
    key; returns `[T, G]` samples (without outcome targets) and the games in progress."""
    g = game_keys.shape[0]
    keys = jax.vmap(jax.random.wrap_key_data)(game_keys)

    def move(carry, t):
      state, turn, learner_seat, length, first_mover = carry
      step_keys = jax.vmap(lambda k: jax.random.split(jax.random.fold_in(k, t), 4))(keys)
      searched = search_lib.search(model, config.search, params, step_keys[:, 0], state, turn)
      learner_move = jnp.ones(g, bool)
      action = searched.action
      if use_league:
        # Only the league games (every league_period-th) are searched for the opponent.
        pick = lambda x: x[config.league_period - 1::config.league_period]
        opponent = search_lib.search(model, config.search, opponent_params, pick(step_keys[:, 1]),
                                     jax.tree.map(pick, state), jax.tree.map(pick, turn))
        opponent_action = jnp.zeros(g, jnp.int32).at[config.league_period - 1::
                                                     config.league_period].set(opponent.action)
        learner_move = ~league_game | (turn.current_player == learner_seat)
        action = jnp.where(learner_move, action, opponent_action)
      next_state, next_turn = jax.vmap(game.step)(state, action, step_keys[:, 2])
      mover = turn.current_player
      reward = jnp.take_along_axis(next_turn.rewards, mover[:, None], axis=1)[:, 0]
      game_end = next_turn.done
      sample = dict(obs=turn.observation, policy=searched.action_weights, action=action,
                    reward=reward, game_end=game_end, learner_move=learner_move, mover=mover,
                    root_value=searched.root_value,
                    learner_score=jnp.where(mover == learner_seat, reward, -reward),
                    first_player_reward=jnp.where(
                        game_end, jnp.take_along_axis(next_turn.rewards, first_mover[:, None],
                                                      axis=1)[:, 0], 0.0),
                    game_length=jnp.where(game_end, length + 1, 0))
      # A finished game restarts in its slot, with a new seat for the learner.
      reset_keys = jax.vmap(lambda k: jax.random.fold_in(k, 1))(step_keys[:, 3])
      fresh_state, fresh_turn = jax.vmap(game.reset)(reset_keys)
      next_state, next_turn = _select(game_end, (fresh_state, fresh_turn),
                                      (next_state, next_turn))
      new_seat = jax.vmap(lambda k: jax.random.bernoulli(jax.random.fold_in(k, 2)))(
          step_keys[:, 3]).astype(jnp.int32)
      learner_seat = jnp.where(game_end, new_seat, learner_seat)
      length = jnp.where(game_end, 0, length + 1)
      first_mover = jnp.where(game_end, next_turn.current_player, first_mover)
      return (next_state, next_turn, learner_seat, length, first_mover), sample

    carry, samples = lax.scan(move, (games.state, games.turn, games.learner_seat, games.length,
                                     games.first_mover), jnp.arange(moves))
    return samples, Games(*carry)

  def targets(reward, game_end, mover):
    """Outcome targets of `[T, B]` moves played in that order: (value, finished)."""
    same_mover_next = jnp.concatenate(
        [mover[1:] == mover[:-1], jnp.zeros((1,) + mover.shape[1:], bool)])
    return _outcome_targets(reward, game_end, same_mover_next)

  # UPDATE
  def az_loss(params, batch):
    logits, value = network.apply(params, batch["obs"])
    policy_loss = optax.softmax_cross_entropy(logits, batch["policy"]).mean()
    value_loss = jnp.square(value - batch["value"]).mean()
    loss = policy_loss + config.value_coef * value_loss
    return loss, {"loss": loss, "policy_loss": policy_loss, "value_loss": value_loss}

  def centred_cosine(a, b):
    a = a - a.mean(-1, keepdims=True)
    b = b - b.mean(-1, keepdims=True)
    return (a * b).sum(-1) * lax.rsqrt(
        jnp.maximum((a * a).sum(-1) * (b * b).sum(-1), 1e-12))

  def muzero_loss(params, batch):
    latent = network.apply(params, batch["obs"], method=network.represent)
    use_consistency = config.consistency_coef > 0
    if use_consistency:
      # The representation of the real observations k moves later, held fixed: [M, K, L].
      targets = lax.stop_gradient(
          network.apply(params, batch["next_obs"], method=network.represent))
    total_policy, total_value, total_reward, total_consistency = 0.0, 0.0, 0.0, 0.0
    for k in range(config.unroll_steps + 1):
      logits, value = network.apply(params, latent, method=network.predict)
      ce = optax.softmax_cross_entropy(logits, batch["policy"][:, k])
      total_policy += (ce * batch["policy_mask"][:, k]).sum() / jnp.maximum(
          batch["policy_mask"][:, k].sum(), 1.0)
      total_value += (jnp.square(value - batch["value"][:, k]) * batch["value_mask"][:, k]).sum() \
          / jnp.maximum(batch["value_mask"][:, k].sum(), 1.0)
      if k < config.unroll_steps:
        latent, reward = network.apply(params, latent, batch["action"][:, k],
                                       method=network.dynamics)
        total_reward += (jnp.square(reward - batch["reward"][:, k]) * batch["reward_mask"][:, k]
                         ).sum() / jnp.maximum(batch["reward_mask"][:, k].sum(), 1.0)
        if use_consistency:
          mask = batch["next_mask"][:, k]
          total_consistency += -(centred_cosine(latent, targets[:, k]) * mask).sum() \
              / jnp.maximum(mask.sum(), 1.0)
        # MuZero halves the gradient flowing back through the dynamics at every step.
        latent = 0.5 * latent + 0.5 * lax.stop_gradient(latent)
    scale = 1.0 / (config.unroll_steps + 1)
    policy_loss, value_loss = total_policy * scale, total_value * scale
    reward_loss = total_reward / config.unroll_steps
    loss = policy_loss + config.value_coef * (value_loss + config.reward_coef * reward_loss)
    metrics = {"policy_loss": policy_loss, "value_loss": value_loss, "reward_loss": reward_loss}
    if use_consistency:
      consistency_loss = total_consistency / config.unroll_steps
      loss = loss + config.consistency_coef * consistency_loss
      metrics["consistency_loss"] = consistency_loss
    return loss, {"loss": loss, **metrics}

  def gather_batch(replay: Replay, flat_index):
    """The samples at `flat_index` into `[C * T * B]` (with their unrolls for 'learned')."""
    block, rest = jnp.divmod(flat_index, moves * num_games)
    t, b = jnp.divmod(rest, num_games)
    if config.model == "true":
      return {"obs": replay.obs[block, t, b], "policy": replay.policy[block, t, b],
              "value": replay.value[block, t, b]}
    k = jnp.arange(config.unroll_steps + 1)
    tk = t[:, None] + k                                        # [M, K + 1]
    in_window = tk < moves
    tk_c = jnp.minimum(tk, moves - 1)
    at = lambda x: x[block[:, None], tk_c, b[:, None]]
    ends = at(replay.game_end) & in_window
    # Moves before step k that ended the game: from then on the state is absorbing.
    ended_before = jnp.cumsum(ends, axis=1) - ends > 0
    alive = in_window & ~ended_before
    batch = {
        "obs": replay.obs[block, t, b],
        "policy": at(replay.policy),
        "policy_mask": (alive & at(replay.learner_move)).astype(jnp.float32),
        "value": jnp.where(alive, at(replay.value), 0.0),
        "value_mask": ((alive & at(replay.finished)) | ended_before).astype(jnp.float32),
        "action": at(replay.action)[:, :-1],
        "reward": jnp.where(alive, at(replay.reward), 0.0)[:, :-1],
        "reward_mask": (alive | ended_before).astype(jnp.float32)[:, :-1],
    }
    if config.consistency_coef > 0:
      # The real observation after each unrolled move, where its game still runs.
      batch["next_obs"] = at(replay.obs)[:, 1:]
      batch["next_mask"] = alive[:, 1:].astype(jnp.float32)
    return batch

  loss_fn = az_loss if config.model == "true" else muzero_loss

  def mirror_odd(batch, position):
    """Mirrors the Connect Four samples at odd minibatch `position`s ([M]) left to right."""
    odd = position % 2 == 1
    flips = {"obs": lambda x: x[..., ::-1, :], "next_obs": lambda x: x[..., ::-1, :],
             "policy": lambda x: x[..., ::-1],
             "action": lambda x: num_actions - 1 - x}
    return {name: _select(odd, flips[name](x), x) if name in flips else x
            for name, x in batch.items()}

  def train_step(carry, batch):
    params, opt_state = carry
    grads, metrics = jax.grad(loss_fn, has_aux=True)(params, batch)
    if axis_name is not None:
      grads, metrics = lax.pmean((grads, metrics), axis_name)
    metrics["grad_norm"] = optax.global_norm(grads)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return (optax.apply_updates(params, updates), opt_state), metrics

  def iteration(state: AlphaZeroState, game_keys=None) -> tuple[AlphaZeroState, Metrics]:
    if game_keys is None:
      if axis_name is not None:
        raise ValueError("under a device map, pass each device's game keys")
      game_keys = learner.game_keys(state)
    key = jax.random.wrap_key_data(state.key)
    next_key, league_key, sample_key = jax.random.split(jax.random.fold_in(key, 0), 3)
    g = game_keys.shape[0]
    metrics = {}

    opponent_params, league_game, slot = state.params, jnp.zeros(g, bool), jnp.int32(-1)
    if use_league:
      slot = pick_opponent(state.league, league_key)
      member = jax.tree.map(lambda x: x[jnp.maximum(slot, 0)], state.league.params)
      opponent_params = jax.tree.map(lambda m, p: jnp.where(slot >= 0, m, p), member,
                                     state.params)
      league_game = (jnp.arange(g) % config.league_period) == config.league_period - 1
    games = state.games
    if axis_name is not None:
      # This device's share of the games in progress.
      first = lax.axis_index(axis_name) * local_games
      games = jax.tree.map(lambda x: lax.dynamic_slice_in_dim(x, first, local_games), games)
    samples, games = self_play(state.params, opponent_params, league_game, games, game_keys)
    if axis_name is not None:
      games = jax.tree.map(lambda x: lax.all_gather(x, axis_name, tiled=True), games)

    # Statistics of this device's games, summed over devices.
    ends = samples["game_end"]
    ended = psum(ends.sum())
    metrics["games"] = ended
    metrics["game_length"] = psum(samples["game_length"].sum()) / jnp.maximum(ended, 1)
    metrics["score"] = psum(samples["first_player_reward"].sum()) / jnp.maximum(ended, 1)
    policy = samples["policy"]
    entropy = -(policy * jnp.log(jnp.maximum(policy, 1e-12))).sum(-1)
    metrics["policy_entropy"] = psum(entropy.sum()) / (moves * num_games)
    metrics["root_value"] = psum(jnp.abs(samples["root_value"]).sum()) / (moves * num_games)

    league = state.league
    if use_league:
      in_league = ends & league_game[None]
      league_games = psum(in_league.sum())
      # Score rate: win 1, draw 0.5, loss 0.
      score = psum(jnp.where(in_league, 0.5 + 0.5 * samples["learner_score"], 0.0).sum())
      rate = score / jnp.maximum(league_games, 1)
      metrics["league_score"] = jnp.where(league_games > 0, rate, jnp.nan)
      metrics["league_opponent"] = slot
      seen = (slot >= 0) & (league_games > 0)
      updated = 0.8 * league.score_rate[jnp.maximum(slot, 0)] + 0.2 * rate
      league = league.replace(score_rate=jnp.where(
          seen, league.score_rate.at[jnp.maximum(slot, 0)].set(updated), league.score_rate))

    # REPLAY
    block = state.iteration % capacity
    replay = state.replay
    new_block = {name: gather_games(samples[name]) for name in
                 ("obs", "policy", "action", "reward", "game_end", "learner_move", "mover")}
    replay = replay.replace(**{name: getattr(replay, name).at[block].set(value)
                               for name, value in new_block.items()},
                            filled=replay.filled.at[block].set(True))

    # TARGETS over the whole buffer, oldest block first: the games carry on across blocks.
    order = (block + 1 + jnp.arange(capacity)) % capacity
    played = lambda x: x[order].reshape(capacity * moves, num_games)
    value, finished = targets(played(replay.reward), played(replay.game_end),
                              played(replay.mover))
    unplayed = lambda x: jnp.zeros((capacity, moves, num_games), x.dtype).at[order].set(
        x.reshape(capacity, moves, num_games))
    replay = replay.replace(value=unplayed(value), finished=unplayed(finished))
    weight = (replay.filled[:, None, None] & replay.finished & replay.learner_move).reshape(-1)
    if config.model == "learned":
      # Unrolls also train on moves whose game did not end in the window (reward, dynamics).
      weight = (replay.filled[:, None, None] & replay.learner_move).reshape(-1)
    metrics["replay_samples"] = weight.sum()

    # UPDATE: every device draws the same minibatches and takes its slice of each.
    cumulative = jnp.cumsum(weight.astype(jnp.float32))
    draws = jax.random.uniform(sample_key, (config.updates_per_iteration, config.batch_size),
                               maxval=cumulative[-1])
    index = jnp.minimum(jnp.searchsorted(cumulative, draws, side="right"), weight.shape[0] - 1)
    if axis_name is not None:
      index = lax.dynamic_slice_in_dim(index, lax.axis_index(axis_name) * local_batch,
                                       local_batch, axis=1)
    batches = jax.vmap(lambda i: gather_batch(replay, i))(index)
    if config.mirror:
      position = jnp.arange(local_batch)
      if axis_name is not None:
        position = position + lax.axis_index(axis_name) * local_batch
      batches = jax.vmap(lambda batch: mirror_odd(batch, position))(batches)
    (params, opt_state), loss_metrics = lax.scan(train_step, (state.params, state.opt_state),
                                                 batches)
    # No trainable sample yet (no game ended in any window: `num_moves` shorter than the games):
    # the update is skipped and its loss metrics are NaN.
    trainable = cumulative[-1] > 0
    params, opt_state = jax.tree.map(lambda new, old: jnp.where(trainable, new, old),
                                     (params, opt_state), (state.params, state.opt_state))
    metrics.update(jax.tree.map(lambda x: jnp.where(trainable, jnp.mean(x), jnp.nan),
                                loss_metrics))

    # LEAGUE
    iteration_done = state.iteration + 1
    if use_league:
      add = iteration_done % config.league_add_every == 0
      slot_in = league.next_slot
      league = league.replace(
          params=jax.tree.map(lambda stack, p: jnp.where(add, stack.at[slot_in].set(p), stack),
                              league.params, params),
          filled=jnp.where(add, league.filled.at[slot_in].set(True), league.filled),
          added_at=jnp.where(add, league.added_at.at[slot_in].set(iteration_done),
                             league.added_at),
          score_rate=jnp.where(add, league.score_rate.at[slot_in].set(0.5), league.score_rate),
          next_slot=jnp.where(add, (slot_in + 1) % config.league_size, slot_in))
      metrics["league_members"] = league.filled.sum()

    state = AlphaZeroState(params=params, opt_state=opt_state, replay=replay, games=games,
                           league=league, key=jax.random.key_data(next_key),
                           iteration=iteration_done)
    return state, metrics

  def self_play_only(params, game_keys):
    keys = jax.vmap(lambda k: jax.random.split(jax.random.wrap_key_data(k)))(game_keys)
    samples, _ = self_play(params, params, jnp.zeros(game_keys.shape[0], bool),
                           new_games(jax.random.key_data(keys[:, 0])),
                           jax.random.key_data(keys[:, 1]))
    samples["value"], samples["finished"] = targets(samples["reward"], samples["game_end"],
                                                    samples["mover"])
    return samples

  learner = AlphaZeroLearner(config=config, game=game, network=network, model=model,
                             optimizer=optimizer, init=init, self_play=self_play_only,
                             iteration=iteration)
  return learner


def make_data_parallel_iteration(config: AlphaZeroConfig, mesh):
  """`(learner, step)`: `step(state) -> (state, metrics)`, one iteration over `mesh`'s devices.

  Built on `rlagents.parallel.shard_map_update`: the state is replicated, the games' keys are
  the batch split over the ('data', 'fsdp') axes. Jitted; the same result as
  `jax.jit(learner.iteration)` on one device (see the module docstring).

  Args:
    config: the settings (`num_games` and `batch_size` divisible by the device count).
    mesh: from `rlagents.parallel.make_mesh`.
  """
  num_devices = parallel.num_batch_shards(mesh)
  learner = make_learner(config, axis_name=parallel.AXES, num_devices=num_devices)

  def update(state, game_keys, axis_name=None):
    del axis_name  # the learner was built with the mesh's axes
    return learner.iteration(state, game_keys)

  sharded = parallel.shard_map_update(update, mesh, min_size=2**62)

  @jax.jit
  def step(state):
    return sharded(state, learner.game_keys(state))

  return learner, step


def evaluate(learner: AlphaZeroLearner, params, opponent: envs.Policy, key: jax.Array,
             num_games: int, *, search_config: search_lib.SearchConfig | None = None
             ) -> envs.MatchResult:
  """Plays the learner (search with `params`, no exploration) against `opponent`; jittable.

  The learner moves first in half the games. Returns `envs.play_games`'s result, from the
  learner's side.

  Args:
    learner: from `make_learner`.
    params: the learner's network parameters.
    opponent: a batched `envs.Policy`.
    key: PRNG key.
    num_games: games to play.
    search_config: the learner's search; None uses its training search without noise.
  """
  return envs.play_games(learner.game, [learner.search_policy(params, search_config), opponent],
                         key, num_games)
