"""The key-door suite through the main job, and GRPO with imagined episodes (`grpo_dyna`)."""

import os

import pytest

from experiments.configs import keydoor
from rlagents import guardrails
from rlagents import pipeline
from rlagents.metrics import read_csv


def _values(**overrides):
  values = keydoor.get_config("smoke").to_dict()
  for key, value in overrides.items():
    node = values
    *path, last = key.split("__")
    for part in path:
      node = node[part]
    node[last] = value
  return values


def test_grpo_dyna_needs_the_keydoor_suite_and_a_valid_fraction():
  with pytest.raises(pipeline.ConfigError, match="task='calculator' has none"):
    pipeline.config_from_dict(_values(task="calculator", algorithm="grpo_dyna"))
  with pytest.raises(pipeline.ConfigError, match=r"imagination.fraction must be in \[0, 1\]"):
    pipeline.config_from_dict(_values(algorithm="grpo_dyna", imagination__fraction=1.5))
  pipeline.config_from_dict(_values(algorithm="grpo_dyna"))
  pipeline.config_from_dict(_values(rollout_mode="jit"))  # the key-door world has a JAX env


@pytest.mark.slow
def test_grpo_dyna_marks_imagined_episodes_and_replays_the_real_ones(tmp_path):
  config = pipeline.config_from_dict(_values(
      algorithm="grpo_dyna", grpo__num_steps=2, eval__every_steps=1, proxy_drift__window=2,
      imagination__fit_steps=200, imagination__refit_every=1, imagination__refit_steps=10,
      imagination__d_model=48, imagination__uncertainty_threshold=1e9))
  workdir = str(tmp_path / "run")
  report = pipeline.train_and_evaluate(config, workdir)
  records = guardrails.read_audit_log(os.path.join(workdir, "audit", "episodes.jsonl"))
  train = [r for r in records if r["phase"] == "grpo_dyna"]
  imagined = [r for r in train if r.get("imagined")]
  group = config.grpo.group_size
  # Half of each step's groups were imagined (no group was routed: the threshold is huge).
  assert len(imagined) == len(train) - len(imagined) == config.grpo.num_steps * 2 * group
  rows = read_csv(os.path.join(workdir, "metrics.csv"))
  names = {r["name"] for r in rows}
  assert {"imagination/groups", "imagination/gap", "real/tool_calls"} <= names
  assert report["after_sft"]["real_tool_calls"] > 0
  replayed, problems = pipeline.replay_workdir(workdir)
  assert problems == [] and replayed == len(records) - len(imagined)
