"""Turn-based games for several players: the functional API, random play and a jitted arena.

A turn-based environment keeps the functional style of `Environment` (`reset(key)`,
`step(state, action, key)`, immutable state, jittable and vmappable) but returns a `Turn` instead
of a single reward: whose move it is, which actions are legal, and a reward for every player:

    state, turn = game.reset(key)
    while not (turn.terminated | turn.truncated):
      action = policy(state, turn, key)           # one of the legal actions of turn.current_player
      state, turn = game.step(state, action, key)
    turn.rewards                      # [num_players], e.g. [+1, -1] at a win of player 0

Rules every game follows: `turn.observation` is seen from `turn.current_player`'s side; `rewards`
are those of the last step (in zero-sum games they sum to 0); stepping a finished game returns it
unchanged with zero rewards; an illegal action ends the game as a loss of the player who played it
(the rule of pgx, so that a jitted loop never needs to raise).

`play_games` runs a batch of whole games between two policies inside one jitted program, each
policy the first player in half of the games; `random_policy` plays uniformly among legal moves.
"""

import abc
from collections.abc import Sequence
from typing import Any, Protocol

import flax.struct
import jax
import jax.numpy as jnp
from jax import lax

from rlagents.envs import _api

State = Any


@flax.struct.dataclass
class Turn:
  """What the players see after `reset` or `step` (a leading batch axis when vmapped).

  Attributes:
    observation: float32, of `observation_spec().shape`, from `current_player`'s side.
    current_player: int32, the player to move (0 .. num_players - 1).
    legal_action_mask: bool `[num_actions]`, the actions `current_player` may play (all True
      once the game is over, so that a softmax over them never divides by zero).
    rewards: float32 `[num_players]`, each player's reward for the last step.
    terminated: bool, the game is over by its rules.
    truncated: bool, the game was cut by a move limit before its end.
  """
  observation: jax.Array
  current_player: jax.Array
  legal_action_mask: jax.Array
  rewards: jax.Array
  terminated: jax.Array
  truncated: jax.Array

  @property
  def done(self) -> jax.Array:
    return self.terminated | self.truncated


class TurnBasedEnvironment(abc.ABC):
  """A pure functional game of `num_players` players taking turns (see the module docstring)."""

  @property
  @abc.abstractmethod
  def num_players(self) -> int:
    """Players in a game."""

  @property
  @abc.abstractmethod
  def max_game_length(self) -> int:
    """An upper bound on the moves of one game (a jitted loop of this length finishes it)."""

  @abc.abstractmethod
  def reset(self, key: jax.Array) -> tuple[State, Turn]:
    """A new game: `(state, turn)`; the first player may depend on `key`."""

  @abc.abstractmethod
  def step(self, state: State, action: jax.Array, key: jax.Array) -> tuple[State, Turn]:
    """`turn.current_player` plays `action`: `(state, turn)` after the move.

    Args:
      state: the state `reset` or the previous `step` returned.
      action: int32 scalar, an action of `action_spec()`.
      key: PRNG key for the game's randomness (unused by deterministic games).
    """

  @abc.abstractmethod
  def observation_spec(self) -> _api.BoxSpec:
    """Shape, dtype and bounds of `turn.observation`."""

  @abc.abstractmethod
  def action_spec(self) -> _api.DiscreteSpec:
    """The actions (`legal_action_mask` has `num_values` entries)."""


def check_turn_based_environment(game: TurnBasedEnvironment) -> None:
  """Traces `reset` and `step` once (no compute) and checks the `Turn` they return.

  Args:
    game: the game to check.

  Raises:
    InvalidEnvironmentError: `reset` or `step` is not jittable, or a field of `Turn` has the wrong
      shape or dtype.
  """
  name = type(game).__name__
  key = jax.random.key(0)
  spec = game.action_spec()
  try:
    state, first = jax.eval_shape(game.reset, key)
    _, turn = jax.eval_shape(game.step, state, jnp.zeros((), spec.dtype), key)
  except jax.errors.JAXTypeError as e:
    raise _api.InvalidEnvironmentError(
        f"{name}.reset/step is not jittable: {str(e).strip().splitlines()[0]}") from e
  expected = {
      "observation": (game.observation_spec().shape, jnp.dtype(game.observation_spec().dtype)),
      "current_player": ((), jnp.dtype(jnp.int32)),
      "legal_action_mask": ((spec.num_values,), jnp.dtype(bool)),
      "rewards": ((game.num_players,), jnp.dtype(jnp.float32)),
      "terminated": ((), jnp.dtype(bool)),
      "truncated": ((), jnp.dtype(bool)),
  }
  for label, value in (("reset", first), ("step", turn)):
    for field, (shape, dtype) in expected.items():
      got = getattr(value, field)
      if got.shape != shape or got.dtype != dtype:
        raise _api.InvalidEnvironmentError(
            f"{name}.{label} returns Turn.{field} {got.shape} {got.dtype}, expected {shape} "
            f"{dtype}.")


