"""Replay reproduces the rewards of logged episodes of all three suites, and finds divergence."""

import json
import os

import numpy as np
import pytest

from rlagents import guardrails
from rlagents import pipeline
from rlagents import rewards
from rlagents import sandbox
from rlagents import tasks
from rlagents import tools
from rlagents.pipeline import _job
from rlagents.pipeline import _suites
from rlagents.tasks import calculator_expert


def _scripted_config(task, policy="honest"):
  return pipeline.config_from_dict({
      "task": task, "scripted_policy": policy, "eval": {"curve_tasks": 4},
      "retrieval": {"num_places": 30}, "codefix": {"num_tasks": 30}})


@pytest.fixture(scope="module")
def calculator_workdir(tmp_path_factory):
  """A calculator audit log written by the expert with busy tool failures (no training)."""
  workdir = str(tmp_path_factory.mktemp("calc"))
  config = pipeline.AgentJobConfig()
  with open(os.path.join(workdir, "config.json"), "w") as f:
    json.dump(pipeline.config_to_dict(config), f)
  suite = tasks.generate_suite(tasks.CalculatorSuiteConfig(
      num_train=60, num_heldout=4, num_heldout_ood=4, num_calibration=4, num_operands=2,
      max_digits=2, ood_num_operands=3))
  episodes = calculator_expert.run_expert_episodes(
      calculator_expert.NoisyExpert(), suite["train"][:40],
      toolbox=tools.ToolBox([tools.CalculatorTool(failure_rate=0.3)]),
      rng=np.random.default_rng(1), max_tool_calls=config.rollout.max_tool_calls)
  for e in episodes:
    e.reward_terms = rewards.reward_terms(e, tasks.is_correct)
    e.reward = rewards.compose_reward(e.reward_terms, config.reward)
  assert any(r.status == tools.CallStatus.TRANSIENT_ERROR for e in episodes for r in e.calls)
  log = guardrails.AuditLog(os.path.join(workdir, "audit", "episodes.jsonl"), resume_step=None)
  log.write(episodes, phase="grpo", step=1, policy="expert")
  return workdir


def _calculator_replay(config, workdir):
  """The calculator suite's replay recipe under `config`, its data in `workdir`."""
  return _suites.replay_suite(_job.load_suite(config, workdir), config)


def test_replay_reproduces_calculator_episodes(calculator_workdir):
  count, problems = pipeline.replay_workdir(calculator_workdir)
  assert count == 40 and not problems


@pytest.mark.parametrize("task, policy", [("retrieval", "honest"), ("retrieval", "copy"),
                                          ("codefix", "honest"), ("codefix", "edit_test")])
def test_replay_reproduces_job_episodes_of_the_other_suites(tmp_path, task, policy):
  report = pipeline.train_and_evaluate(_scripted_config(task, policy), str(tmp_path))
  assert set(report["splits"]) == {"train", "heldout", "calibration"}
  assert "detectors" in report["splits"]["heldout"]
  count, problems = pipeline.replay_workdir(str(tmp_path))
  assert count == sum(s["episodes"] for s in report["splits"].values()) >= 9
  assert not problems


def test_the_job_report_counts_detections(tmp_path):
  report = pipeline.train_and_evaluate(_scripted_config("codefix", "edit_test"), str(tmp_path))
  with open(tmp_path / "report.json") as f:
    assert json.load(f)["sandbox_isolation"] == sandbox.isolation_mode()
  for summary in report["splits"].values():
    assert summary["detectors"]["test_tampering"] == summary["episodes"] > 0
    assert summary["success"] == 0.0


def test_editing_a_logged_reward_is_detected_and_would_diverge(calculator_workdir, tmp_path):
  path = os.path.join(calculator_workdir, "audit", "episodes.jsonl")
  with open(path) as f:
    lines = f.read().splitlines()
  record = json.loads(lines[4])
  record["reward"] += 1.0
  edited = tmp_path / "audit" / "episodes.jsonl"
  edited.parent.mkdir()
  edited.write_text("\n".join(lines[:4] + [json.dumps(record)] + lines[5:]) + "\n")
  os.symlink(os.path.join(calculator_workdir, "config.json"), tmp_path / "config.json")
  with pytest.raises(guardrails.AuditTamperError, match="line 5 was edited"):
    pipeline.replay_workdir(str(tmp_path))
  # Past the chain check, replay itself names what differs.
  config = pipeline.AgentJobConfig()
  report = guardrails.replay_record(record, _calculator_replay(config, calculator_workdir))
  assert not report.reproduced and report.divergence.startswith("reward ")


def test_a_changed_tool_result_is_reported_where_it_diverges(calculator_workdir):
  records = guardrails.read_audit_log(
      os.path.join(calculator_workdir, "audit", "episodes.jsonl"))
  record = next(r for r in records if any(a["status"] == "ok" for a in r["actions"]))
  call = next(i for i, a in enumerate(record["actions"]) if a["status"] == "ok")
  record["actions"][call]["observation"] = "999999"
  report = guardrails.replay_record(
      record, _calculator_replay(pipeline.AgentJobConfig(), calculator_workdir))
  assert report.divergence.startswith(f"action {call}: observation")


def test_unknown_task_in_the_config_is_a_clear_error():
  with pytest.raises(pipeline.ConfigError, match="unknown task 'chess'; registered: bugfix, calculator, codefix, "
                     "keydoor, retrieval"):
    pipeline.config_from_dict({"task": "chess"})
  with pytest.raises(pipeline.ConfigError, match="scripted_policy must be '' .* or one of"):
    pipeline.config_from_dict({"task": "codefix", "scripted_policy": "cheat"})


def test_episodes_with_a_diversity_penalty_replay(calculator_workdir):
  # The penalty depends on the episode's group, so replay takes it from the log and applies
  # the config's weight; every other term and the answer are still recomputed.
  config = pipeline.config_from_dict({"diversity_weight": 0.25})
  suite = _calculator_replay(config, calculator_workdir)
  records = guardrails.read_audit_log(
      os.path.join(calculator_workdir, "audit", "episodes.jsonl"))[:8]
  for record in records:
    record["reward_terms"]["diversity"] = 0.5
    record["reward"] -= 0.25 * 0.5
    assert guardrails.replay_record(record, suite).reproduced
  # Without the weight (the default config) the same records diverge at the reward.
  default = _calculator_replay(pipeline.AgentJobConfig(), calculator_workdir)
  assert guardrails.replay_record(records[0], default).divergence.startswith("reward ")
