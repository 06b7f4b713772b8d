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


@flax.struct.dataclass
class ProceduralMazeState:
  """The procedural maze's state: the episode's layout and the agent.

  Attributes:
    walls: `[H, W]` bool, walls (the border included; the door cell is not a wall).
    door: `[2]` int32, the door's cell.
    key_cell: `[2]` int32, the key's cell.
    goal: `[2]` int32, the goal's cell.
    position: `[2]` int32, the agent's cell.
    has_key: bool scalar.
    time: int32 scalar, steps taken in this episode.
  """
  walls: jax.Array
  door: jax.Array
  key_cell: jax.Array
  goal: jax.Array
  position: jax.Array
  has_key: jax.Array
  time: jax.Array


def _flood(passable: jax.Array, source: jax.Array) -> jax.Array:
  """`[H, W]` bool: the cells reachable from `source` (a `[H, W]` bool) through `passable`
  (breadth-first, as repeated dilation; H * W rounds bound any path)."""
  height, width = passable.shape

  def grow(_, reached):
    padded = jnp.pad(reached, 1)
    neighbours = (padded[:-2, 1:-1] | padded[2:, 1:-1] | padded[1:-1, :-2] | padded[1:-1, 2:])
    return reached | (neighbours & passable)

  return jax.lax.fori_loop(0, height * width, grow, source & passable)


