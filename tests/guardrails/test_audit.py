"""The hash-chained audit log: an edited, removed or reordered line is detected."""

import json

import numpy as np
import pytest

from rlagents import guardrails
from rlagents import tasks
from rlagents import tools
from rlagents.tasks import calculator_expert


def _episodes(n=6):
  suite = tasks.generate_suite(tasks.CalculatorSuiteConfig(
      num_train=40, num_heldout=4, num_heldout_ood=4, num_calibration=4, num_operands=2,
      max_digits=2, ood_num_operands=3))
  return calculator_expert.run_expert_episodes(
      calculator_expert.NoisyExpert(), suite["train"][:n],
      toolbox=tools.ToolBox([tools.CalculatorTool(failure_rate=0.3)]),
      rng=np.random.default_rng(0), max_tool_calls=3)


@pytest.fixture
def log_path(tmp_path):
  path = tmp_path / "audit" / "episodes.jsonl"
  log = guardrails.AuditLog(str(path), resume_step=None)
  log.write(_episodes()[:3], phase="grpo", step=1)
  log.write(_episodes()[3:], phase="grpo", step=2)
  return path


def test_an_untouched_log_verifies(log_path):
  records = guardrails.read_audit_log(log_path)
  assert len(records) == 6
  assert records[0]["prev"] == "0" * 64
  assert all(r["prev"] == p["hash"] for p, r in zip(records, records[1:]))
  assert records[0]["actions"][0]["state"].startswith("<bos>")
  assert records[0]["actions"][0]["guardrail"] == "allowed"


def test_editing_a_line_is_detected(log_path):
  lines = log_path.read_text().splitlines()
  record = json.loads(lines[3])
  record["reward"] = 5.0
  lines[3] = json.dumps(record, sort_keys=True)
  log_path.write_text("\n".join(lines) + "\n")
  with pytest.raises(guardrails.AuditTamperError, match="line 4 was edited"):
    guardrails.verify_audit_log(log_path)


def test_removing_or_reordering_lines_is_detected(log_path):
  lines = log_path.read_text().splitlines()
  log_path.write_text("\n".join(lines[:2] + lines[3:]) + "\n")
  with pytest.raises(guardrails.AuditTamperError, match="line 3 does not follow"):
    guardrails.verify_audit_log(log_path)


def test_resume_keeps_a_valid_chain(log_path):
  log = guardrails.AuditLog(str(log_path), resume_step=1)
  assert guardrails.verify_audit_log(log_path) == 3
  log.write(_episodes()[:2], phase="grpo", step=2)
  assert guardrails.verify_audit_log(log_path) == 5
