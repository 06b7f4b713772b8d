"""The main job with `rollout_mode='jit'`: GRPO steps as one compiled program, same outputs."""

import os

import pytest

from experiments.configs import calculator
from rlagents import guardrails
from rlagents import pipeline
from rlagents.metrics import read_csv


def test_unknown_rollout_mode_is_a_config_error():
  values = calculator.get_config("smoke").to_dict()
  values["rollout_mode"] = "device"
  with pytest.raises(pipeline.ConfigError, match="rollout_mode must be one of host, jit, got "
                     "'device'"):
    pipeline.config_from_dict(values)


@pytest.mark.slow
def test_smoke_job_with_jit_rollouts_learns(tmp_path):
  values = calculator.get_config("smoke").to_dict()
  values["rollout_mode"] = "jit"
  config = pipeline.config_from_dict(values)
  workdir = str(tmp_path / "run")
  report = pipeline.train_and_evaluate(config, workdir)
  rows = read_csv(os.path.join(workdir, "metrics.csv"))
  metric = lambda name: {r["step"]: r["value"] for r in rows if r["name"] == name}
  assert len(metric("train/success")) == config.grpo.num_steps // config.log_every
  assert len(metric("reward/invalid_calls")) == config.grpo.num_steps // config.log_every
  curve = metric("eval/heldout_success")
  sft_end = config.sft.num_steps
  # As the host path's smoke test: GRPO raises held-out success on the curve's tasks.
  assert max(v for step, v in curve.items() if step > sft_end) > curve[sft_end] + 0.05
  assert 0.0 <= report["splits"]["heldout"]["grpo"]["success"] <= 1.0
  assert os.path.isdir(os.path.join(workdir, "checkpoints", "grpo"))
  # Every training episode that ran inside jit was replayed through the guarded host tools
  # (the in-jit calculator agreed with the host one on every call), is in the audit log, and
  # `experiments.replay` reproduces it.
  assert set(metric("train/mismatched_calls").values()) == {0.0}
  records = guardrails.read_audit_log(os.path.join(workdir, "audit", "episodes.jsonl"))
  trained = [r for r in records if r["phase"] == "grpo"]
  grpo = config.grpo
  assert len(trained) == grpo.num_steps * grpo.prompts_per_step * grpo.group_size
  assert any(a["status"] == "transient_error" for r in trained for a in r["actions"])
  count, problems = pipeline.replay_workdir(workdir)
  assert count == len(records) and not problems, problems[:3]
  assert report["proxy_drift"]["points"] == grpo.num_steps // config.eval.every_steps
