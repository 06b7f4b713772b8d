r"""PPO on JAX-native control tasks: CartPole-v1 and the key-door maze.

Run (one core, `taskset -c 1`; times measured on the 2-core dev CPU):

    python -m experiments.train_control --workdir=/tmp/ppo_cartpole
        CartPole-v1, PureJaxRL's settings (4 envs x 128 steps, 500k steps, 4 epochs x 4
        minibatches, 64x64 tanh), 8 seeds vmapped: every seed's rolling mean return (100
        episodes) passes 475 by ~350k steps and ends at 500; about 50 s with compilation.
    python -m experiments.train_control --workdir=/tmp/ppo_maze \
        --config=experiments/configs/control.py:maze
        KeyDoorMaze-v0 (reward only at the goal, 22-step shortest path, 200-step limit), 4 seeds,
        307k steps: success 1.0 on every seed from ~60-100k steps on, ~26 steps per episode (a
        random walk succeeds in ~2.5% of episodes); about 30 s.

Variants, comma-separated after the colon: 'cartpole' (default) or 'maze', plus 'smoke' (~15 s:
20 updates, 2 seeds), e.g. `--config=experiments/configs/control.py:maze,smoke`.
Override any field, e.g. `--config.ppo.learning_rate=1e-3 --config.num_seeds=1`.

Fields: `env.name` and `env.kwargs` (passed to `rlagents.envs.make`); `ppo` (the fields of
`rlagents.learners.ppo.PPOConfig` but `env_name`, documented there; validated when the run
starts); `seed`; `num_seeds` (independent seeds trained together under `vmap`); `log_every` (at
most this many updates per jitted chunk: the largest divisor of the updates, so that one length
compiles; a progress line after each chunk, a CSV row per update); `rolling_window` (episodes
in the rolling means).
"""

import dataclasses

import ml_collections

from experiments import _cli
from rlagents.learners import ppo

ENVS = ("cartpole", "maze")
OPTIONS = ("smoke",)


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  parts = [p for p in (arg or "").split(",") if p]
  unknown = [p for p in parts if p not in ENVS + OPTIONS]
  if unknown:
    hint = _cli.closest(unknown[0], ENVS + OPTIONS)
    raise ValueError(f"unknown config variant(s) {unknown}{hint} (choose one of {ENVS} and "
                     f"optionally {OPTIONS}, comma-separated)")
  env = "maze" if "maze" in parts else "cartpole"
  smoke = "smoke" in parts

  config = ml_collections.ConfigDict()
  config.seed = 0
  config.rolling_window = 100
  values = dataclasses.asdict(ppo.PPOConfig())
  del values["env_name"]  # the run's env is `config.env`
  config.ppo = ml_collections.ConfigDict(values)
  config.env = ml_collections.ConfigDict({"name": "CartPole-v1", "kwargs": {}})
  config.num_seeds = 8
  config.log_every = 64

  if env == "maze":
    config.env.name = "KeyDoorMaze-v0"
    config.env.kwargs = {"max_episode_steps": 200}
    # Advantage normalisation off: in the first, rewardless batches it blows near-zero advantages
    # up into noise that can drive the policy into a corner it never leaves.
    config.ppo.update(num_envs=32, num_steps=64, total_timesteps=150 * 2048, learning_rate=1e-3,
                      entropy_coef=0.005, normalize_advantages=False)
    config.num_seeds = 4
    config.log_every = 10
  if smoke:
    config.ppo.total_timesteps = 20 * config.ppo.num_envs * config.ppo.num_steps
    config.num_seeds = 2
    config.log_every = 10
  return config
