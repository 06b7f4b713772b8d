"""The main job on the retrieval QA suite: SFT on the noisy searcher, GRPO, report, replay."""

import json
import os

import pytest

from experiments.configs import retrieval as retrieval_configs
from rlagents import pipeline
from rlagents.pipeline import _replay


def _smoke_values():
  return retrieval_configs.get_config("smoke").to_dict()


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("retrieval") / "run")
  values = _smoke_values()
  # Smaller than the smoke variant, to keep the suite short: 150 places (~45 held-out
  # questions), 200 SFT steps, 8 GRPO steps.
  values["retrieval"]["num_places"] = 150
  values["sft"].update(num_demonstrations=800, num_steps=200)
  values["sft"]["optimizer"]["decay_steps"] = 180
  values["grpo"]["num_steps"] = 8
  values["eval"]["every_steps"] = 4  # two points for the drift monitor's window of 2
  config = pipeline.config_from_dict(values)
  report = pipeline.train_and_evaluate(config, workdir)
  return config, workdir, report


def test_report_has_every_policy_and_detector_counts(finished_run):
  _, workdir, report = finished_run
  assert set(report["splits"]) == {"heldout", "calibration"}
  for split in ("heldout", "calibration"):
    for policy in ("expert", "sft", "grpo"):
      assert 0.0 <= report["splits"][split][policy]["success"] <= 1.0
    for policy in ("sft", "grpo"):
      assert set(report["splits"][split][policy]["detectors"]) == {
          "padding", "irrelevant_copy", "redundant_calls"}
  for name in ("learning_curves.png", "export/config.json", "audit/episodes.jsonl"):
    assert os.path.exists(os.path.join(workdir, name)), name


def test_the_policy_learns_to_search(finished_run):
  _, workdir, report = finished_run
  heldout = report["splits"]["heldout"]
  # The expert searches in 85% of episodes; the imitating policy writes valid search calls on
  # questions it never saw. (Answering from the passages takes the default config's longer
  # training: docs/experiments.md.)
  assert heldout["sft"]["mean_tool_calls"] > 0.5
  assert heldout["sft"]["tool_call_validity"] > 0.9
  with open(os.path.join(workdir, "metrics.csv")) as f:
    nll = [float(line.split(",")[2]) for line in f if ",sft/nll," in line]
  assert min(nll[-5:]) < 0.5 * nll[0]


def test_audit_log_names_the_suite_and_replays(finished_run):
  _, workdir, _ = finished_run
  with open(os.path.join(workdir, "audit", "episodes.jsonl")) as f:
    records = [json.loads(line) for line in f]
  assert {r["suite"] for r in records} == {"retrieval"}
  assert {r["phase"] for r in records} >= {"sft_demonstration", "grpo", "final_eval"}
  # Every GRPO and final-evaluation episode of the trained policy re-executes to its reward.
  lines = [n for n, r in enumerate(records, start=1)
           if r["phase"] in ("grpo", "final_eval")][::25]
  for line in lines:
    replayed, problems = _replay.replay_workdir(workdir, line=line)
    assert replayed == 1 and not problems, problems


def test_a_buffer_too_short_for_retrieval_episodes_names_the_setting(tmp_path):
  values = _smoke_values()
  values["rollout"]["max_length"] = 128
  values["model"]["max_len"] = 128
  values["sft"]["num_demonstrations"] = 50
  with pytest.raises(pipeline.JobError, match=r"needs \d+ tokens, more than max_length=128; "
                     "raise rollout.max_length and model.max_len"):
    pipeline.train_and_evaluate(pipeline.config_from_dict(values), str(tmp_path / "run"))


@pytest.mark.parametrize("change, message", [
    ({"algorithm": "ppo"}, "task='retrieval' trains with algorithm='grpo'"),
    ({"soft_reward": {"weight": 0.3}}, "no learned reward"),
])
def test_retrieval_settings_it_cannot_train_with_are_refused(change, message):
  values = _smoke_values()
  values.update(change)
  with pytest.raises(pipeline.ConfigError, match=message):
    pipeline.config_from_dict(values)


def test_a_scripted_policy_on_the_calculator_is_refused():
  with pytest.raises(pipeline.ConfigError, match="plays on the retrieval or code-fix suite"):
    pipeline.config_from_dict({"scripted_policy": "pad"})
