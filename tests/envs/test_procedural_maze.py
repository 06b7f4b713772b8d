"""The procedural key-door maze: a new solvable layout each episode, disjoint splits, the API."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlagents import envs


def test_every_layout_is_solvable_and_layouts_differ():
  env = envs.ProceduralKeyDoorMaze(height=9, width=9, obstacle_density=0.25)
  envs.check_environment(env)
  states, obs = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.key(0), 100))
  assert obs.shape == (100, 5 * 81 + 1)
  layouts = set()
  for i in range(100):
    state = jax.tree.map(lambda x: x[i], states)
    layout = env.layout_strings(state)
    layouts.add(layout)
    # Host breadth-first search (KeyDoorMaze's) on the same layout: start -> key -> goal.
    steps = envs.KeyDoorMaze(layout=layout).shortest_solution()
    assert steps is not None and steps >= 3, layout
    assert layout[int(state.key_cell[0])][int(state.key_cell[1])] == "K"
  assert len(layouts) > 95  # (almost) every episode a new layout


def test_walking_the_shortest_path_succeeds():
  """Breadth-first search on the host gives moves; the env pays 1 at the goal, only there."""
  env = envs.ProceduralKeyDoorMaze(height=7, width=8)
  state, _ = env.reset(jax.random.key(5))
  layout = env.layout_strings(state)
  moves = _shortest_moves(layout)
  step = jax.jit(env.step)
  for i, action in enumerate(moves):
    state, _, reward, done, info = step(state, jnp.int32(action), jax.random.key(0))
    assert bool(done) == (i == len(moves) - 1) and float(reward) == float(done)
  assert bool(info["success"]) and not bool(info["truncated"])
  assert len(moves) == envs.KeyDoorMaze(layout=layout).shortest_solution()


def _shortest_moves(layout):
  """Moves start -> key -> goal by breadth-first search over (cell, has_key)."""
  grid = np.array([list(r) for r in layout])
  find = lambda c: tuple(np.argwhere(grid == c)[0])  # noqa: E731
  start, key, goal = find("S"), find("K"), find("G")
  deltas = [(-1, 0), (0, 1), (1, 0), (0, -1)]
  frontier, parent = [(start, False)], {(start, False): None}
  while frontier:
    nxt = []
    for cell, has_key in frontier:
      if cell == goal:
        moves, node = [], (cell, has_key)
        while parent[node] is not None:
          node, move = parent[node]
          moves.append(move)
        return moves[::-1]
      for move, (dr, dc) in enumerate(deltas):
        target = (cell[0] + dr, cell[1] + dc)
        char = grid[target]
        if char == "#" or (char == "D" and not has_key):
          continue
        node = (target, has_key or target == key)
        if node not in parent:
          parent[node] = ((cell, has_key), move)
          nxt.append(node)
    frontier = nxt
  raise AssertionError("unsolvable")


def test_train_and_heldout_layouts_are_disjoint():
  train = envs.ProceduralKeyDoorMaze(split="train", train_layouts=50)
  heldout = envs.ProceduralKeyDoorMaze(split="heldout", train_layouts=50)
  keys = jax.random.split(jax.random.key(1), 400)
  train_ids = np.asarray(jax.vmap(train.layout_index)(keys))
  heldout_ids = np.asarray(jax.vmap(heldout.layout_index)(keys))
  assert train_ids.max() < 50 and heldout_ids.min() >= 50
  assert len(set(train_ids)) == 50  # 400 draws cover the 50 training layouts
  # The same layout index gives the same layout whichever split draws it.
  every = envs.ProceduralKeyDoorMaze()
  state, _ = train.reset(keys[0])
  index = int(train.layout_index(keys[0]))
  np.testing.assert_array_equal(state.walls, every.reset_to_layout(jnp.int32(index))[0].walls)


def test_auto_reset_draws_a_new_layout():
  env = envs.AutoReset(envs.ProceduralKeyDoorMaze(max_episode_steps=1))
  state, _ = env.reset(jax.random.key(0))
  walls = state.walls
  state, *_ = jax.jit(env.step)(state, jnp.int32(0), jax.random.key(1))
  assert not np.array_equal(walls, state.walls)


@pytest.mark.parametrize("kwargs, message", [
    ({"height": 4}, "height >= 5"),
    ({"obstacle_density": 0.9}, "obstacle_density"),
    ({"split": "test"}, "split must be"),
    ({"split": "heldout"}, "needs train_layouts"),
])
def test_bad_settings(kwargs, message):
  with pytest.raises(ValueError, match=message):
    envs.ProceduralKeyDoorMaze(**kwargs)
