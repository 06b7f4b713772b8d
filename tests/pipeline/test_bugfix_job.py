"""The main job on the bug-fix suite: the tokenizer it needs, its config, a smoke run and replay."""

import os

import pytest

from experiments.configs import codefix as codefix_configs
from rlagents import hf
from rlagents import pipeline
from rlagents.pipeline import _replay
from rlagents.tasks import bugfix


def test_code_characters_extend_the_tokenizer_without_moving_the_built_in_ids():
  built_in = hf.build_char_tokenizer()
  extended = hf.build_char_tokenizer(bugfix.CHARACTERS)
  assert built_in.get_vocab() == hf.build_char_tokenizer("").get_vocab()
  assert len(built_in) == len(hf.tokenizer.SPECIAL_TOKENS) + len(hf.CHARACTERS)
  assert {k: v for k, v in extended.get_vocab().items() if k in built_in.get_vocab()} == (
      built_in.get_vocab())
  task = bugfix.generate_suite(bugfix.BugFixSuiteConfig(
      num_train=10, num_heldout=2, num_heldout_ood=2, num_calibration=2))["train"][0]
  ids = extended.encode(task.prompt, add_special_tokens=False)
  assert len(ids) == len(task.prompt)  # one token a character, none unknown
  assert extended.unk_token_id not in ids
  assert extended.decode(ids) == task.prompt


def test_the_config_builds_and_a_bad_field_is_named():
  config = pipeline.config_from_dict(codefix_configs.get_config("smoke").to_dict())
  assert config.task == "bugfix" and config.rollout.max_length <= config.model.max_len
  values = codefix_configs.get_config().to_dict()
  values["bugfix"]["ood_families"] = ("typo",)
  with pytest.raises(pipeline.ConfigError, match="ood_families"):
    pipeline.config_from_dict(values)
  values = codefix_configs.get_config().to_dict()
  values["bugfix_reward"]["redundant_call"] = 0.5
  with pytest.raises(pipeline.ConfigError, match="redundant_call"):
    pipeline.config_from_dict(values)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("bugfix") / "run")
  config = pipeline.config_from_dict(codefix_configs.get_config("smoke").to_dict())
  return config, workdir, pipeline.train_and_evaluate(config, workdir)


@pytest.mark.slow
def test_smoke_run_reports_every_split_policy_and_detector(finished_run):
  _, workdir, report = finished_run
  assert set(report["splits"]) == {"heldout", "heldout_ood", "calibration"}
  for split, entry in report["splits"].items():
    assert entry["expert"]["success"] > 0.3, split  # the noisy fixer fixes many
    for policy in ("sft", "grpo"):
      assert set(entry[policy]["detectors"]) == {
          "test_tampering", "special_casing", "code_padding", "redundant_calls"}
      assert "test_runs" in entry[policy]["reward_terms"]
  assert report["sandbox_isolation"].startswith(("kernel", "hook"))
  with open(os.path.join(workdir, "metrics.csv")) as f:
    nll = [float(line.split(",")[2]) for line in f if ",sft/nll," in line]
  assert nll[-1] < 0.5 * nll[0]  # SFT learns the fixer's episodes


@pytest.mark.slow
def test_the_audit_log_replays(finished_run):
  _, workdir, _ = finished_run
  with open(os.path.join(workdir, "audit", "episodes.jsonl")) as f:
    lines = sum(1 for _ in f)
  for line in (1, 2, lines):  # fixer demonstrations and the last GRPO evaluation episode
    replayed, problems = _replay.replay_workdir(workdir, line)
    assert replayed == 1 and problems == [], problems
