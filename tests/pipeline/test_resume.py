"""Exact resume of the main job's GRPO phase: after an in-process stop, and after SIGKILL.

The smoke config with a short SFT phase (30 steps; exactness does not need a good policy) and 10
GRPO steps with a checkpoint every 5. Every run starts from a copy of one finished SFT phase, so
only the GRPO phase runs.
"""

import os
import shutil
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from experiments import configs
from experiments.configs import calculator
from rlagents import checkpoint
from rlagents import guardrails
from rlagents import pipeline
from rlagents.metrics import read_csv
from rlagents.pipeline import _checkpoints
from rlagents.pipeline import _main
from rlagents.pipeline import _outputs
from rlagents.pipeline import _report

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The job's config for these tests, as command-line overrides of the smoke variant.
OVERRIDES = {"sft.num_steps": 30, "grpo.num_steps": 10, "checkpoint_every": 5,
             "eval.every_steps": 0}
SFT_STEPS = 30


def _config(**overrides):
  return pipeline.config_from_dict(configs.with_overrides(
      calculator.get_config("smoke").to_dict(), {**OVERRIDES, **overrides}))


@pytest.fixture(scope="module")
def sft_done(tmp_path_factory):
  """A workdir holding only a finished SFT phase (its checkpoints and the task data)."""
  workdir = str(tmp_path_factory.mktemp("sft") / "run")
  _run_without_final_report(_config(**{"grpo.num_steps": 0}), workdir)
  return workdir


def _run_without_final_report(config, workdir):
  """The job up to its final evaluation (which reads the checkpoints and changes nothing)."""
  original = _report.final_report
  _report.final_report = lambda job, *_: {"splits": {"heldout": {"expert": {"success": 0.}}}}
  try:
    return pipeline.train_and_evaluate(config, workdir)
  finally:
    _report.final_report = original


def _start_from(sft_done, workdir):
  for name in ("data", os.path.join("checkpoints", "sft")):
    shutil.copytree(os.path.join(sft_done, name), os.path.join(workdir, name))
  return workdir


@pytest.fixture(scope="module")
def straight(sft_done, tmp_path_factory):
  """10 GRPO steps without interruption."""
  workdir = _start_from(sft_done, str(tmp_path_factory.mktemp("straight") / "run"))
  _run_without_final_report(_config(), workdir)
  return workdir


def _grpo_params(workdir, step=10):
  with checkpoint.Checkpointer(os.path.join(workdir, "checkpoints", "grpo")) as ckpt:
    assert ckpt.latest_step() == step
    return ckpt.restore(step)[0]["params"]


def _assert_continues_like(straight_dir, resumed_dir):
  """Identical parameters; metrics and audit records without a gap or a repeat."""
  jax.tree.map(np.testing.assert_array_equal, _grpo_params(straight_dir),
               _grpo_params(resumed_dir))
  rows = {}
  for d in (straight_dir, resumed_dir):
    rows[d] = [(r["step"], r["name"], r["value"]) for r in read_csv(os.path.join(d, "metrics.csv"))
               if not r["name"].startswith("time/")]
  keys = [(s, n) for s, n, _ in rows[resumed_dir]]
  assert len(keys) == len(set(keys))
  assert sorted(rows[resumed_dir]) == sorted(rows[straight_dir])
  # GRPO steps 4, 8 and 10 are logged (log_every=4) at global steps SFT_STEPS + step.
  assert sorted(s for s, n in keys if n == "grpo/loss") == [SFT_STEPS + s for s in (4, 8, 10)]
  records = {}
  for d in (straight_dir, resumed_dir):
    records[d] = [(r["step"], r["prompt"], r["actions"], r["reward"])
                  for r in guardrails.read_audit_log(os.path.join(d, "audit", "episodes.jsonl"))
                  if r["phase"] == "grpo"]
  assert len(records[resumed_dir]) == 10 * 8 * 4
  assert records[resumed_dir] == records[straight_dir]


class _Stop(Exception):
  pass


@pytest.mark.slow  # With its fixtures (SFT, 10 straight GRPO steps) over a minute on 2 cores.
def test_five_steps_stop_resume_five_equals_ten_straight(sft_done, straight, tmp_path):
  workdir = _start_from(sft_done, str(tmp_path / "run"))
  save = checkpoint.Checkpointer.save

  def save_then_stop(self, step, state, metadata):
    save(self, step, state, metadata)
    if metadata["phase"] == "grpo" and step == 5:
      raise _Stop  # The process is stopped right after its step-5 save was started.

  checkpoint.Checkpointer.save = save_then_stop
  try:
    with pytest.raises(_Stop):
      _run_without_final_report(_config(), workdir)
  finally:
    checkpoint.Checkpointer.save = save
  # The asynchronous save was finished before the exception left the job.
  assert sorted(os.listdir(os.path.join(workdir, "checkpoints", "grpo"))) == ["5"]
  report = _run_without_final_report(_config(), workdir)
  assert report["resumed_from_step"] == SFT_STEPS + 5
  _assert_continues_like(straight, workdir)


