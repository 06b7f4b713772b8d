r"""Re-executes logged episodes and checks they reproduce their rewards; verifies the chain first.

    python -m experiments.replay --workdir=/tmp/rlagents_calc            # every episode
    python -m experiments.replay --workdir=/tmp/codefix --line=3         # one line (1-based)

Prints one line per diverging episode and a summary; exits 1 when the log was edited or any
episode diverges.
"""

import json
import os
import sys

from absl import app
from absl import flags

from rlagents import guardrails
from rlagents import pipeline
from rlagents.pipeline import _suites

_WORKDIR = flags.DEFINE_string(
    "workdir", None, "The run's workdir (its audit/episodes.jsonl and config.json are read).",
    required=True)
_LINE = flags.DEFINE_integer("line", 0, "Replay only this line of the log (1-based; 0: all).")


def replay_workdir(workdir: str, line: int = 0) -> tuple[int, list[str]]:
  """Replays a run's audit log; returns (episodes replayed, divergence messages).

  Raises:
    guardrails.AuditTamperError: the log's hash chain is broken.
  """
  with open(os.path.join(workdir, "config.json")) as f:
    config = pipeline.config_from_dict(json.load(f))
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


def main(argv):
  del argv
  try:
    count, problems = replay_workdir(_WORKDIR.value, _LINE.value)
  except (guardrails.AuditTamperError, ValueError, FileNotFoundError) as e:
    sys.exit(f"error: {e}")
  for problem in problems:
    print(f"diverged: {problem}")
  print(f"replayed {count} episodes: {count - len(problems)} reproduced, "
        f"{len(problems)} diverged")
  if problems:
    sys.exit(1)


if __name__ == "__main__":
  app.run(main)
