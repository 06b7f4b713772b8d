"""Replay of a run's audit log: every logged episode re-executed, its reward recomputed."""

import json
import os

from rlagents import guardrails
from rlagents.pipeline import _config
from rlagents.pipeline import _suites


def replay_workdir(workdir: str, line: int = 0) -> tuple[int, list[str]]:
  """Replays a run's audit log; returns (episodes replayed, divergence messages).

  Raises:
    guardrails.AuditTamperError: the log's hash chain is broken.
  """
  with open(os.path.join(workdir, "config.json")) as f:
    config = _config.config_from_dict(json.load(f))
  records = guardrails.read_audit_log(os.path.join(workdir, "audit", "episodes.jsonl"))
  chosen = list(enumerate(records, start=1))
  if line:
    if not 1 <= line <= len(records):
      raise ValueError(f"--line={line} is outside the log's {len(records)} lines")
    chosen = [chosen[line - 1]]
  suites, problems = {}, []
  for number, record in chosen:
    name = record.get("suite", "calculator")
    if name not in suites:
      suites[name] = _suites.replay_suite(config, name, os.path.join(workdir, "data"))
    report = guardrails.replay_record(record, suites[name],
                                      max_tool_calls=config.rollout.max_tool_calls)
    if not report.reproduced:
      problems.append(f"line {number} ({record['task_id']}): {report.divergence}")
  return len(chosen), problems
