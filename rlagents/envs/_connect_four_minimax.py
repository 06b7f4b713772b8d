"""A depth-limited minimax opponent for Connect Four, jitted and batched.

The value of a position is the negamax value of the tree `depth` moves (plies) deep: a win scores
`WIN + plies left` (a faster win scores more), a full board 0, and a position at the horizon the
window heuristic below, from the side to move. That is the value and the move alpha-beta search
returns at the same depth; here the whole tree is expanded (7^depth leaves, 2,401 at depth 4) as
one batched XLA program, which on a batch of boards is cheaper than branching on pruning.
Ties between equally valued moves are broken at random.

Heuristic (the usual one for Connect Four): over the 69 lines of four cells, a line holding only
the mover's discs scores 1, 4 or 16 for 1, 2 or 3 discs, the opponent's lines the same with a
minus sign, and every disc in the centre column scores 2 for its owner.

Boards are pgx observations, `[6, 7, 2]` with row 0 at the top: channel 0 the discs of the
player to move, channel 1 the opponent's.
"""

import jax
import jax.numpy as jnp
import numpy as np

ROWS, COLUMNS = 6, 7
WIN = 1_000_000.0
_LINE_SCORES = np.array([0.0, 1.0, 4.0, 16.0, 0.0], np.float32)  # by discs in a one-sided line
_CENTRE_SCORE = 2.0


def _lines() -> np.ndarray:
  """The 69 lines of four cells, as flat indices `row * 7 + column`."""
  lines = []
  for row in range(ROWS):
    for col in range(COLUMNS):
      for d_row, d_col in ((0, 1), (1, 0), (1, 1), (1, -1)):
        cells = [(row + k * d_row, col + k * d_col) for k in range(4)]
        if all(0 <= r < ROWS and 0 <= c < COLUMNS for r, c in cells):
          lines.append([r * COLUMNS + c for r, c in cells])
  return np.array(lines, np.int32)


LINES = _lines()


def _heuristic(mine: jax.Array, theirs: jax.Array) -> jax.Array:
  """The window score of a position for the side to move; `mine`, `theirs` bool `[42]`."""
  m = mine[LINES].sum(-1)
  t = theirs[LINES].sum(-1)
  scores = jnp.asarray(_LINE_SCORES)
  lines = jnp.where(t == 0, scores[m], 0.0) - jnp.where(m == 0, scores[t], 0.0)
  centre = mine.reshape(ROWS, COLUMNS)[:, 3].sum() - theirs.reshape(ROWS, COLUMNS)[:, 3].sum()
  return lines.sum() + _CENTRE_SCORE * centre


def _has_four(discs: jax.Array) -> jax.Array:
  return discs[LINES].all(-1).any()


def _negamax(mine: jax.Array, theirs: jax.Array, depth: int) -> jax.Array:
  """The values of the 7 moves for the side to move (-inf where the column is full)."""
  filled = (mine | theirs).reshape(ROWS, COLUMNS).sum(0)

  def move_value(column):
    legal = filled[column] < ROWS
    cell = (ROWS - 1 - filled[column]) * COLUMNS + column
    after = mine.at[cell].set(legal)
    won = _has_four(after)
    board_full = (after | theirs).all()
    if depth == 1:
      value = _heuristic(after, theirs)
    else:
      value = -jnp.max(_negamax(theirs, after, depth - 1))
    value = jnp.where(won, WIN + depth, jnp.where(board_full, 0.0, value))
    return jnp.where(legal, value, -jnp.inf)

  return jax.vmap(move_value)(jnp.arange(COLUMNS))


def minimax_values(observation: jax.Array, depth: int) -> jax.Array:
  """`[7]` negamax values of each move for the player to move (-inf for full columns).

  Args:
    observation: a pgx Connect Four observation `[6, 7, 2]` (bool or 0/1 floats), unbatched.
    depth: plies searched, >= 1 (the move itself is the first).
  """
  if depth < 1:
    raise ValueError(f"minimax depth must be >= 1, got {depth}")
  if observation.shape != (ROWS, COLUMNS, 2):
    raise ValueError(f"a Connect Four observation is (6, 7, 2), got {observation.shape}")
  board = observation.astype(bool).reshape(ROWS * COLUMNS, 2)
  return _negamax(board[:, 0], board[:, 1], depth)


def make_minimax_policy(depth: int):
  """A batched `Policy` for `envs.play_games`: the best move by `minimax_values`, ties at random.

  Args:
    depth: plies searched (4 searches every sequence of 4 moves).
  """
  if depth < 1:
    raise ValueError(f"minimax depth must be >= 1, got {depth}")

  def policy(state, turn, key):
    del state
    values = jax.vmap(lambda obs: minimax_values(obs, depth))(turn.observation)
    best = values >= values.max(-1, keepdims=True)
    noise = jax.random.uniform(key, values.shape)
    # Finished games (no legal move) have all -inf values; any action will do there.
    return jnp.argmax(jnp.where(best, noise, -1.0), axis=-1).astype(jnp.int32)

  return policy
