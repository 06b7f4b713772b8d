"""Phases and task suites plug in by registry and get the whole job for free.

A toy phase (REINFORCE without a baseline) registered from this module runs after SFT with
checkpoints, exact resume, the audit log, metrics and the report; a user's suite from a test
module (`letter_task.py`: its own tools and verifier) runs through the command line with SFT ->
GRPO, the audit log (replayed), resume and the report, and its irreversible tool is denied by
the review gate in training and counted.
"""

import json
import os
import shutil
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import configs
from experiments.configs import calculator
from rlagents import checkpoint
from rlagents import guardrails
from rlagents import pipeline
from rlagents.learners import sft as sft_lib
from rlagents.metrics import read_csv

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def reinforce_loss(params, apply_fn, batch):
  """-mean over episodes of reward x log-probability of the episode's own tokens."""
  tokens = batch["tokens"]
  positions = jnp.broadcast_to(jnp.arange(tokens.shape[1], dtype=jnp.int32), tokens.shape)
  logits, _ = apply_fn(params, tokens, positions)
  logp = jnp.take_along_axis(jax.nn.log_softmax(logits[:, :-1]), tokens[:, 1:, None], axis=-1)
  episode_logp = (logp[..., 0] * batch["loss_mask"][:, 1:]).sum(axis=1)
  loss = -(batch["rewards"] * episode_logp).mean()
  return loss, {"reinforce/loss": loss}


def reinforce_update(state, batch):
  (_, metrics), grads = jax.value_and_grad(reinforce_loss, has_aux=True)(
      state.params, state.apply_fn, batch)
  metrics["reinforce/grad_norm"] = sft_lib.global_norm(grads)
  return state.apply_gradients(grads=grads), metrics


class Reinforce(pipeline.phases.Phase):
  """REINFORCE without a baseline on groups of one episode per task (`config.grpo` settings)."""
  name, phase_id, online = "reinforce", 20, True

  def settings(self, config):
    return config.grpo

  def prepare(self, job, state, reference):
    return jax.jit(reinforce_update, donate_argnums=(0,))

  def step(self, job, update, state, *, step, key, rng):
    tasks = self.draw_tasks(job, rng, job.config.grpo.prompts_per_step)
    rollout = job.train_episodes(state.params, tasks, key=key, rng=rng, group_size=1)
    batch = pipeline.phases.policy_batch(rollout)
    state, metrics = update(state, job.place_batch(batch))
    return pipeline.phases.StepResult(state, metrics, rollout)

  def panels(self, config):
    return {"REINFORCE loss": ["reinforce/loss"]}


pipeline.phases.register_phase(Reinforce())


def _config(**dotted):
  settings = {"algorithm": "reinforce", "sft.num_steps": 40, "grpo.num_steps": 4,
              "grpo.prompts_per_step": 16, "eval.every_steps": 2, "eval.curve_tasks": 16,
              "checkpoint_every": 2, "log_every": 1, "proxy_drift.window": 2, **dotted}
  return pipeline.config_from_dict(
      configs.with_overrides(calculator.get_config("smoke").to_dict(), settings))


@pytest.fixture(scope="module")
def reinforce_run(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("reinforce") / "run")
  return workdir, pipeline.train_and_evaluate(_config(), workdir)


def _params(workdir, phase, step):
  with checkpoint.Checkpointer(os.path.join(workdir, "checkpoints", phase)) as ckpt:
    return ckpt.restore(step)[0]["params"]


def test_a_registered_phase_is_an_algorithm_with_the_whole_job(reinforce_run):
  workdir, report = reinforce_run
  assert "reinforce" in pipeline.phases.algorithms()
  with checkpoint.Checkpointer(os.path.join(workdir, "checkpoints", "reinforce")) as ckpt:
    assert ckpt.latest_step() == 4
  rows = read_csv(os.path.join(workdir, "metrics.csv"))
  names = {r["name"] for r in rows}
  assert {"reinforce/loss", "reward/correct_answer", "train/success",
          "eval/calibration_success", "alarm/proxy_drift"} <= names
  records = guardrails.read_audit_log(os.path.join(workdir, "audit", "episodes.jsonl"))
  trained = [r for r in records if r["phase"] == "reinforce"]
  assert len(trained) == 4 * 16
  assert {r["step"] for r in trained} == {40 + s for s in range(1, 5)}
  assert {"sft", "reinforce", "expert"} <= set(report["splits"]["heldout"])
  assert report["algorithm"] == "reinforce" and report["after_sft"]["rl_steps"] == 4
  assert report["proxy_drift"]["points"] == 2
  assert os.path.exists(os.path.join(workdir, "learning_curves.png"))
  count, problems = pipeline.replay_workdir(workdir)
  assert count == len(records) and not problems


