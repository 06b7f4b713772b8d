r"""Trains PPO on a JAX-native control task (CartPole-v1, the key-door maze), several seeds at once.

    python -m experiments.train_control --workdir=/tmp/ppo_cartpole
    python -m experiments.train_control --workdir=/tmp/ppo_maze \
        --config=experiments/configs/control.py:maze
    python -m experiments.train_control --workdir=/tmp/smoke \
        --config=experiments/configs/control.py:smoke --config.seed=1

The workdir gets `metrics.csv` (one row per metric and update, averaged over seeds; step = env
steps) and TensorBoard events, `learning_curve.png`, `summary.json` (final rolling return and
success per seed, times) and `checkpoints/` (the final `PPOState` of every seed, Orbax).
"""

import json
import os
import sys
import time
from typing import Any

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags
import jax
import ml_collections
import numpy as np
from jax import lax

from experiments import _cli
from experiments.configs import control as control_configs
from rlagents import checkpoint
from rlagents import envs
from rlagents import metrics as metrics_lib
from rlagents.learners import ppo

if __name__ == "__main__":
  _cli.exit_on_bad_config(sys.argv, "control.py", control_configs.get_config)

_CONFIG = config_flags.DEFINE_config_file(
    "config", os.path.join(os.path.dirname(__file__), "configs", "control.py"),
    "Experiment config file, optionally with variants after a colon "
    "(experiments/configs/control.py:maze,smoke; variants: cartpole, maze, smoke). Override any "
    "field with --config.<field>=<value>, e.g. --config.ppo.learning_rate=1e-3 "
    "--config.num_seeds=1; the ppo fields are documented in rlagents.learners.ppo.PPOConfig.",
    lock_config=True)
_WORKDIR = flags.DEFINE_string(
    "workdir", "/tmp/ppo_control",
    "Where the run's files go: config.json, metrics.csv, tensorboard/, learning_curve.png, "
    "summary.json, checkpoints/.")


def _chunk_fn(learner: ppo.PPOLearner, num_updates: int):
  """Jitted `states -> (states, metrics [seeds, num_updates])` for vmapped seeds."""
  def chunk(state):
    return lax.scan(lambda s, _: learner.update(s), state, None, num_updates)
  return jax.jit(jax.vmap(chunk), donate_argnums=(0,))


def _nanmean(values, axis=None):
  """`np.nanmean` that returns NaN for all-NaN input without a warning (no episode ended yet)."""
  values = np.asarray(values, np.float64)
  count = np.sum(~np.isnan(values), axis=axis)
  total = np.nansum(values, axis=axis)
  return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
  """Trains `config.num_seeds` seeds to `config.ppo.total_timesteps`; host code (not jittable).

  Returns the summary written to `workdir/summary.json`.
  """
  start = time.time()
  os.makedirs(workdir, exist_ok=True)
  env = envs.make(config.env.name, **config.env.kwargs)
  ppo_config = ppo.PPOConfig(env_name=config.env.name, **config.ppo)
  learner = ppo.make_learner(ppo_config, env)
  with open(os.path.join(workdir, "config.json"), "w") as f:
    f.write(config.to_json(indent=2))

  keys = jax.random.split(jax.random.key(config.seed), config.num_seeds)
  state = jax.jit(jax.vmap(learner.init))(keys)
  writer = metrics_lib.MetricsWriter(workdir)
  # Every chunk the same length, so it compiles once: the largest divisor of the updates that
  # is <= log_every.
  chunk_size = max(d for d in range(1, config.log_every + 1) if ppo_config.num_updates % d == 0)
  run_chunk = _chunk_fn(learner, chunk_size)
  history = []  # per chunk: dict of [seeds, updates] arrays
  done_updates = 0
  print(f"PPO on {config.env.name}: {config.num_seeds} seeds x {ppo_config.num_updates} updates "
        f"x {ppo_config.batch_size} steps", flush=True)
  while done_updates < ppo_config.num_updates:
    state, chunk_metrics = run_chunk(state)
    history.append(jax.device_get(chunk_metrics))
    done_updates += chunk_size

    merged = {k: np.concatenate([h[k] for h in history], axis=-1) for k in history[0]}
    rolling = ppo.rolling_episode_mean(merged["episode_return"], merged["episodes"],
                                         config.rolling_window)
    for i in range(done_updates - chunk_size, done_updates):
      row = {k: _nanmean(v[:, i]) for k, v in merged.items()
             if k != "env_steps" and not np.all(np.isnan(v[:, i]))}
      if not np.all(np.isnan(rolling[:, i])):
        row["rolling_return"] = _nanmean(rolling[:, i])
      writer.write(int(merged["env_steps"][0, i]), row)
    steps = int(merged["env_steps"][0, done_updates - 1])
    latest = rolling[:, done_updates - 1]
    line = (f"  steps {steps:>9,d}  rolling return {_nanmean(latest):7.2f} (min over seeds "
            f"{np.min(np.nan_to_num(latest, nan=-np.inf)):7.2f})")
    if "episode_success" in merged:
      recent = merged["episode_success"][:, done_updates - chunk_size:done_updates]
      line += f"  success {_nanmean(recent):.3f}"
    print(line + f"  {time.time() - start:6.1f} s", flush=True)
  writer.close()

  merged = {k: np.concatenate([h[k] for h in history], axis=-1) for k in history[0]}
  rolling = ppo.rolling_episode_mean(merged["episode_return"], merged["episodes"],
                                       config.rolling_window)
  checkpointer = checkpoint.Checkpointer(os.path.join(workdir, "checkpoints"), max_to_keep=1)
  checkpointer.save(ppo_config.num_updates, state, {"env_steps": steps})
  checkpointer.close()

  panels = {"episode return (mean over seeds)": ["rolling_return", "episode_return"],
            "policy loss and entropy": ["pg_loss", "entropy"],
            "value loss": ["value_loss"],
            "episode length": ["episode_length"]}
  if "episode_success" in merged:
    panels["success rate"] = ["episode_success"]
  png = os.path.join(workdir, "learning_curve.png")
  metrics_lib.plot_learning_curves(os.path.join(workdir, "metrics.csv"), png, panels=panels)

  summary = {
      "env": config.env.name,
      "num_seeds": config.num_seeds,
      "env_steps_per_seed": steps,
      "final_rolling_return": rolling[:, -1].tolist(),
      "wall_seconds": time.time() - start,
      "learning_curve": png,
  }
  # Means over the last `rolling_window` episodes.
  summary["final_episode_length"] = ppo.rolling_episode_mean(
      merged["episode_length"], merged["episodes"], config.rolling_window)[:, -1].tolist()
  if "episode_success" in merged:
    summary["final_success"] = ppo.rolling_episode_mean(
        merged["episode_success"], merged["episodes"], config.rolling_window)[:, -1].tolist()
  with open(os.path.join(workdir, "summary.json"), "w") as f:
    json.dump(summary, f, indent=2)
  return summary


def main(argv):
  del argv
  logging.set_verbosity(logging.ERROR)
  try:
    summary = train_and_evaluate(_CONFIG.value, _WORKDIR.value)
  except (ValueError, envs.InvalidEnvironmentError) as e:
    sys.exit(f"error: {e}")
  print("final rolling return per seed:",
        " ".join(f"{r:.1f}" for r in summary["final_rolling_return"]))
  if "final_success" in summary:
    print("final success per seed:", " ".join(f"{s:.3f}" for s in summary["final_success"]))
  print(f"curve: {summary['learning_curve']}  ({summary['wall_seconds']:.1f} s)")


if __name__ == "__main__":
  app.run(main)