class Policy(Protocol):
  """A batched policy: `(states [B], turns [B], key) -> actions [B]` (int32), one legal action
  per game (`turn.current_player`'s)."""

  def __call__(self, state: State, turn: Turn, key: jax.Array) -> jax.Array:
    ...


def random_policy(state: State, turn: Turn, key: jax.Array) -> jax.Array:
  """Uniform over each game's legal actions; a batched `Policy`.

  Args:
    state: the games' states (unused).
    turn: their `Turn`s, fields with a leading `[B]`.
    key: PRNG key.
  """
  del state
  logits = jnp.where(turn.legal_action_mask, 0.0, -jnp.inf)
  return jax.random.categorical(key, logits, axis=-1).astype(jnp.int32)


@flax.struct.dataclass
class MatchResult:
  """The outcome of `play_games`, per game (`[num_games]` arrays).

  Attributes:
    score: the first policy's total reward in each game (+1 win, 0 draw, -1 loss in zero-sum
      games with those rewards).
    first_policy_moved_first: bool, the first policy made the game's first move.
    length: moves played.
    finished: the game ended (terminated or truncated) within `max_game_length` moves.
  """
  score: jax.Array
  first_policy_moved_first: jax.Array
  length: jax.Array
  finished: jax.Array


def play_games(game: TurnBasedEnvironment, policies: Sequence[Policy], key: jax.Array,
               num_games: int) -> MatchResult:
  """Plays `num_games` two-player games of `policies[0]` against `policies[1]`; pure, jittable.

  `policies[0]` moves first in games `[0, num_games // 2)` and second in the others (so each is
  the first player in half the games when `num_games` is even). Both policies are evaluated on
  every game at every move (each game's mover's choice is kept), so the loop is one program.

  Args:
    game: a two-player turn-based environment.
    policies: `(first, second)`, batched `Policy` functions.
    key: PRNG key for the starts, the policies and the game.
    num_games: games in the batch.

  Returns:
    A `MatchResult` of `[num_games]` arrays.
  """
  if game.num_players != 2 or len(policies) != 2:
    raise ValueError(f"play_games needs a two-player game and two policies, got "
                     f"{game.num_players} players and {len(policies)} policies")
  reset_key, loop_key = jax.random.split(key)
  state, turn = jax.vmap(game.reset)(jax.random.split(reset_key, num_games))
  first_half = jnp.arange(num_games) < num_games // 2
  # The player id policies[0] plays: the first mover in the first half, the other one after.
  seat = jnp.where(first_half, turn.current_player, 1 - turn.current_player)

  def not_over(carry):
    _, turn, _, length, _ = carry
    return jnp.any(~turn.done) & (jnp.max(length) < game.max_game_length)

  def body(carry):
    state, turn, score, length, key = carry
    key, key_a, key_b, key_env = jax.random.split(key, 4)
    action = jnp.where(turn.current_player == seat, policies[0](state, turn, key_a),
                       policies[1](state, turn, key_b))
    active = ~turn.done
    state, turn = jax.vmap(game.step)(state, action, jax.random.split(key_env, num_games))
    score = score + jnp.take_along_axis(turn.rewards, seat[:, None], axis=1)[:, 0]
    return state, turn, score, length + active, key

  # A while loop: it stops once every game is over (most end well before max_game_length).
  state, turn, score, length, _ = lax.while_loop(
      not_over, body, (state, turn, jnp.zeros(num_games, jnp.float32),
                       jnp.zeros(num_games, jnp.int32), loop_key))
  return MatchResult(score=score, first_policy_moved_first=first_half, length=length,
                     finished=turn.done)
