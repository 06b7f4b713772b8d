"""A key-door maze: a long-horizon task whose only reward comes at the very end.

The agent walks a grid (up, right, down, left; walking into a wall is a no-op). A locked door
separates the start from the goal; it opens once the agent has walked over the key, which lies
away from the direct route. Reaching the goal ends the episode with reward 1; every other step
gives 0, and an episode is truncated after `max_episode_steps`. A random walk rarely finishes, so
the task tests exploration and credit assignment over tens of steps (in the spirit of MiniGrid's
DoorKey, Chevalier-Boisvert et al. 2018, with a flat observation an MLP can read).
"""

import dataclasses

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from rlagents.envs import _api

# '#' wall, '.' floor, 'S' start, 'K' key, 'D' door (a wall until the key is held), 'G' goal.
# Shortest solution 22 steps: down the left room to the key, back up to the door, through the
# right room around its inner wall to the goal. A uniform random walk finishes ~2.5% of episodes.
DEFAULT_LAYOUT = (
    "###########",
    "#S...#....#",
    "#....#.##.#",
    "#....D.#..#",
    "#....#.#..#",
    "#....#.#.G#",
    "#K...#.#..#",
    "###########",
)

# up, right, down, left as (row, column) moves
_MOVES = np.array([[-1, 0], [0, 1], [1, 0], [0, -1]], np.int32)


@flax.struct.dataclass
class KeyDoorMazeState:
  """The maze's state.

  Attributes:
    position: `[2]` int32, row and column.
    has_key: bool scalar, the key has been picked up.
    time: int32 scalar, steps taken in this episode.
  """
  position: jax.Array  # [2] int32, row and column
  has_key: jax.Array  # bool
  time: jax.Array  # steps taken in this episode


def _find(layout: tuple[str, ...], char: str) -> list[tuple[int, int]]:
  return [(r, c) for r, row in enumerate(layout) for c, x in enumerate(row) if x == char]


@dataclasses.dataclass(frozen=True)
class KeyDoorMaze(_api.Environment):
  """Fetch the key, pass the door, reach the goal; reward 1 at the goal, 0 elsewhere.

  Observation (float32): a one-hot of the agent's cell over the H x W grid, then 1 if the key is
  held. Actions: 0 up, 1 right, 2 down, 3 left. `info["success"]` is True on the step that reaches
  the goal.

  Attributes:
    layout: rows of equal length; '#' wall, '.' floor, 'S' start, 'K' key, 'D' door, 'G' goal
      (exactly one each of S, K, D, G; the border must be walls).
    max_episode_steps: truncation limit.
    random_start: start on a uniformly drawn floor cell on the start's side of the door instead
      of 'S' (easier exploration).
  """
  layout: tuple[str, ...] = DEFAULT_LAYOUT
  max_episode_steps: int = 200
  random_start: bool = False

  def __post_init__(self):
    object.__setattr__(self, "layout", tuple(self.layout))
    widths = {len(row) for row in self.layout}
    if len(widths) != 1:
      raise ValueError(f"KeyDoorMaze.layout rows must have equal length, got {sorted(widths)}")
    for char in "SKDG":
      if len(_find(self.layout, char)) != 1:
        raise ValueError(f"KeyDoorMaze.layout needs exactly one {char!r}")
    unknown = set("".join(self.layout)) - set("#.SKDG")
    if unknown:
      raise ValueError(f"KeyDoorMaze.layout has unknown characters {sorted(unknown)}")
    grid = np.array([list(row) for row in self.layout])
    if not ((grid[0] == "#").all() and (grid[-1] == "#").all() and (grid[:, 0] == "#").all()
            and (grid[:, -1] == "#").all()):
      raise ValueError("KeyDoorMaze.layout must be enclosed by walls")
    if self.max_episode_steps < 1:
      raise ValueError(f"KeyDoorMaze.max_episode_steps must be >= 1, got {self.max_episode_steps}")

  @property
  def shape(self) -> tuple[int, int]:
    return len(self.layout), len(self.layout[0])

  def _cell(self, char: str) -> np.ndarray:
    return np.array(_find(self.layout, char)[0], np.int32)

  def start_cells(self) -> np.ndarray:
    """`[N, 2]` cells an episode can start on (floor reachable from 'S' without the door)."""
    if not self.random_start:
      return self._cell("S")[None]
    grid = np.array([list(row) for row in self.layout])
    seen, frontier = {tuple(self._cell("S"))}, [tuple(self._cell("S"))]
    while frontier:
      r, c = frontier.pop()
      for dr, dc in _MOVES:
        cell = (r + dr, c + dc)
        if cell not in seen and grid[cell] in ".S":
          seen.add(cell)
          frontier.append(cell)
    return np.array(sorted(seen), np.int32)

  def observation_spec(self) -> _api.BoxSpec:
    height, width = self.shape
    return _api.BoxSpec(shape=(height * width + 1,), low=0.0, high=1.0)

  def action_spec(self) -> _api.DiscreteSpec:
    return _api.DiscreteSpec(4)

  def reset(self, key):
    starts = self.start_cells()
    position = jnp.asarray(starts)[jax.random.randint(key, (), 0, len(starts))]
    state = KeyDoorMazeState(position, jnp.bool_(False), jnp.int32(0))
    return state, self._observe(state)

  def step(self, state, action, key):
    del key  # deterministic
    action = _api.check_action(self.action_spec(), action, "KeyDoorMaze")
    grid = np.array([list(row) for row in self.layout])
    walls = jnp.asarray(grid == "#")
    door = jnp.asarray(self._cell("D"))
    target = state.position + jnp.asarray(_MOVES)[action]
    at_door = jnp.all(target == door)
    blocked = walls[target[0], target[1]] | (at_door & ~state.has_key)
    position = jnp.where(blocked, state.position, target)
    has_key = state.has_key | jnp.all(position == jnp.asarray(self._cell("K")))
    success = jnp.all(position == jnp.asarray(self._cell("G")))
    time = state.time + 1
    truncated = (time >= self.max_episode_steps) & ~success
    state = KeyDoorMazeState(position, has_key, time)
    reward = success.astype(jnp.float32)
    return (state, self._observe(state), reward, success | truncated,
            {"truncated": truncated, "success": success})

  def _observe(self, state):
    height, width = self.shape
    cell = jax.nn.one_hot(state.position[0] * width + state.position[1], height * width,
                          dtype=jnp.float32)
    return jnp.concatenate([cell, state.has_key.astype(jnp.float32)[None]])

  def shortest_solution(self) -> int:
    """Fewest steps from 'S' to the goal by way of the key (breadth-first search, host code)."""
    grid = np.array([list(row) for row in self.layout])

    def distance(source, target, door_open):
      passable = set(".SKG" + ("D" if door_open else ""))
      frontier, seen, steps = [source], {source}, 0
      while frontier:
        if target in frontier:
          return steps
        next_frontier = []
        for r, c in frontier:
          for dr, dc in _MOVES:
            cell = (r + dr, c + dc)
            if cell not in seen and grid[cell] in passable:
              seen.add(cell)
              next_frontier.append(cell)
        frontier, steps = next_frontier, steps + 1
      return None

    start, key, goal = (tuple(self._cell(c)) for c in "SKG")
    to_key, to_goal = distance(start, key, False), distance(key, goal, True)
    return None if to_key is None or to_goal is None else to_key + to_goal