def _train_agent(workdir):
  command = [sys.executable, "-m", "experiments.train_agent", f"--workdir={workdir}",
             "--config=experiments/configs/calculator.py:smoke"]
  command += [f"--config.{k}={v}" for k, v in OVERRIDES.items()]
  env = {**os.environ, "PYTHONPATH": REPO, "JAX_PLATFORMS": "cpu"}
  return subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)


@pytest.mark.slow
def test_sigkill_mid_grpo_then_restart_resumes_exactly(sft_done, straight, tmp_path):
  workdir = _start_from(sft_done, str(tmp_path / "run"))
  first_checkpoint = os.path.join(workdir, "checkpoints", "grpo", "5")
  process = _train_agent(workdir)
  deadline = time.time() + 300
  while not os.path.isdir(first_checkpoint):
    assert process.poll() is None, process.stdout.read()
    assert time.time() < deadline, "no GRPO checkpoint within 300 s"
    time.sleep(0.05)
  process.send_signal(signal.SIGKILL)
  process.wait()
  assert process.returncode == -signal.SIGKILL
  with checkpoint.Checkpointer(os.path.join(workdir, "checkpoints", "grpo")) as ckpt:
    assert ckpt.latest_step() == 5  # Killed partway through GRPO.

  process = _train_agent(workdir)
  output, _ = process.communicate(timeout=600)
  assert process.returncode == 0, output
  assert f"Resuming {workdir} from step {SFT_STEPS + 5}" in output
  _assert_continues_like(straight, workdir)


def test_only_process_0_writes_the_run_files(tmp_path, monkeypatch):
  workdir = str(tmp_path / "run")
  monkeypatch.setattr(jax, "process_index", lambda: 1)
  _main._check_workdir(_config(), workdir)
  outputs = _outputs.Outputs(workdir, resume_step=None)
  outputs.metrics(1, {"loss": 1.0})
  outputs.episodes([], phase="grpo", step=1)
  outputs.close()
  assert os.listdir(workdir) == []
  monkeypatch.undo()
  _main._check_workdir(_config(), workdir)
  outputs = _outputs.Outputs(workdir, resume_step=None)
  outputs.metrics(1, {"loss": 1.0})
  outputs.close()
  assert {"config.json", "metrics.csv", "audit"} <= set(os.listdir(workdir))
  assert read_csv(os.path.join(workdir, "metrics.csv")) == [
      {"step": 1, "name": "loss", "value": 1.0}]


def test_a_resumed_run_does_not_write_a_step_again(tmp_path):
  workdir = str(tmp_path)
  outputs = _outputs.Outputs(workdir, resume_step=None)
  outputs.metrics(0, {"expert/train_success": 0.5})
  outputs.metrics(7, {"loss": 2.0})
  outputs.metrics(9, {"loss": 1.0})
  outputs.close()
  # Resumed from step 7: the row of step 9 is dropped, those of steps 0 and 7 are kept once
  # even though the phase writes step 0 again.
  outputs = _outputs.Outputs(workdir, resume_step=7)
  outputs.metrics(0, {"expert/train_success": 0.5})
  outputs.metrics(8, {"loss": 1.5})
  outputs.close()
  rows = [(r["step"], r["name"]) for r in read_csv(os.path.join(workdir, "metrics.csv"))]
  assert rows == [(0, "expert/train_success"), (7, "loss"), (8, "loss")]


def test_a_checkpoint_of_another_phase_or_seed_is_refused(tmp_path):
  import optax  # pylint: disable=g-import-not-at-top
  from flax.training import train_state  # pylint: disable=g-import-not-at-top
  state = train_state.TrainState.create(apply_fn=None, params={"w": np.zeros(3, np.float32)},
                                        tx=optax.sgd(0.1))
  state = state.replace(step=4)
  key = jax.random.PRNGKey(0)
  with checkpoint.Checkpointer(str(tmp_path)) as ckpt:
    ckpt.save(4, _checkpoints.state_tree(state, key),
              _checkpoints.metadata(phase="sft", phase_id=2, step=4, seed=0))
  with checkpoint.Checkpointer(str(tmp_path)) as ckpt:
    start = pipeline.restore_phase(ckpt, state.replace(step=0), key, phase="sft", seed=0)
    assert start.step == 4 and int(start.state.step) == 4
    with pytest.raises(checkpoint.CheckpointError, match="expected phase 'grpo'"):
      pipeline.restore_phase(ckpt, state, key, phase="grpo", seed=0)
    with pytest.raises(checkpoint.CheckpointError, match="seed 0.*expected.*seed 1"):
      pipeline.restore_phase(ckpt, state, key, phase="sft", seed=1)
