r"""Trains PPO or Dreamer on a JAX-native control task (CartPole-v1, the key-door maze), several
seeds at once, data-parallel over every local device.

    python -m experiments.train_control --workdir=/tmp/ppo_cartpole
    python -m experiments.train_control --workdir=/tmp/dreamer_cartpole \
        --config=experiments/configs/control.py:dreamer --config.compare_with=/tmp/ppo_cartpole
    python -m experiments.train_control --workdir=/tmp/ppo_maze \
        --config=experiments/configs/control.py:maze
    python -m experiments.train_control --workdir=/tmp/smoke \
        --config=experiments/configs/control.py:smoke --config.seed=1

The workdir gets `metrics.csv` (one row per metric and iteration, averaged over seeds; step =
real env steps) and TensorBoard events, `learning_curve.png` (with PPO's rolling return beside
ours when `compare_with` names a PPO run's workdir), `summary.json` (final rolling return and
success per seed, times) and `checkpoints/` (the whole state of every seed and device and the
metrics so far, Orbax, every `checkpoint_every` iterations). Run the same command again on the
same workdir and it resumes from the last checkpoint; the result equals an uninterrupted run.

Devices: the update runs under `jax.shard_map` over a `rlagents.parallel` mesh of
`config.num_devices` local devices on the `data` axis (0: all of them): each device steps
`num_envs / devices` environments of every seed and gradients are averaged over the axis.
"""

import os
import sys

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from experiments import _cli
from experiments import control_job
from experiments.configs import control as control_configs
from rlagents import envs

if __name__ == "__main__":
  _cli.exit_on_bad_config(sys.argv, "control.py", control_configs.get_config)

_CONFIG = config_flags.DEFINE_config_file(
    "config", os.path.join(os.path.dirname(__file__), "configs", "control.py"),
    "Experiment config file, optionally with variants after a colon "
    "(experiments/configs/control.py:dreamer,maze,smoke; variants: cartpole, maze; ppo, "
    "dreamer; smoke). Override any field with --config.<field>=<value>, e.g. "
    "--config.ppo.learning_rate=1e-3 --config.num_seeds=1; the ppo fields are documented in "
    "rlagents.learners.ppo.PPOConfig, the dreamer fields in rlagents.learners.dreamer."
    "DreamerConfig.", lock_config=True)
_WORKDIR = flags.DEFINE_string(
    "workdir", "/tmp/ppo_control",
    "Where the run's files go: config.json, metrics.csv, tensorboard/, learning_curve.png, "
    "summary.json, checkpoints/. A workdir with checkpoints is resumed.")


def main(argv):
  del argv
  logging.set_verbosity(logging.ERROR)
  try:
    summary = control_job.train_and_evaluate(_CONFIG.value, _WORKDIR.value)
  except (ValueError, envs.InvalidEnvironmentError) as e:
    sys.exit(f"error: {e}")
  print("final rolling return per seed:",
        " ".join(f"{r:.1f}" for r in summary["final_rolling_return"]))
  if "final_success" in summary:
    print("final success per seed:", " ".join(f"{s:.3f}" for s in summary["final_success"]))
  print("real steps to a rolling return of", summary["target_return"], "per seed:",
        " ".join(str(s) for s in summary["steps_to_target"]))
  print(f"curve: {summary['learning_curve']}  ({summary['wall_seconds']:.1f} s)")


if __name__ == "__main__":
  app.run(main)
