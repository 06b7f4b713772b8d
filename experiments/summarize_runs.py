r"""Prints a Markdown table of several runs' `report.json` (e.g. seeds), median with min-max.

    python -m experiments.summarize_runs /tmp/seed0 /tmp/seed1 /tmp/seed2

Usage: python -m experiments.summarize_runs WORKDIR [WORKDIR ...], each a finished
`experiments.train_agent` workdir (it reads their report.json).
"""

import json
import os
import sys

import numpy as np

_ROWS = (
    ("heldout", "success"), ("heldout", "greedy_success"), ("heldout_ood", "success"),
    ("calibration", "success"), ("heldout", "tool_call_validity"),
    ("heldout", "mean_tool_calls"), ("heldout", "redundant_calls"), ("heldout", "no_tool_rate"),
)
_POLICIES = ("expert", "sft", "grpo")


def _cell(values):
  values = [v for v in values if v is not None]
  if not values:
    return "-"
  median = float(np.median(values))
  if len(values) == 1:
    return f"{median:.3f}"
  return f"{median:.3f} ({min(values):.3f}-{max(values):.3f})"


def table(workdirs) -> str:
  reports = []
  for workdir in workdirs:
    with open(os.path.join(workdir, "report.json")) as f:
      reports.append(json.load(f))
  lines = ["| split: figure | " + " | ".join(_POLICIES) + " |",
           "|---|" + "---|" * len(_POLICIES)]
  for split, figure in _ROWS:
    cells = [_cell([r["splits"][split][p].get(figure) for r in reports]) for p in _POLICIES]
    lines.append(f"| {split}: {figure} | " + " | ".join(cells) + " |")
  return "\n".join(lines)


if __name__ == "__main__":
  if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help", "--helpfull"):
    print(__doc__.strip())
    sys.exit(0 if len(sys.argv) > 1 else "error: give one or more workdirs")
  missing = [w for w in sys.argv[1:] if not os.path.exists(os.path.join(w, "report.json"))]
  if missing:
    sys.exit(f"error: no report.json in {', '.join(missing)} (a finished train_agent workdir "
             f"holds one)")
  print(table(sys.argv[1:]))
