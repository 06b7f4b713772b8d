"""The audit trail: one hash-chained JSON line per episode (host code).

Each line is a JSON object with the episode's record (`Episode.to_record`: task, prompt, every
action with its state, tool, arguments, result and guardrail decision, the answer and the reward
terms), the caller's fields (`phase`, `step`, `suite`, ...), and

    prev: the hash of the line before (64 zeros for the first)
    hash: sha256 of `prev` + the canonical JSON of the line without `hash`

so editing, removing or reordering a line breaks the chain from there on, and
`verify_audit_log` names the first bad line.
"""

import hashlib
import json
import os
from typing import Any, Iterable

GENESIS = "0" * 64


class AuditTamperError(ValueError):
  """The audit log's hash chain is broken at a line."""


def _line_hash(prev: str, record: dict[str, Any]) -> str:
  body = json.dumps({k: v for k, v in record.items() if k != "hash"}, sort_keys=True,
                    separators=(",", ":"))
  return hashlib.sha256((prev + body).encode()).hexdigest()


def read_audit_log(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
  """Every record, after checking the chain.

  Raises:
    AuditTamperError: naming the first line (1-based) that is not valid JSON or whose hash or
      link to the previous line does not match.
  """
  records = []
  prev = GENESIS
  with open(path) as f:
    for number, line in enumerate(f, start=1):
      if not line.strip():
        continue
      try:
        record = json.loads(line)
      except json.JSONDecodeError as e:
        raise AuditTamperError(f"{path}: line {number} is not valid JSON ({e.msg})") from e
      if not isinstance(record, dict) or record.get("prev") != prev:
        raise AuditTamperError(f"{path}: line {number} does not follow line {number - 1} "
                               "(a line was removed, reordered or edited)")
      if record.get("hash") != _line_hash(prev, record):
        raise AuditTamperError(f"{path}: line {number} was edited (its hash does not match)")
      prev = record["hash"]
      records.append(record)
  return records


def verify_audit_log(path: str | os.PathLike[str]) -> int:
  """The number of records if the chain holds; raises `AuditTamperError` otherwise."""
  return len(read_audit_log(path))


class AuditLog:
  """Appends hash-chained episode records; on resume keeps only lines up to the checkpoint.

  Args:
    path: the JSONL file.
    resume_step: None starts a fresh log; otherwise lines with `step > resume_step`, and
      `final_eval` lines (the final evaluation always runs again), are dropped. What is kept is
      a prefix-preserving filter re-chained from the start, after the old chain was verified.
  """

  def __init__(self, path: str, *, resume_step: int | None):
    self.path = path
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    self._prev = GENESIS
    if resume_step is None or not os.path.exists(path):
      open(path, "w").close()
      return
    kept = [r for r in read_audit_log(path)
            if r["step"] <= resume_step and r["phase"] != "final_eval"]
    open(path, "w").close()
    self._append([{k: v for k, v in r.items() if k not in ("prev", "hash")} for r in kept])

  def _append(self, records: Iterable[dict[str, Any]]) -> None:
    with open(self.path, "a") as f:
      for record in records:
        record = {**record, "prev": self._prev}
        record["hash"] = _line_hash(self._prev, record)
        self._prev = record["hash"]
        f.write(json.dumps(record, sort_keys=True) + "\n")

  def write(self, episodes, **fields: Any) -> None:
    """One line per episode: `{**fields, **episode.to_record()}`."""
    self._append({**fields, **episode.to_record()} for episode in episodes)