def test_a_registered_phase_resumes_exactly(reinforce_run, tmp_path):
  workdir, _ = reinforce_run
  resumed = str(tmp_path / "resumed")
  shutil.copytree(workdir, resumed)
  shutil.rmtree(os.path.join(resumed, "checkpoints", "reinforce", "4"))
  report = pipeline.train_and_evaluate(_config(), resumed)
  assert report["resumed_from_step"] == 42
  jax.tree.map(np.testing.assert_array_equal, _params(workdir, "reinforce", 4),
               _params(resumed, "reinforce", 4))


@pytest.mark.slow
def test_a_user_task_trains_from_the_command_line(tmp_path):
  workdir = str(tmp_path / "letters")
  env = {**os.environ, "PYTHONPATH": os.pathsep.join([HERE, REPO])}
  command = [sys.executable, "-m", "experiments.train_agent", f"--workdir={workdir}",
             "--config=experiments/configs/calculator.py:smoke",
             "--config.task=letter_task:suite", "--config.sft.num_demonstrations=600",
             "--config.sft.num_steps=200", "--config.grpo.num_steps=8",
             "--config.eval.every_steps=4", "--config.checkpoint_every=4",
             "--config.proxy_drift.window=2"]
  run = lambda: subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True,
                               timeout=1200)
  result = run()
  assert result.returncode == 0, result.stderr[-3000:]
  with open(os.path.join(workdir, "report.json")) as f:
    report = json.load(f)
  heldout = report["splits"]["heldout"]
  assert report["task"] == "letter_count" and set(heldout) == {"expert", "sft", "grpo"}
  # The SFT policy learned the count tool from the demonstrations.
  assert heldout["sft"]["success"] > 0.3, heldout
  # It also learned to call `reveal` (15% of demonstrations): irreversible, so the review gate
  # denied every such call during GRPO, and the report counts them.
  assert report["after_sft"]["denied_calls"] > 0
  records = guardrails.read_audit_log(os.path.join(workdir, "audit", "episodes.jsonl"))
  denied = [a for r in records if r["phase"] == "grpo" for a in r["actions"]
            if a["tool"] == "reveal"]
  assert denied and all(a["status"] == "denied" for a in denied)
  replay = subprocess.run([sys.executable, "-m", "experiments.replay", f"--workdir={workdir}"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
  assert replay.returncode == 0, replay.stdout[-2000:] + replay.stderr[-2000:]
  assert f"{len(records)} reproduced, 0 diverged" in replay.stdout
  # Interrupted after GRPO step 4: the same command resumes there.
  shutil.rmtree(os.path.join(workdir, "checkpoints", "grpo", "8"))
  result = run()
  assert result.returncode == 0, result.stderr[-3000:]
  assert f"Resuming {workdir} from step 204" in result.stdout


@pytest.mark.slow
def test_the_drift_alarm_fires_when_the_reward_is_a_proxy(tmp_path, monkeypatch):
  """`hackable_suite`'s calibration answers are 100 off the true count: as GRPO raises the
  training reward, calibration success stays at zero, and the monitor must say so."""
  monkeypatch.syspath_prepend(HERE)
  config = _config(**{"task": "letter_task:hackable_suite", "algorithm": "grpo",
                      "sft.num_demonstrations": 600, "sft.num_steps": 200,
                      "grpo.num_steps": 12, "grpo.prompts_per_step": 8,
                      "eval.every_steps": 4, "eval.curve_tasks": 64, "checkpoint_every": 4,
                      "proxy_drift.min_reward_rise": 0.02})
  report = pipeline.train_and_evaluate(config, str(tmp_path / "run"))
  calibration = [r["value"] for r in read_csv(str(tmp_path / "run" / "metrics.csv"))
                 if r["name"] == "eval/calibration_success"]
  assert max(calibration) == 0.0
  assert report["proxy_drift"]["points"] == 3
  assert report["proxy_drift"]["alarm_steps"], report["proxy_drift"]


@pytest.mark.parametrize("rl_tasks", ["all", "unseen_by_sft"])
def test_rl_draws_its_prompts_from_the_tasks_sft_did_not_see_when_asked(rl_tasks):
  import types  # pylint: disable=g-import-not-at-top
  config = pipeline.config_from_dict({"rl_tasks": rl_tasks, "sft": {"num_demonstrations": 30}})
  train = list(range(40))  # Task i is the i-th of the split; SFT plays the first 30.
  job = types.SimpleNamespace(config=config, suite=types.SimpleNamespace(splits={"train": train}))
  rng = np.random.default_rng(0)
  drawn = [pipeline.phases.Phase.draw_tasks(job, rng, 8) for _ in range(50)]
  assert all(len(set(tasks)) == 8 for tasks in drawn)
  seen = set().union(*drawn)
  if rl_tasks == "all":
    assert seen == set(train)
  else:
    assert seen == set(range(30, 40))
    with pytest.raises(pipeline.phases.PhaseError, match="enlarge the train split"):
      pipeline.phases.Phase.draw_tasks(job, rng, 11)
  with pytest.raises(pipeline.ConfigError, match="rl_tasks must be one of all, unseen_by_sft"):
    pipeline.config_from_dict({"rl_tasks": "heldout"})
