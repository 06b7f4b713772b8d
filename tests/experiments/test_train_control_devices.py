"""train_control: its update runs over a `data` mesh of local devices; 1 vs 8 devices; resume."""

import json

import jax
import numpy as np
import pytest

from experiments import control_job
from experiments.configs import control as control_configs
from rlagents import checkpoint
from rlagents import envs
from rlagents.learners import ppo


def _dreamer_config():
  config = control_configs.get_config("dreamer,smoke")
  config.dreamer.update(num_envs=8, collect_steps=8, total_timesteps=192, learning_starts=128,
                        batch_size=8, seq_len=4, horizon=3, hidden_size=16, mlp_layers=1)
  config.dreamer.world_model.update(deter_size=16, num_latents=4, num_classes=4, hidden_size=16,
                                    num_bins=31)
  config.num_seeds = 2
  config.log_every = 3
  config.checkpoint_every = 3
  return config


def _run(config, num_devices, iterations):
  env = envs.make(config.env.name)
  learner_config = control_job.make_learner_config(config)
  init, run_chunk = control_job.make_device_program(config, env, learner_config, num_devices)
  state = init(jax.random.split(jax.random.key(0), config.num_seeds))
  return run_chunk(iterations)(state)


@pytest.mark.slow  # two compiles of the device program, minutes on a loaded 2-core CPU
def test_dreamer_one_and_eight_devices_give_equal_parameters():
  assert jax.local_device_count() >= 8
  config = _dreamer_config()
  one, metrics_one = _run(config, 1, 3)
  eight, metrics_eight = _run(config, 8, 3)
  for a, b in zip(jax.tree.leaves(one.model_params) + jax.tree.leaves(one.actor_params),
                  jax.tree.leaves(eight.model_params) + jax.tree.leaves(eight.actor_params)):
    assert b.shape == (8, *a.shape[1:])  # [devices, seeds, ...]
    for device in range(8):
      np.testing.assert_allclose(b[device], a[0], rtol=2e-4, atol=2e-5)
  np.testing.assert_allclose(metrics_eight["wm_loss"], metrics_one["wm_loss"], rtol=2e-4)
  assert not np.allclose(one.model_params["params"]["decoder"]["Dense_0"]["kernel"][0, 0],
                         one.model_params["params"]["decoder"]["Dense_0"]["kernel"][0, 1])


@pytest.mark.slow
def test_ppo_on_eight_devices_equals_the_pmap_reference():
  """PPO over the mesh computes what `ppo.make_data_parallel_train` (pmap) does.

  PPO's devices each draw their own environment keys and shuffle their own share of a
  minibatch, so unlike Dreamer's its result depends on the device count; on a given count the
  shard_map path equals the pmap one, and every device holds the same parameters.
  """
  config = control_configs.get_config("smoke")
  config.ppo.update(num_envs=8, num_steps=16, num_minibatches=2, total_timesteps=8 * 16 * 3)
  config.num_seeds = 1
  eight, metrics = _run(config, 8, 3)
  reference, reference_metrics = ppo.make_data_parallel_train(
      control_job.make_learner_config(config), num_devices=8)(
          jax.random.split(jax.random.key(0), 1)[0])
  for a, b in zip(jax.tree.leaves(eight.params), jax.tree.leaves(reference.params)):
    for device in range(8):
      np.testing.assert_allclose(a[device, 0], b[0], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(metrics["loss"][0], reference_metrics["loss"], rtol=1e-5)


def test_too_many_devices_is_an_error():
  config = _dreamer_config()
  config.num_devices = 64
  with pytest.raises(ValueError, match="local device"):
    control_job.train_and_evaluate(config, "/tmp/unused")


@pytest.mark.slow
def test_resume_equals_the_uninterrupted_run(tmp_path):
  config = _dreamer_config()
  config.dreamer.total_timesteps = 64 * 6
  config.num_devices = 2
  whole = control_job.train_and_evaluate(config, str(tmp_path / "whole"))
  stopped = control_job.train_and_evaluate(config, str(tmp_path / "resumed"),
                                             stop_after_iterations=3)
  assert stopped == {"stopped_at_iteration": 3}
  resumed = control_job.train_and_evaluate(config, str(tmp_path / "resumed"))
  assert resumed["final_rolling_return"] == whole["final_rolling_return"]
  rows = {}
  for name in ("whole", "resumed"):
    with open(tmp_path / name / "metrics.csv") as f:
      rows[name] = f.read()
  assert rows["whole"] == rows["resumed"]
  with open(tmp_path / "resumed" / "summary.json") as f:
    assert json.load(f)["env_steps_per_seed"] == 384


def test_checkpoints_when_the_chunk_does_not_divide_checkpoint_every(tmp_path):
  """The chunk is fixed by the iteration count and log_every (CartPole's default: 976
  iterations, chunks of 61, checkpoints every 512); a checkpoint lands at the end of each chunk
  that crosses a multiple of checkpoint_every, and at the end."""
  config = control_configs.get_config("smoke")
  config.ppo.update(num_envs=4, num_steps=8, total_timesteps=4 * 8 * 20)
  config.num_seeds = 1
  config.log_every = 4  # chunks of 4 of the 20 iterations
  config.checkpoint_every = 6
  stopped = control_job.train_and_evaluate(config, str(tmp_path), stop_after_iterations=9)
  assert stopped == {"stopped_at_iteration": 12}
  saved = checkpoint.Checkpointer(str(tmp_path / "checkpoints"))
  assert saved.all_steps() == [8, 12]  # 8 crosses 6, 12 reaches 12
  saved.close()
  summary = control_job.train_and_evaluate(config, str(tmp_path))
  assert summary["env_steps_per_seed"] == 4 * 8 * 20
  saved = checkpoint.Checkpointer(str(tmp_path / "checkpoints"))
  assert saved.latest_step() == 20
  saved.close()