@dataclasses.dataclass(frozen=True)
class ProceduralKeyDoorMaze(_api.Environment):
  """The key-door task on a new layout every episode, so success means generalisation.

  A layout: a `height` x `width` grid with border walls, a wall across it at a random column
  with the door at a random row, random obstacles (each other cell a wall with probability
  `obstacle_density`), the start and the key on the left of the dividing wall, the goal on the
  right. A layout is kept only if breadth-first search finds the key from the start with the door
  shut and the goal from the key with it open; otherwise it is redrawn (`lax.while_loop`), so
  every episode is solvable by construction.

  Layouts are numbered: layout `i` is drawn from `fold_in(key(layout_seed), i)`. With
  `train_layouts = N`, the 'train' split draws `i` uniformly from `[0, N)` and the 'heldout'
  split from `[N, 2^31)`, so held-out layouts are never trained on; `N = None` ('all') draws
  from the whole range.

  Observation (float32, `5 * height * width + 1`): the wall map, then one-hots of the agent, the
  key (zero once held), the door and the goal, then 1 if the key is held. Actions: 0 up, 1 right,
  2 down, 3 left. Reward 1 on reaching the goal (the episode ends; `info["success"]`), else 0.

  Attributes:
    height: rows, border included (>= 5).
    width: columns, border included (>= 6).
    obstacle_density: probability that a free interior cell is a wall.
    max_episode_steps: truncation limit.
    split: 'train', 'heldout' or 'all'.
    train_layouts: the number of training layouts (needed by the 'train' and 'heldout' splits).
    layout_seed: the seed layouts are numbered from.
  """
  height: int = 9
  width: int = 9
  obstacle_density: float = 0.15
  max_episode_steps: int = 100
  split: str = "all"
  train_layouts: int | None = None
  layout_seed: int = 0

  def __post_init__(self):
    if self.height < 5 or self.width < 6:
      raise ValueError(f"ProceduralKeyDoorMaze needs height >= 5 and width >= 6 (border, two "
                       f"rooms, a wall), got {self.height} x {self.width}")
    if not 0 <= self.obstacle_density <= 0.4:
      raise ValueError(f"ProceduralKeyDoorMaze.obstacle_density must be in [0, 0.4], got "
                       f"{self.obstacle_density}")
    if self.max_episode_steps < 1:
      raise ValueError(f"ProceduralKeyDoorMaze.max_episode_steps must be >= 1, got "
                       f"{self.max_episode_steps}")
    if self.split not in ("train", "heldout", "all"):
      raise ValueError(f"ProceduralKeyDoorMaze.split must be 'train', 'heldout' or 'all', got "
                       f"{self.split!r}")
    if self.split != "all" and (self.train_layouts is None or self.train_layouts < 1):
      raise ValueError(f"ProceduralKeyDoorMaze split {self.split!r} needs train_layouts >= 1, "
                       f"got {self.train_layouts}")

  @property
  def num_cells(self) -> int:
    return self.height * self.width

  def observation_spec(self) -> _api.BoxSpec:
    return _api.BoxSpec(shape=(5 * self.num_cells + 1,), low=0.0, high=1.0)

  def action_spec(self) -> _api.DiscreteSpec:
    return _api.DiscreteSpec(4)

  def layout_index(self, key: jax.Array) -> jax.Array:
    """The number of the layout an episode drawn with `key` uses (see the class docstring)."""
    low, high = 0, 2**31 - 1
    if self.split == "train":
      high = self.train_layouts
    elif self.split == "heldout":
      low = self.train_layouts
    return jax.random.randint(key, (), low, high)

  def _draw_layout(self, key):
    """One candidate layout: `(walls, door, key cell, goal, start)`, not yet checked."""
    h, w = self.height, self.width
    column_key, door_key, obstacle_key, cells_key = jax.random.split(key, 4)
    column = jax.random.randint(column_key, (), 2, w - 2)
    door_row = jax.random.randint(door_key, (), 1, h - 1)
    rows, cols = jnp.meshgrid(jnp.arange(h), jnp.arange(w), indexing="ij")
    border = (rows == 0) | (rows == h - 1) | (cols == 0) | (cols == w - 1)
    divider = (cols == column) & (rows != door_row)
    near_door = (jnp.abs(rows - door_row) + jnp.abs(cols - column)) <= 1
    obstacles = (jax.random.uniform(obstacle_key, (h, w)) < self.obstacle_density) & ~near_door
    walls = border | divider | obstacles
    # Start, key and goal on free cells: start and key on the left, goal on the right.
    free = ~walls
    left, right = free & (cols < column), free & (cols > column)
    start_key, key_key, goal_key = jax.random.split(cells_key, 3)

    def pick(k, mask):
      index = jax.random.categorical(k, jnp.where(mask, 0.0, -jnp.inf).reshape(-1))
      return jnp.stack([index // w, index % w]).astype(jnp.int32)

    start = pick(start_key, left)
    key_cell = pick(key_key, left & ~((rows == start[0]) & (cols == start[1])))
    goal = pick(goal_key, right)
    return walls, jnp.stack([door_row, column]).astype(jnp.int32), key_cell, goal, start

  def _solvable(self, walls, door, key_cell, goal, start) -> jax.Array:
    h, w = self.height, self.width
    cell = lambda c: jnp.zeros((h, w), bool).at[c[0], c[1]].set(True)  # noqa: E731
    shut = ~walls & ~cell(door)
    reach_key = _flood(shut, cell(start))[key_cell[0], key_cell[1]]
    reach_goal = _flood(~walls, cell(key_cell))[goal[0], goal[1]]
    # Both rooms need a free cell: a layout whose pick had none is redrawn.
    return reach_key & reach_goal & ~walls[start[0], start[1]] & ~walls[goal[0], goal[1]] & \
        jnp.any(start != key_cell)

  def reset(self, key):
    return self.reset_to_layout(self.layout_index(key))

  def reset_to_layout(self, index: jax.Array):
    """`(state, obs)` at the start of layout number `index` (the same on every split)."""
    layout_key = jax.random.fold_in(jax.random.key(self.layout_seed), index)

    def redraw(carry):
      attempt, _ = carry
      return attempt + 1, self._draw_layout(jax.random.fold_in(layout_key, attempt + 1))

    def unsolved(carry):
      return ~self._solvable(*carry[1])

    _, (walls, door, key_cell, goal, start) = jax.lax.while_loop(
        unsolved, redraw, (jnp.int32(0), self._draw_layout(jax.random.fold_in(layout_key, 0))))
    state = ProceduralMazeState(walls, door, key_cell, goal, start, jnp.bool_(False),
                                jnp.int32(0))
    return state, self._observe(state)

  def step(self, state, action, key):
    del key  # deterministic
    action = _api.check_action(self.action_spec(), action, "ProceduralKeyDoorMaze")
    target = state.position + jnp.asarray(_MOVES)[action]
    at_door = jnp.all(target == state.door)
    blocked = state.walls[target[0], target[1]] | (at_door & ~state.has_key)
    position = jnp.where(blocked, state.position, target)
    has_key = state.has_key | jnp.all(position == state.key_cell)
    success = jnp.all(position == state.goal)
    time = state.time + 1
    truncated = (time >= self.max_episode_steps) & ~success
    state = state.replace(position=position, has_key=has_key, time=time)
    return (state, self._observe(state), success.astype(jnp.float32), success | truncated,
            {"truncated": truncated, "success": success})

  def _observe(self, state):
    def one_hot(cell):
      return jax.nn.one_hot(cell[0] * self.width + cell[1], self.num_cells, dtype=jnp.float32)
    key_shown = one_hot(state.key_cell) * (~state.has_key).astype(jnp.float32)
    return jnp.concatenate([state.walls.reshape(-1).astype(jnp.float32),
                            one_hot(state.position), key_shown, one_hot(state.door),
                            one_hot(state.goal), state.has_key.astype(jnp.float32)[None]])

  def layout_strings(self, state: ProceduralMazeState) -> tuple[str, ...]:
    """The episode's layout in `KeyDoorMaze`'s characters (host code, for checks and display)."""
    walls = np.asarray(state.walls)
    grid = np.where(walls, "#", ".").astype(object)
    for char, cell in (("D", state.door), ("K", state.key_cell), ("G", state.goal),
                       ("S", state.position)):
      grid[tuple(np.asarray(cell))] = char
    return tuple("".join(row) for row in grid)
