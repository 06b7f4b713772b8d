"""The control job behind `experiments/train_control.py`: PPO or Dreamer on a JAX environment,
several seeds at once, over a `data` mesh of local devices; metrics, plots, checkpoints and
resume. Importable without defining command-line flags (tests and notebooks call it).
"""

import json
import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

from experiments.configs import control as control_configs
from rlagents import checkpoint
from rlagents import envs
from rlagents import metrics as metrics_lib
from rlagents import parallel
from rlagents.learners import dreamer
from rlagents.learners import ppo

def make_learner_config(config: ml_collections.ConfigDict):
  """The learner's validated config: a `PPOConfig` or a `DreamerConfig`."""
  if config.algorithm == "ppo":
    return ppo.PPOConfig(env_name=config.env.name, **config.ppo)
  if config.algorithm == "dreamer":
    return dreamer.DreamerConfig(env_name=config.env.name, **config.dreamer.to_dict())
  raise ValueError(f"unknown algorithm {config.algorithm!r}; valid: "
                   f"{', '.join(repr(a) for a in control_configs.ALGORITHMS)}")


def _iterations(learner_config) -> tuple[int, int]:
  """`(iterations, real steps per iteration)` of a PPO or Dreamer config."""
  if isinstance(learner_config, ppo.PPOConfig):
    return learner_config.num_updates, learner_config.batch_size
  return learner_config.num_iterations, learner_config.steps_per_iteration


def make_device_program(config: ml_collections.ConfigDict, env: envs.Environment,
                        learner_config, num_devices: int):
  """`(init, run_chunk)` compiled for `num_devices` local devices on the mesh's `data` axis.

  `init(keys [seeds]) -> states` and `run_chunk(states) -> (states, metrics [seeds, chunk])`
  (the chunk's length is bound in `run_chunk(length)`). States carry a leading device axis,
  then the seed axis; each device runs the seeds' updates on its share of the environments.
  """
  if config.algorithm == "ppo":
    learner = ppo.make_learner(learner_config, env, axis_name=parallel.AXES[0],
                               num_devices=num_devices)
  else:
    learner = dreamer.make_learner(learner_config, env, axis_name=parallel.AXES[0],
                                   num_devices=num_devices)
  mesh = parallel.make_mesh(parallel.MeshConfig(data=num_devices),
                            devices=jax.local_devices()[:num_devices])

  def per_device(fn, donate=False):
    def body(*args):
      out = fn(*jax.tree.map(lambda x: x[0], args))
      return jax.tree.map(lambda x: x[None], out)
    mapped = jax.shard_map(body, mesh=mesh, in_specs=P(parallel.AXES[0]),
                           out_specs=P(parallel.AXES[0]), check_vma=False)
    return jax.jit(mapped, donate_argnums=(0,) if donate else ())

  init_on_devices = per_device(jax.vmap(learner.init))

  def init(keys):
    # The same seeds' keys on every device: parameters start equal, environments differ.
    return init_on_devices(jnp.stack([keys] * num_devices))

  def run_chunk(length: int):
    def chunk(state):
      return lax.scan(lambda s, _: learner.update(s), state, None, length)
    mapped = per_device(jax.vmap(chunk), donate=True)

    def run(states):
      states, metrics = mapped(states)
      return states, jax.tree.map(lambda x: x[0], metrics)  # reduced: equal on every device
    return run

  return init, run_chunk


