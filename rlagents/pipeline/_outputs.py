"""The run's metrics writer and audit log, written by process 0 only (host code).

On resume from global step `r`, the files keep what was written up to `r`; a phase that
recomputes a step `<= r` (e.g. SFT re-run after its final checkpoint was found corrupt) does not
write it again. The final evaluation is always written again (the audit log drops it on resume).
"""

import os

import jax

from rlagents import guardrails
from rlagents import metrics as metrics_lib


class Outputs:
  """Metrics (`metrics.csv`, TensorBoard) and the hash-chained audit log of one run."""

  def __init__(self, workdir: str, resume_step: int | None, suite: str = "calculator"):
    self.resume_step = resume_step
    # Replay rebuilds an episode with its suite's tools; calculator records carry no name.
    self.suite_fields = {} if suite == "calculator" else {"suite": suite}
    self.primary = jax.process_index() == 0
    if self.primary:
      self._writer = metrics_lib.MetricsWriter(workdir, resume_step=resume_step)
      # Hash-chained: `guardrails.verify_audit_log` detects an edited line, and
      # `python -m experiments.replay` re-executes episodes from it.
      self._audit = guardrails.AuditLog(os.path.join(workdir, "audit", "episodes.jsonl"),
                                        resume_step=resume_step)

  def _new(self, step: int) -> bool:
    return self.primary and (self.resume_step is None or step > self.resume_step)

  def metrics(self, step: int, values) -> None:
    if self._new(step):
      self._writer.write(step, values)

  def episodes(self, episodes, *, phase: str, step: int, **fields) -> None:
    if self._new(step) or (self.primary and phase == "final_eval"):
      self._audit.write(episodes, phase=phase, step=step, **self.suite_fields, **fields)

  def close(self) -> None:
    if self.primary:
      self._writer.close()
