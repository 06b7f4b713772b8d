"""The job's PPO, DPO and KTO phases on the smoke config: PPO learns, budgets hold, bad files fail."""

import json
import os
import shutil

import pytest

from experiments import configs
from experiments.configs import calculator
from rlagents import learners
from rlagents import pipeline
from rlagents.metrics import read_csv

pytestmark = pytest.mark.slow


def _config(**overrides):
  return pipeline.config_from_dict(
      configs.with_overrides(calculator.get_config("smoke").to_dict(), overrides))


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("ppo") / "run")
  # 32 PPO steps (the smoke config's 16, doubled) with the held-out curve every 8.
  config = _config(**{"algorithm": "ppo", "ppo.num_steps": 32})
  return config, workdir, pipeline.train_and_evaluate(config, workdir)


def _after_sft(ppo_workdir, tmp_path):
  """A fresh workdir holding only the PPO run's finished SFT checkpoint (so SFT is skipped)."""
  workdir = str(tmp_path / "run")
  shutil.copytree(os.path.join(ppo_workdir, "checkpoints", "sft"),
                  os.path.join(workdir, "checkpoints", "sft"))
  return workdir


def _assert_every_plot_panel_has_data(config, workdir, *, skip=()):
  """Each panel of learning_curves.png (but `skip`) names at least one metric the run wrote."""
  written = {r["name"] for r in read_csv(os.path.join(workdir, "metrics.csv"))}
  panels = pipeline.curve_panels(config)
  assert set(skip) < set(panels)
  for title, names in panels.items():
    if title in skip:
      continue
    assert written & set(names), f"panel {title!r} has none of {names} in metrics.csv"


def test_ppo_raises_heldout_success_and_reward(ppo_run):
  config, workdir, report = ppo_run
  rows = read_csv(os.path.join(workdir, "metrics.csv"))
  curve = {r["step"]: r["value"] for r in rows if r["name"] == "eval/heldout_success"}
  sft_end = config.sft.num_steps
  # Same 64 held-out tasks and sampling key at every point of the curve.
  assert max(v for s, v in curve.items() if s > sft_end) > curve[sft_end] + 0.08, curve
  value_loss = [r["value"] for r in rows if r["name"] == "ppo/value_loss"]
  assert value_loss and all(v == v for v in value_loss)  # finite, logged
  assert report["algorithm"] == "ppo" and "ppo" in report["splits"]["heldout"]
  stats = report["after_sft"]
  assert stats["rl_steps"] == config.ppo.num_steps and stats["sampled_tokens"] > 0
  # The shared critic adds one value head (d_model + 1 parameters) to the policy.
  assert stats["trained_parameters"] > 0
  _assert_every_plot_panel_has_data(config, workdir)


def test_dpo_samples_up_to_the_token_budget(ppo_run, tmp_path):
  _, ppo_workdir, _ = ppo_run
  workdir = _after_sft(ppo_workdir, tmp_path)
  budget = 2000
  config = _config(**{"algorithm": "dpo", "sampled_token_budget": budget, "dpo.num_steps": 4,
                      "eval.every_steps": 0})
  report = pipeline.train_and_evaluate(config, workdir)
  stats = report["after_sft"]
  assert stats["sampled_tokens"] >= budget
  # Sampling stops at the first chunk (prompts_per_step prompts x policy_samples) past it.
  chunk = config.grpo.prompts_per_step * config.preferences.policy_samples
  assert stats["episodes"] < budget // 10 + 2 * chunk
  assert stats["rl_steps"] == 4
  pairs = learners.load_preferences(os.path.join(workdir, "data", "dpo.jsonl"))
  assert len(pairs) == stats["records"] > 0
  # This run restarts after SFT and evaluates only at the end: no SFT loss, no curve.
  _assert_every_plot_panel_has_data(config, workdir, skip=("SFT loss", "heldout success"))


def test_kto_feedback_file_with_a_bad_line_is_named(ppo_run, tmp_path):
  _, ppo_workdir, _ = ppo_run
  workdir = _after_sft(ppo_workdir, tmp_path)
  path = tmp_path / "feedback.jsonl"
  path.write_text("\n".join(json.dumps(r) for r in [
      {"prompt": "1+2=?", "completion": "<answer>3</answer>", "desirable": True},
      {"prompt": "1+3=?", "completion": "<answer>4</answer>", "desirable": True},
      {"prompt": "1+4=?", "completion": "<answer>5</answer>"},
  ]) + "\n")
  config = _config(**{"algorithm": "kto", "preferences.feedback_file": str(path),
                      "dpo.num_steps": 2, "eval.every_steps": 0})
  with pytest.raises(pipeline.JobError, match=r"feedback.jsonl:3: missing field 'desirable'"):
    pipeline.train_and_evaluate(config, workdir)


def test_unknown_algorithm_is_a_config_error():
  with pytest.raises(pipeline.ConfigError, match="algorithm must be one of"):
    _config(algorithm="a2c")
