"""The key-door maze: layout checks, walls and the locked door, a scripted solution, time limit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlagents import envs

KEY = jax.random.key(0)
UP, RIGHT, DOWN, LEFT = range(4)
# The default layout's shortest solution: 5 down to the key, 3 up and 5 right through the door,
# then 2 up, 3 right and 4 down around the right room's inner wall: 5 + 8 + 9 = 22 steps.
SOLUTION = [DOWN] * 5 + [UP] * 3 + [RIGHT] * 5 + [UP] * 2 + [RIGHT] * 3 + [DOWN] * 4


def _run(env, actions, state=None):
  if state is None:
    state, _ = env.reset(KEY)
  step = jax.jit(env.step)
  outputs = []
  for action in actions:
    state, obs, reward, done, info = step(state, jnp.int32(action), KEY)
    outputs.append((obs, float(reward), bool(done), {k: bool(v) for k, v in info.items()}))
  return state, outputs


def test_scripted_shortest_solution_reaches_the_goal():
  env = envs.KeyDoorMaze()
  assert env.shortest_solution() == len(SOLUTION) == 22
  state, outputs = _run(env, SOLUTION)
  rewards = [r for _, r, _, _ in outputs]
  assert rewards == [0.0] * 21 + [1.0]  # sparse: only the last step pays
  assert [d for _, _, d, _ in outputs] == [False] * 21 + [True]
  assert outputs[-1][3] == {"truncated": False, "success": True}
  assert bool(state.has_key) and state.position.tolist() == [5, 9]
  assert outputs[4][0][-1] == 1.0  # the key is held from step 5 on (last obs entry)


def test_walls_and_locked_door_block():
  env = envs.KeyDoorMaze()
  # Start (1, 1): up and left are walls.
  state, _ = _run(env, [UP, LEFT])
  assert state.position.tolist() == [1, 1]
  # Down 2 to row 3, right 4 to the door without the key: stuck in front of it at (3, 4).
  state, _ = _run(env, [DOWN, DOWN] + [RIGHT] * 6)
  assert state.position.tolist() == [3, 4] and not bool(state.has_key)


def test_observation_is_one_hot_position_and_key_flag():
  env = envs.KeyDoorMaze()
  state, obs = env.reset(KEY)
  height, width = env.shape
  assert obs.shape == env.observation_spec().shape == (height * width + 1,)
  assert float(obs.sum()) == 1.0 and float(obs[1 * width + 1]) == 1.0 and float(obs[-1]) == 0.0
  envs.check_environment(env)


def test_truncated_at_the_time_limit():
  env = envs.KeyDoorMaze(max_episode_steps=10)
  _, outputs = _run(env, [UP] * 10)
  assert [d for _, _, d, _ in outputs] == [False] * 9 + [True]
  assert outputs[-1][3] == {"truncated": True, "success": False}


def test_random_start_stays_before_the_door():
  env = envs.KeyDoorMaze(random_start=True)
  cells = env.start_cells()
  assert len(cells) == 23 and np.all(cells[:, 1] <= 4)  # the left room less the key's cell
  _, obs = jax.jit(jax.vmap(env.reset))(jax.random.split(KEY, 200))
  assert len(np.unique(np.argmax(np.asarray(obs[:, :-1]), axis=1))) > 15


def test_random_walk_rarely_succeeds():
  env = envs.wrap_for_training(envs.KeyDoorMaze(), num_envs=512)

  def body(carry, key):
    action_key, step_key = jax.random.split(key)
    state = carry
    action = jax.random.randint(action_key, (512,), 0, 4)
    state, _, _, done, info = env.step(state, action, step_key)
    return state, (done, info["success"])

  def run(key):
    state, _ = env.reset(key)
    return jax.lax.scan(body, state, jax.random.split(key, 400))[1]

  done, success = jax.jit(run)(KEY)
  rate = float(success.sum() / done.sum())
  assert 0.005 < rate < 0.06, rate  # ~2.5%: the sparse signal PPO has to find


@pytest.mark.parametrize("layout, message", [
    (("#####", "#S.G#", "#####"), "exactly one 'K'"),
    (("######", "#SKDG#", "####"), "equal length"),
    (("######", "SKD.G#", "######"), "enclosed by walls"),
    (("######", "#SKDx#", "######"), "exactly one 'G'"),
])
def test_bad_layouts(layout, message):
  with pytest.raises(ValueError, match=message):
    envs.KeyDoorMaze(layout=layout)


def test_bad_action():
  env = envs.KeyDoorMaze()
  state, _ = env.reset(KEY)
  with pytest.raises(ValueError, match=r"outside the action space \[0, 4\)"):
    env.step(state, jnp.int32(4), KEY)
