"""The job's config: defaults valid, unknown keys and impossible values named in one line."""

import subprocess
import sys

import pytest

from rlagents import pipeline
from experiments.configs import calculator


def test_default_and_smoke_configs_build():
  for variant in calculator.VARIANTS:
    config = pipeline.config_from_dict(calculator.get_config(variant).to_dict())
    assert isinstance(config, pipeline.AgentJobConfig)


def test_overrides_apply_and_keep_nested_defaults():
  config = pipeline.config_from_dict({"grpo": {"kl_beta": 0.5, "optimizer": {"b2": 0.9}}})
  assert config.grpo.kl_beta == 0.5
  assert config.grpo.optimizer.b2 == 0.9
  # The GRPO optimizer's own default learning rate survives a partial override.
  assert config.grpo.optimizer.learning_rate == pipeline.AgentJobConfig().grpo.optimizer.learning_rate


@pytest.mark.parametrize("values, message", [
    ({"grpo": {"nope": 1}}, "unknown config key 'grpo.nope'"),
    ({"nope": 1}, "unknown config key 'nope'"),
    ({"grpo": {"group_size": 1}}, "group_size"),
    ({"grpo": {"advantage_estimator": "magic"}}, "magic"),
    ({"grpo": {"kl_beta": "high"}}, "'grpo.kl_beta' must be a number"),
    ({"rollout": {"max_length": 4096}}, "rollout.max_length"),
    ({"reward": {"redundant_call": 0.5}}, "redundant_call"),
    ({"reward": {"invalid_call": 0.5}}, "invalid_call"),
    ({"grpo": {"kl_bta": 0.1}}, "unknown config key 'grpo.kl_bta', did you mean 'kl_beta'?"),
    ({"sft": 3}, "'sft' must be a group"),
])
def test_bad_values_are_named(values, message):
  with pytest.raises(pipeline.ConfigError, match=message.replace("(", r"\(")) as info:
    pipeline.config_from_dict(values)
  assert "\n" not in str(info.value)


def test_check_config_key():
  pipeline.check_config_key("grpo.optimizer.learning_rate")
  with pytest.raises(pipeline.ConfigError,
                     match="did you mean 'learning_rate'.*'learning_rat' is not a field"):
    pipeline.check_config_key("grpo.optimizer.learning_rat")


def _run_main(*args):
  return subprocess.run([sys.executable, "-m", "experiments.train_agent", *args],
                        capture_output=True, text=True, timeout=120)


def test_command_line_reports_unknown_key_in_one_line(tmp_path):
  result = _run_main(f"--workdir={tmp_path / 'run'}", "--config.grpo.nope=3")
  assert result.returncode != 0
  errors = [l for l in result.stderr.splitlines() if l.startswith("error:")]
  assert errors == [errors[0]] and "grpo.nope" in errors[0]
  assert "Traceback" not in result.stderr


def test_command_line_reports_missing_workdir_parent_in_one_line(tmp_path):
  result = _run_main(f"--workdir={tmp_path / 'missing' / 'run'}")
  assert result.returncode != 0
  assert "Traceback" not in result.stderr
  assert f"error: the parent directory of workdir" in result.stderr
  assert str(tmp_path / "missing") in result.stderr
