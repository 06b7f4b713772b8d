r"""Prints a Markdown table of several runs' `report.json` (e.g. seeds), median with min-max.

    python -m experiments.summarize_runs /tmp/seed0 /tmp/seed1 /tmp/seed2
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
  if len(sys.argv) < 2:
    sys.exit("usage: python -m experiments.summarize_runs WORKDIR [WORKDIR ...]")
  print(table(sys.argv[1:]))
