"""Scalar metrics to a CSV file and TensorBoard event files; learning curves to PNG."""

import csv
import os
from typing import Any, Mapping

import numpy as np


def read_csv(path: str) -> list[dict[str, Any]]:
  """Rows of a metrics CSV: `{"step": int, "name": str, "value": float}`."""
  if not os.path.exists(path):
    return []
  with open(path, newline="") as f:
    return [{"step": int(row["step"]), "name": row["name"], "value": float(row["value"])}
            for row in csv.DictReader(f)]


class MetricsWriter:
  """Writes `{name: scalar}` per step to `metrics.csv` (long format) and TensorBoard.

  The CSV has columns `step, name, value`, so rows with different metric names coexist. On resume
  from step `s`, rows after `s` (written after the last checkpoint) are dropped so the curves
  continue without duplicates.
  """

  def __init__(self, workdir: str, *, resume_step: int | None = None):
    from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
    self.csv_path = os.path.join(workdir, "metrics.csv")
    if resume_step is not None and os.path.exists(self.csv_path):
      kept = [r for r in read_csv(self.csv_path) if r["step"] <= resume_step]
      self._write_rows(kept, mode="w")
    elif resume_step is None and os.path.exists(self.csv_path):
      os.remove(self.csv_path)
    self._tb = SummaryWriter(os.path.join(workdir, "tensorboard"))

  def _write_rows(self, rows, mode="a"):
    new = not os.path.exists(self.csv_path) or mode == "w"
    with open(self.csv_path, mode, newline="") as f:
      writer = csv.writer(f)
      if new:
        writer.writerow(["step", "name", "value"])
      for row in rows:
        writer.writerow([int(row["step"]), row["name"], f"{row['value']:.6g}"])

  def write(self, step: int, metrics: Mapping[str, float]) -> None:
    rows = []
    for name, value in sorted(metrics.items()):
      value = float(np.asarray(value))
      rows.append({"step": step, "name": name, "value": value})
      self._tb.add_scalar(name, value, step)
    self._write_rows(rows)

  def close(self) -> None:
    self._tb.close()


def _series(rows, name):
  points = sorted((r["step"], r["value"]) for r in rows if r["name"] == name)
  return np.array([p[0] for p in points]), np.array([p[1] for p in points])


def plot_learning_curves(csv_path: str, png_path: str, *, panels: Mapping[str, list[str]],
                         markers: Mapping[str, float] | None = None) -> None:
  """Plots named metrics from a metrics CSV, one panel per key of `panels`.

  Args:
    csv_path: the metrics CSV (long format).
    png_path: where the PNG goes.
    panels: panel title -> metric names drawn in it.
    markers: label -> y value of a horizontal reference line drawn in every panel whose title
      contains "success" (e.g. the expert's success).
  """
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  rows = read_csv(csv_path)
  fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.6), squeeze=False)
  for ax, (title, names) in zip(axes[0], panels.items()):
    plotted = False
    for name in names:
      steps, values = _series(rows, name)
      if len(steps):
        ax.plot(steps, values, label=name, marker="." if len(steps) < 40 else None)
        plotted = True
    if markers and "success" in title:
      for label, y in markers.items():
        ax.axhline(y, linestyle="--", linewidth=1, color="gray")
        ax.annotate(label, (0, y), textcoords="offset points", xytext=(2, 2), fontsize=8)
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
    if plotted:
      ax.legend(fontsize=7)
    else:
      ax.text(0.5, 0.5, "not logged: " + ", ".join(names), ha="center", va="center",
              fontsize=7, wrap=True, transform=ax.transAxes)
  fig.tight_layout()
  fig.savefig(png_path, dpi=100)
  plt.close(fig)