def _nanmean(values, axis=None):
  """`np.nanmean` that returns NaN for all-NaN input without a warning (no episode ended yet)."""
  values = np.asarray(values, np.float64)
  count = np.sum(~np.isnan(values), axis=axis)
  total = np.nansum(values, axis=axis)
  return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def _fits(learner_config, n: int) -> bool:
  """Whether `learner_config`'s batch splits evenly over `n` devices."""
  if learner_config.num_envs % n:
    return False
  minibatches = getattr(learner_config, "num_minibatches", 1)
  batch = getattr(learner_config, "batch_size", learner_config.num_envs)
  return (batch // n) % minibatches == 0


def _resolve_devices(requested: int, learner_config) -> int:
  """`requested` local devices, or (0) the most of them the batch splits evenly over."""
  available = jax.local_device_count()
  if requested < 0 or requested > available:
    raise ValueError(f"num_devices = {requested}, but {available} local device(s) are present "
                     f"(0 takes all; on CPU, XLA_FLAGS=--xla_force_host_platform_device_count=N)")
  if requested:
    return requested
  chosen = next(n for n in range(available, 0, -1) if _fits(learner_config, n))
  if chosen < available:
    print(f"num_devices = 0: {chosen} of the {available} local devices, the most that "
          f"num_envs = {learner_config.num_envs} splits evenly over", flush=True)
  return chosen


def _comparison_rows(compare_with: str) -> list[dict[str, Any]]:
  """PPO's (or any run's) rolling return from its workdir, renamed for our plot."""
  path = os.path.join(compare_with, "metrics.csv")
  if not os.path.exists(path):
    raise ValueError(f"compare_with = {compare_with!r} holds no metrics.csv (a finished "
                     f"train_control workdir does)")
  with open(os.path.join(compare_with, "config.json")) as f:
    algorithm = json.load(f).get("algorithm", "ppo")
  return [{**r, "name": f"{algorithm}_rolling_return"}
          for r in metrics_lib.read_csv(path) if r["name"] == "rolling_return"]


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str, *,
                       stop_after_iterations: int | None = None) -> dict[str, Any]:
  """Trains `config.num_seeds` seeds; host code (not jittable). Resumes from `workdir`.

  Args:
    config: the experiment config (experiments/configs/control.py).
    workdir: the run's directory.
    stop_after_iterations: stop (after checkpointing) once this many iterations are done, as a
      pre-empted job would; None runs to the end.

  Returns the summary written to `workdir/summary.json` (None-valued figures when stopped
  early).
  """
  start = time.time()
  os.makedirs(workdir, exist_ok=True)
  env = envs.make(config.env.name, **config.env.kwargs)
  learner_config = make_learner_config(config)
  num_iterations, steps_per_iteration = _iterations(learner_config)
  num_devices = _resolve_devices(config.num_devices, learner_config)
  comparison = _comparison_rows(config.compare_with) if config.compare_with else None
  init, run_chunk = make_device_program(config, env, learner_config, num_devices)
  with open(os.path.join(workdir, "config.json"), "w") as f:
    f.write(config.to_json(indent=2))

  keys = jax.random.split(jax.random.key(config.seed), config.num_seeds)
  state = init(keys)
  # Every chunk the same length, so it compiles once: the largest divisor of the iterations
  # that is <= log_every.
  chunk_size = max(d for d in range(1, config.log_every + 1) if num_iterations % d == 0)
  if config.checkpoint_every < 1:
    raise ValueError(f"checkpoint_every = {config.checkpoint_every} must be >= 1 (iterations "
                     f"between checkpoints)")
  checkpointer = checkpoint.Checkpointer(os.path.join(workdir, "checkpoints"), max_to_keep=2)
  history = None  # dict of [seeds, iterations so far] arrays
  done = 0
  run = run_chunk(chunk_size)
  restored = None
  latest = checkpointer.latest_step()
  if latest is not None:
    # The saved history is `[seeds, latest]` per metric; names and dtypes from the program.
    metric_shapes = jax.eval_shape(run, state)[1]
    target = {"state": state, "history": {
        k: np.zeros((config.num_seeds, latest), v.dtype) for k, v in metric_shapes.items()}}
    restored = checkpointer.restore_latest(target=target)
  if restored is not None:
    state = restored.state["state"]
    history = {k: np.asarray(v) for k, v in restored.state["history"].items()}
    done = int(restored.metadata["iterations"])
    print(f"resumed at iteration {done} ({done * steps_per_iteration:,d} real steps)", flush=True)
  writer = metrics_lib.MetricsWriter(workdir, resume_step=done * steps_per_iteration
                                     if restored is not None else None)
  name = config.algorithm.upper() if config.algorithm == "ppo" else "Dreamer"
  print(f"{name} on {config.env.name}: {config.num_seeds} seeds x {num_iterations} iterations "
        f"x {steps_per_iteration} real steps, {num_devices} device(s)", flush=True)
  while done < num_iterations:
    if stop_after_iterations is not None and done >= stop_after_iterations:
      break
    state, chunk_metrics = run(state)
    chunk_metrics = jax.device_get(chunk_metrics)
    history = chunk_metrics if history is None else {
        k: np.concatenate([history[k], chunk_metrics[k]], axis=-1) for k in history}
    done += chunk_size
    rolling = ppo.rolling_episode_mean(history["episode_return"], history["episodes"],
                                       config.rolling_window)
    for i in range(done - chunk_size, done):
      row = {k: _nanmean(v[:, i]) for k, v in history.items()
             if k != "env_steps" and not np.all(np.isnan(v[:, i]))}
      if not np.all(np.isnan(rolling[:, i])):
        row["rolling_return"] = _nanmean(rolling[:, i])
      writer.write(int(history["env_steps"][0, i]), row)
    steps = int(history["env_steps"][0, done - 1])
    latest = rolling[:, done - 1]
    line = (f"  steps {steps:>9,d}  rolling return {_nanmean(latest):7.2f} (min over seeds "
            f"{np.min(np.nan_to_num(latest, nan=-np.inf)):7.2f})")
    if "episode_success" in history:
      recent = history["episode_success"][:, done - chunk_size:done]
      line += f"  success {_nanmean(recent):.3f}"
    print(line + f"  {time.time() - start:6.1f} s", flush=True)
    # At the end of the chunk that crosses a multiple of checkpoint_every (chunks need not
    # divide it: the chunk is fixed by the iteration count and log_every).
    if (done // config.checkpoint_every > (done - chunk_size) // config.checkpoint_every
        or done == num_iterations):
      checkpointer.save(done, {"state": state, "history": history},
                        {"iterations": done, "env_steps": steps})
  checkpointer.close()
  writer.close()
  if done < num_iterations:
    return {"stopped_at_iteration": done}

  rolling = ppo.rolling_episode_mean(history["episode_return"], history["episodes"],
                                     config.rolling_window)
  csv_path = os.path.join(workdir, "metrics.csv")
  return_panel = ["rolling_return", "episode_return"]
  if comparison:
    csv_path = os.path.join(workdir, "comparison.csv")
    rows = metrics_lib.read_csv(os.path.join(workdir, "metrics.csv")) + comparison
    with open(csv_path, "w") as f:
      f.write("step,name,value\n")
      f.writelines(f"{int(r['step'])},{r['name']},{r['value']:.6g}\n" for r in rows)
    return_panel.append(comparison[0]["name"])
  if config.algorithm == "ppo":
    panels = {"episode return vs real steps (mean over seeds)": return_panel,
              "policy loss and entropy": ["pg_loss", "entropy"],
              "value loss": ["value_loss"],
              "episode length": ["episode_length"]}
  else:
    panels = {"episode return vs real steps (mean over seeds)": return_panel,
              "world model": ["wm_loss", "obs_loss", "reward_loss", "continue_loss", "kl"],
              "imagination": ["imagined_return", "return_scale"],
              "actor and critic": ["actor_loss", "critic_loss", "entropy"]}
  if "episode_success" in history:
    panels["success rate"] = ["episode_success"]
  png = os.path.join(workdir, "learning_curve.png")
  metrics_lib.plot_learning_curves(csv_path, png, panels=panels)

  summary = {
      "algorithm": config.algorithm,
      "env": config.env.name,
      "num_seeds": config.num_seeds,
      "num_devices": num_devices,
      "env_steps_per_seed": steps,
      "final_rolling_return": rolling[:, -1].tolist(),
      "wall_seconds": time.time() - start,
      "learning_curve": png,
  }
  # Real steps at which each seed's rolling return first reached `target_return`, once
  # `rolling_window` episodes have ended (None: never).
  summary["target_return"] = config.target_return
  summary["steps_to_target"] = ppo.steps_to_rolling_target(
      history["episode_return"], history["episodes"], history["env_steps"],
      config.target_return, config.rolling_window)
  # Means over the last `rolling_window` episodes.
  summary["final_episode_length"] = ppo.rolling_episode_mean(
      history["episode_length"], history["episodes"], config.rolling_window)[:, -1].tolist()
  if "episode_success" in history:
    summary["final_success"] = ppo.rolling_episode_mean(
        history["episode_success"], history["episodes"], config.rolling_window)[:, -1].tolist()
  with open(os.path.join(workdir, "summary.json"), "w") as f:
    json.dump(summary, f, indent=2)
  return summary
