"""MCTS through mctx over the true game dynamics or a learned (MuZero) model.

mctx (DeepMind 2022, https://github.com/google-deepmind/mctx) runs batched, jitted searches given a
root (prior logits, value, embedding) and a `recurrent_fn(params, key, action, embedding) ->
(RecurrentFnOutput, embedding)`. Two models give those here, for two-player zero-sum games:

- `true_dynamics(game, network)`: the embedding is the game's `(state, Turn)`; a move steps the
  real game, its reward is the mover's, and the discount is -1 when the other player moves next
  (the values flip sides), +1 when the same player moves again, 0 once the game is over (its value
  is then 0). Illegal moves get zero prior probability at every node.
- `learned_dynamics(network)`: MuZero's representation, dynamics and prediction functions; the
  embedding is a latent vector; the discount is always -1 (players alternate), the reward and the
  value are the network's. Only the root knows the legal moves.

Two search algorithms, by `SearchConfig.algorithm`:
- 'gumbel_muzero': Gumbel MuZero (Danihelka et al. 2022, "Policy improvement by planning with
  Gumbel", https://openreview.net/forum?id=bERaNdoegnO): sequential halving over Gumbel-sampled
  actions at the root; its `action_weights` (the improved policy) are the policy target.
- 'alphazero': PUCT with Dirichlet noise at the root (Silver et al. 2018, mctx's
  `muzero_policy`); the visit counts are the policy target.

`search` draws one key per game (`keys [B]`), so a game's search does not depend on the other
games in the batch, nor on how the batch is split across devices.
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import mctx

from rlagents import envs

ALGORITHMS = ("gumbel_muzero", "alphazero")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearchConfig:
  """How a move is searched.

  Attributes:
    algorithm: 'gumbel_muzero' or 'alphazero' (see the module docstring).
    num_simulations: simulations per search (network evaluations of new nodes).
    max_num_considered_actions: Gumbel MuZero's root actions in sequential halving.
    gumbel_scale: scale of the Gumbel noise (0 plays the search's best action, for evaluation).
    dirichlet_alpha: AlphaZero's root noise concentration.
    dirichlet_fraction: AlphaZero's weight of that noise in the root prior (0 for evaluation).
    pb_c_init: AlphaZero's PUCT exploration constant.
    temperature: AlphaZero's visit-count temperature when sampling the move (0 plays the most
      visited).
  """
  algorithm: str = "gumbel_muzero"
  num_simulations: int = 32
  max_num_considered_actions: int = 16
  gumbel_scale: float = 1.0
  dirichlet_alpha: float = 0.3
  dirichlet_fraction: float = 0.25
  pb_c_init: float = 1.25
  temperature: float = 1.0

  def __post_init__(self):
    if self.algorithm not in ALGORITHMS:
      raise ValueError(f"Unknown search algorithm {self.algorithm!r}; valid choices: "
                       f"{', '.join(repr(a) for a in ALGORITHMS)}.")
    if self.num_simulations < 1:
      raise ValueError(f"SearchConfig.num_simulations must be >= 1, got {self.num_simulations}")
    if self.max_num_considered_actions < 1:
      raise ValueError(f"SearchConfig.max_num_considered_actions must be >= 1, got "
                       f"{self.max_num_considered_actions}")
    for name in ("gumbel_scale", "dirichlet_alpha", "temperature"):
      if getattr(self, name) < 0:
        raise ValueError(f"SearchConfig.{name} must be >= 0, got {getattr(self, name)}")
    if not 0 <= self.dirichlet_fraction <= 1:
      raise ValueError(f"SearchConfig.dirichlet_fraction must be in [0, 1], got "
                       f"{self.dirichlet_fraction}")
    if self.pb_c_init <= 0:
      raise ValueError(f"SearchConfig.pb_c_init must be > 0, got {self.pb_c_init}")

  def for_evaluation(self) -> "SearchConfig":
    """The same search without exploration noise, playing its best move."""
    return dataclasses.replace(self, gumbel_scale=0.0, dirichlet_fraction=0.0, temperature=0.0)


@dataclasses.dataclass(frozen=True)
class Model:
  """What a search runs over: `root(params, state, turn) -> mctx.RootFnOutput` (batched) and
  mctx's `recurrent_fn`."""
  root: Callable[[Any, Any, envs.Turn], mctx.RootFnOutput]
  recurrent_fn: Callable[..., tuple[mctx.RecurrentFnOutput, Any]]


def _mask_logits(logits: jax.Array, legal: jax.Array) -> jax.Array:
  logits = logits - jnp.max(logits, axis=-1, keepdims=True)
  return jnp.where(legal, logits, jnp.finfo(logits.dtype).min)


