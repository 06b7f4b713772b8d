"""Two processes on localhost through jax.distributed run GRPO steps together (fsdp across the
processes, equal to one process's steps on the whole batch); and the multi-host settings are
read, or refused, as documented."""

import functools
import glob
import importlib.util
import json
import os
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest

from rlagents import learners
from rlagents import parallel
from rlagents.learners import grpo

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _free_port():
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def test_two_processes_fsdp_grpo_equals_one_process(tmp_path):
  # launch/multiprocess_local.sh: 2 processes x 2 CPU devices, gloo collectives, the mesh all on
  # 'fsdp' so parameters and optimizer state are split across the processes.
  env = {**os.environ, "PYTHON": sys.executable, "PORT": str(_free_port()),
         "LOG_DIR": str(tmp_path / "logs"),
         "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
  worker = os.path.join(ROOT, "tests", "parallel", "grpo_worker.py")
  result = subprocess.run([os.path.join(ROOT, "launch", "multiprocess_local.sh"), "2", worker,
                           str(tmp_path)], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
  logs = "".join(open(f).read()[-3000:] for f in sorted(glob.glob(str(tmp_path / "logs/*"))))
  assert result.returncode == 0, result.stderr + logs
  spec = importlib.util.spec_from_file_location("grpo_worker", worker)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  # The same steps in this one process, on the whole batch, on one device.
  model, params, config = module.setup()
  state = learners.create_train_state(model, params, config.optimizer)
  update = jax.jit(functools.partial(grpo.grpo_update, config=config))
  losses = []
  for i in range(module.STEPS):
    state, metrics = update(state, params, module.batch(config, i))
    losses.append(float(metrics["grpo/loss"]))
  expected = {jax.tree_util.keystr(p): np.asarray(x)
              for p, x in jax.tree_util.tree_leaves_with_path(state.params)}
  moved = max(np.abs(expected[k] - np.asarray(x)).max() for k, x in
              zip(expected, jax.tree.leaves(params)))
  assert moved > 1e-4  # the steps really changed the parameters
  for pid in range(2):
    got = np.load(tmp_path / f"process_{pid}.npz")
    assert int(got["devices"]) == 4
    np.testing.assert_allclose(got["losses"], losses, rtol=1e-5)
    for name, value in expected.items():
      np.testing.assert_allclose(got[name], value, rtol=2e-5, atol=2e-6, err_msg=name)


@pytest.mark.slow
def test_two_processes_end_with_identical_parameters_and_one_checkpoint(tmp_path):
  env = {**os.environ, "PYTHON": sys.executable, "PORT": str(_free_port()),
         "LOG_DIR": str(tmp_path / "logs"),
         "XLA_FLAGS": "--xla_force_host_platform_device_count=1"}
  result = subprocess.run(
      [os.path.join(ROOT, "launch", "multiprocess_local.sh"), "2", "-m",
       "experiments.distributed_smoke", f"--workdir={tmp_path / 'work'}", "--steps=3"],
      env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
  logs = "".join(open(f).read()[-3000:] for f in sorted(glob.glob(str(tmp_path / "logs/*"))))
  assert result.returncode == 0, result.stderr + logs
  first = np.load(tmp_path / "work" / "final_params_0.npz")
  second = np.load(tmp_path / "work" / "final_params_1.npz")
  assert sorted(first) == sorted(second)
  for name in first:
    np.testing.assert_array_equal(first[name], second[name])
  # Process 0 alone wrote metrics, one line per step, and the steps had gradients.
  lines = [json.loads(line) for line in open(tmp_path / "work" / "metrics.jsonl")]
  assert [m["step"] for m in lines] == [1, 2, 3]
  assert all(m["grpo/grad_norm"] > 0 for m in lines)
  assert os.listdir(tmp_path / "work" / "checkpoints") == ["3"]


def test_settings_from_environment():
  env = {"RLAGENTS_COORDINATOR": "10.0.0.1:1234", "RLAGENTS_NUM_PROCESSES": "4",
         "RLAGENTS_PROCESS_ID": "3"}
  assert parallel.resolve_setup(env=env) == parallel.ProcessSetup("RLAGENTS_*", "10.0.0.1:1234",
                                                                  4, 3)
  # Explicit flags win over the environment.
  assert parallel.resolve_setup("h:1", 2, 0, env=env).source == "explicit"
  assert parallel.resolve_setup(env={"SLURM_NTASKS": "8", "SLURM_PROCID": "5"}) == (
      parallel.ProcessSetup("slurm", None, 8, 5))
  assert parallel.resolve_setup(env={"SLURM_NTASKS": "1"}).source == "single"
  assert parallel.resolve_setup(env={"TPU_WORKER_HOSTNAMES": "a,b"}).source == "tpu"
  assert parallel.resolve_setup(env={}).source == "single"


@pytest.mark.parametrize("args,env,message", [
    (("h:1", None, None), {}, "incomplete: coordinator_address given but num_processes, "
                              "process_id missing"),
    ((), {"RLAGENTS_NUM_PROCESSES": "2"}, "RLAGENTS_COORDINATOR, RLAGENTS_PROCESS_ID missing"),
    (("h:1", 2, 2), {}, r"process_id = 2 is outside \[0, 2\)"),
    (("nohost", 2, 0), {}, "coordinator_address must be host:port"),
    ((), {"RLAGENTS_COORDINATOR": "h:1", "RLAGENTS_NUM_PROCESSES": "two",
          "RLAGENTS_PROCESS_ID": "0"}, "must be integers"),
])
def test_inconsistent_settings_are_refused(args, env, message):
  with pytest.raises(ValueError, match=message):
    parallel.resolve_setup(*args, env=env)
