r"""Re-executes logged episodes and checks they reproduce their rewards; verifies the chain first.

    python -m experiments.replay --workdir=/tmp/rlagents_calc            # every episode
    python -m experiments.replay --workdir=/tmp/codefix --line=3         # one line (1-based)

Prints one line per diverging episode and a summary; exits 1 when the log was edited or any
episode diverges.
"""

import sys

from absl import app
from absl import flags

from rlagents import guardrails
from rlagents import pipeline

_WORKDIR = flags.DEFINE_string(
    "workdir", None, "The run's workdir (its audit/episodes.jsonl and config.json are read).",
    required=True)
_LINE = flags.DEFINE_integer("line", 0, "Replay only this line of the log (1-based; 0: all).")


def main(argv):
  del argv
  try:
    count, problems = pipeline.replay_workdir(_WORKDIR.value, _LINE.value)
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