def true_dynamics(game: envs.TurnBasedEnvironment, apply_fn) -> Model:
  """Search over the real game: the embedding is `(state, turn)`.

  Args:
    game: a two-player zero-sum turn-based environment.
    apply_fn: `(params, obs [B, *O]) -> (logits [B, A], value [B])`, e.g. a `PolicyValueNet`'s
      `apply`.
  """
  def root(params, state, turn):
    logits, value = apply_fn(params, turn.observation)
    return mctx.RootFnOutput(prior_logits=_mask_logits(logits, turn.legal_action_mask),
                             value=value, embedding=(state, turn))

  def recurrent_fn(params, key, action, embedding):
    state, turn = embedding
    keys = jax.random.split(key, action.shape[0])
    state, next_turn = jax.vmap(game.step)(state, action, keys)
    reward = jnp.take_along_axis(next_turn.rewards, turn.current_player[:, None], axis=1)[:, 0]
    logits, value = apply_fn(params, next_turn.observation)
    over = next_turn.terminated | next_turn.truncated
    same_mover = next_turn.current_player == turn.current_player
    discount = jnp.where(over, 0.0, jnp.where(same_mover, 1.0, -1.0))
    output = mctx.RecurrentFnOutput(
        reward=reward, discount=discount,
        prior_logits=_mask_logits(logits, next_turn.legal_action_mask),
        value=jnp.where(over, 0.0, value))
    return output, (state, next_turn)

  return Model(root=root, recurrent_fn=recurrent_fn)


def learned_dynamics(network) -> Model:
  """Search over a learned model: `network` is a `MuZeroNet` (its `represent`, `dynamics` and
  `predict` methods); the embedding is the latent."""
  def root(params, state, turn):
    del state
    latent = network.apply(params, turn.observation, method=network.represent)
    logits, value = network.apply(params, latent, method=network.predict)
    return mctx.RootFnOutput(prior_logits=_mask_logits(logits, turn.legal_action_mask),
                             value=value, embedding=latent)

  def recurrent_fn(params, key, action, latent):
    del key
    latent, reward = network.apply(params, latent, action, method=network.dynamics)
    logits, value = network.apply(params, latent, method=network.predict)
    output = mctx.RecurrentFnOutput(reward=reward, discount=-jnp.ones_like(reward),
                                    prior_logits=logits - logits.max(-1, keepdims=True),
                                    value=value)
    return output, latent

  return Model(root=root, recurrent_fn=recurrent_fn)


@flax.struct.dataclass
class SearchOutput:
  """A batch of searches (`[B]` leading axes).

  Attributes:
    action: the move to play.
    action_weights: `[B, A]` the search's policy (the training target).
    root_value: the search's value of the root, from the side of the player to move.
  """
  action: jax.Array
  action_weights: jax.Array
  root_value: jax.Array


def _search_batch(model: Model, config: SearchConfig, params, key, state, turn) -> SearchOutput:
  root = model.root(params, state, turn)
  invalid = ~turn.legal_action_mask
  if config.algorithm == "gumbel_muzero":
    output = mctx.gumbel_muzero_policy(
        params, key, root, model.recurrent_fn, num_simulations=config.num_simulations,
        invalid_actions=invalid, max_num_considered_actions=config.max_num_considered_actions,
        gumbel_scale=config.gumbel_scale)
    action = output.action
  else:
    output = mctx.muzero_policy(
        params, key, root, model.recurrent_fn, num_simulations=config.num_simulations,
        invalid_actions=invalid, dirichlet_alpha=config.dirichlet_alpha,
        dirichlet_fraction=config.dirichlet_fraction, pb_c_init=config.pb_c_init,
        temperature=max(config.temperature, 1e-3))
    action = output.action
    if config.temperature == 0:
      action = jnp.argmax(output.action_weights, axis=-1)
  root_value = output.search_tree.node_values[:, 0]
  return SearchOutput(action=action.astype(jnp.int32), action_weights=output.action_weights,
                      root_value=root_value)


def search(model: Model, config: SearchConfig, params, keys: jax.Array, state,
           turn: envs.Turn) -> SearchOutput:
  """Searches every game of a batch; pure, jittable.

  Args:
    model: from `true_dynamics` or `learned_dynamics`.
    config: the search settings.
    params: the network's parameters.
    keys: `[B]` PRNG keys, one per game.
    state: the games' states (leading axis `[B]`).
    turn: their `Turn`s (leading axis `[B]`).

  Returns:
    A `SearchOutput` of `[B]` leading axes.
  """
  def one(key, state, turn):
    batched = jax.tree.map(lambda x: x[None], (state, turn))
    return jax.tree.map(lambda x: x[0], _search_batch(model, config, params, key, *batched))

  return jax.vmap(one)(keys, state, turn)


def make_search_policy(model: Model, config: SearchConfig, params) -> envs.Policy:
  """A batched `envs.Policy` that plays the move `search` picks (for `envs.play_games`)."""
  def policy(state, turn, key):
    keys = jax.random.split(key, turn.current_player.shape[0])
    return search(model, config, params, keys, state, turn).action

  return policy
