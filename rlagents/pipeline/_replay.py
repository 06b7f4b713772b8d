"""Replay of a run's audit log: every logged episode re-executed, its reward recomputed."""

import json
import os

from rlagents import guardrails
from rlagents.pipeline import _job as job_lib
from rlagents.pipeline import _suites
from rlagents.pipeline import _validate


def replay_workdir(workdir: str, line: int = 0) -> tuple[int, list[str]]:
  """Replays a run's audit log; returns (episodes replayed, divergence messages).

  The suite is rebuilt from the run's config (a user's suite from its module path), its data
  from the run's `data/`; episodes of every phase replay the same way, those that ran inside
  jit included (their records are host replays already). Records marked `imagined` (episodes
  in a learned simulator, `algorithm='grpo_dyna'`) are left out: no real tool produced them;
  so are self-play proposer records (`role='proposer'`): they answer with a task, which the
  solver episodes of that task (replayed) verify.

  Raises:
    guardrails.AuditTamperError: the log's hash chain is broken.
  """
  with open(os.path.join(workdir, "config.json")) as f:
    config = _validate.config_from_dict(json.load(f))
  records = guardrails.read_audit_log(os.path.join(workdir, "audit", "episodes.jsonl"))
  chosen = list(enumerate(records, start=1))
  if line:
    if not 1 <= line <= len(records):
      raise ValueError(f"--line={line} is outside the log's {len(records)} lines")
    chosen = [chosen[line - 1]]
  chosen = [(number, record) for number, record in chosen
            if not record.get("imagined") and record.get("role") != "proposer"]
  suite = job_lib.load_suite(config, workdir)
  recipe = _suites.replay_suite(suite, config)
  problems = []
  for number, record in chosen:
    name = record.get("suite", "calculator")
    if name != suite.name:
      problems.append(f"line {number} ({record['task_id']}): suite {name!r}, the run's is "
                      f"{suite.name!r}")
      continue
    report = guardrails.replay_record(record, recipe,
                                      max_tool_calls=config.rollout.max_tool_calls)
    if not report.reproduced:
      problems.append(f"line {number} ({record['task_id']}): {report.divergence}")
  return len(chosen), problems
