"""The main job's update steps run on every device: the result does not depend on how many.

Short smoke runs (SFT 24 steps, GRPO 2 steps, no evaluation before the end) on 1 and 8 forced
CPU devices, 8 with fsdp, and two `jax.distributed` processes of one device each sharing one
workdir, all end with the same GRPO parameters (float32, 1e-5).
"""

import json
import os
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest

from rlagents import checkpoint

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Runs the job without its final evaluation (which reads the checkpoints and changes nothing).
DRIVER = """
import json, sys
from rlagents import parallel
parallel.initialize()
from experiments import configs
from experiments.configs import calculator
from rlagents import pipeline
from rlagents.pipeline import _report
values = configs.with_overrides(calculator.get_config("smoke").to_dict(), json.loads(sys.argv[2]))
_report.final_report = lambda job, *_: {"splits": {"heldout": {"expert": {"success": 0.0}}}}
report = pipeline.train_and_evaluate(pipeline.config_from_dict(values), sys.argv[1])
print("devices", json.dumps(report["devices"]))
"""
SETTINGS = {"sft.num_steps": 24, "grpo.num_steps": 2, "eval.every_steps": 0,
            "eval.curve_tasks": 8, "checkpoint_every": 2, "log_every": 1}


def _launch(workdir, devices: int, settings=None, env=None):
  env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
         **(env or {})}
  return subprocess.Popen([sys.executable, "-c", DRIVER, workdir,
                           json.dumps({**SETTINGS, **(settings or {})})],
                          cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)


def _finish(process):
  output, _ = process.communicate(timeout=1200)
  assert process.returncode == 0, output[-4000:]
  return json.loads(output.rsplit("devices ", 1)[1].splitlines()[0])


def _grpo_state(workdir, like=None):
  """The saved GRPO state of step 2; `like` (host arrays) lays it out on this process when it
  was saved on other devices (another process's)."""
  with checkpoint.Checkpointer(os.path.join(workdir, "checkpoints", "grpo")) as ckpt:
    assert ckpt.all_steps() == [2]
    return ckpt.restore(2, like)[0]


@pytest.fixture(scope="module")
def one_device(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("one") / "run")
  assert _finish(_launch(workdir, 1)) == {"processes": 1, "devices": 1,
                                           "mesh": {"data": 1, "fsdp": 1}}
  return jax.tree.map(np.asarray, _grpo_state(workdir))


def _assert_close(a, b):
  jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=0, atol=1e-5), a, b)


@pytest.mark.slow
@pytest.mark.parametrize("mesh", [{"data": -1, "fsdp": 1}, {"data": 2, "fsdp": 4}],
                         ids=["data8", "data2_fsdp4"])
def test_eight_devices_end_with_the_one_device_parameters(one_device, tmp_path, mesh):
  workdir = str(tmp_path / "run")
  devices = _finish(_launch(workdir, 8, {"mesh.data": mesh["data"], "mesh.fsdp": mesh["fsdp"]}))
  assert devices["devices"] == 8 and devices["mesh"]["fsdp"] == mesh["fsdp"]
  _assert_close(one_device["params"], _grpo_state(workdir)["params"])


@pytest.mark.slow
def test_two_processes_end_with_the_one_process_parameters(one_device, tmp_path):
  workdir = str(tmp_path / "run")
  with socket.socket() as s:
    s.bind(("localhost", 0))
    port = s.getsockname()[1]
  processes = [_launch(workdir, 1, env={"RLAGENTS_COORDINATOR": f"localhost:{port}",
                                        "RLAGENTS_NUM_PROCESSES": "2",
                                        "RLAGENTS_PROCESS_ID": str(index)})
               for index in range(2)]
  devices = [_finish(p) for p in processes]
  assert devices[0] == {"processes": 2, "devices": 2, "mesh": {"data": 2, "fsdp": 1}}
  # One run: one metrics file, one checkpoint per step, one audit log (process 0 writes).
  assert sorted(os.listdir(workdir)).count("metrics.csv") == 1
  _assert_close(one_device["params"],
                _grpo_state(workdir, like=jax.device_put(one_device))["params"])


@pytest.mark.slow
def test_two_processes_train_asynchronously_into_one_checkpoint(one_device, tmp_path):
  """rl.mode=async under jax.distributed: process 0 samples, both update on its batches."""
  workdir = str(tmp_path / "run")
  with socket.socket() as s:
    s.bind(("localhost", 0))
    port = s.getsockname()[1]
  settings = {"rl.mode": "async", "rl.max_staleness": 1}
  processes = [_launch(workdir, 1, settings,
                       env={"RLAGENTS_COORDINATOR": f"localhost:{port}",
                            "RLAGENTS_NUM_PROCESSES": "2", "RLAGENTS_PROCESS_ID": str(index)})
               for index in range(2)]
  devices = [_finish(p) for p in processes]
  assert devices[0] == {"processes": 2, "devices": 2, "mesh": {"data": 2, "fsdp": 1}}
  assert sorted(os.listdir(workdir)).count("metrics.csv") == 1
  with open(os.path.join(workdir, "metrics.csv")) as f:
    rows = f.read()
  assert "async/staleness" in rows and "grpo/loss" in rows
  # One checkpoint of step 2, readable as a whole, its structure the sync run's.
  state = _grpo_state(workdir, like=jax.device_put(one_device))
  leaves = jax.tree.leaves(jax.tree.map(np.asarray, state["params"]))
  assert leaves and all(np.all(np.isfinite(leaf)) for leaf in leaves)
