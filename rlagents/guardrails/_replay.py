"""Replay: re-executes a logged episode and checks that it reproduces the logged reward.

Each action of the record is fed again, in order, through the episode state machine
(`episodes.advance`) with fresh tools; every deterministic tool result must equal the logged one.
A transient failure (the calculator's "busy") is the environment's own randomness, so it is
taken from the log instead of drawn again (and one the log does not have is drawn away). The
reward is then recomputed by the suite's scorer.
Host code.
"""

import dataclasses
import math
from typing import Any, Callable, Mapping

import numpy as np

from rlagents import tools as tools_lib
from rlagents import episodes as episodes_lib


@dataclasses.dataclass(frozen=True)
class ReplaySuite:
  """How to rebuild and score the episodes of one task suite.

  Attributes:
    task_from_dict: rebuilds a task from the record's `task` field.
    make_toolbox: `make_toolbox(task)` -> the tools of that episode (deterministic ones).
    score: `score(episode)` -> `(reward, reward_terms)`.
    group_terms: weights of reward terms that depend on the episode's whole group (the
      diversity penalty) and so cannot be recomputed from one episode: their logged values
      are taken as logged and subtracted with these weights.
  """
  task_from_dict: Callable[[Mapping[str, Any]], Any]
  make_toolbox: Callable[[Any], tools_lib.ToolBox]
  score: Callable[[episodes_lib.Episode], tuple[float, dict[str, float]]]
  group_terms: Mapping[str, float] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class ReplayReport:
  """The outcome of replaying one record.

  Attributes:
    reproduced: whether every action, the answer and the reward matched the log.
    divergence: where it first differed (None when reproduced).
    reward: the recomputed reward (None when replay stopped before scoring).
    logged_reward: the reward in the log.
  """
  reproduced: bool
  divergence: str | None
  reward: float | None
  logged_reward: float


_MAX_REDRAWS = 100


class _LoggedTransients:
  """Wraps a toolbox so logged transient failures are returned as logged."""

  def __init__(self, toolbox: tools_lib.ToolBox, logged_calls: list[dict[str, Any]]):
    self.toolbox = toolbox
    self.logged = logged_calls
    self.index = 0

  @property
  def specs(self) -> tuple[tools_lib.ToolSpec, ...]:
    return self.toolbox.specs

  def execute(self, call_text: str, rng: np.random.Generator) -> tools_lib.ToolResult:
    logged = self.logged[self.index] if self.index < len(self.logged) else None
    self.index += 1
    result = self.toolbox.execute(call_text, rng)
    # A transient failure drawn now that the log does not have is drawn again: the tool's
    # own randomness is the log's, not the replay's.
    for _ in range(_MAX_REDRAWS):
      if (result.status != tools_lib.CallStatus.TRANSIENT_ERROR or logged is None
          or logged["status"] == tools_lib.CallStatus.TRANSIENT_ERROR.value):
        break
      result = self.toolbox.execute(call_text, rng)
    if (logged is not None and logged["status"] == tools_lib.CallStatus.TRANSIENT_ERROR.value
        and result.status == tools_lib.CallStatus.OK):
      return tools_lib.ToolResult(result.call, tools_lib.CallStatus.TRANSIENT_ERROR,
                                  logged["observation"], result.guardrail)
    return result


def replay_record(record: Mapping[str, Any], suite: ReplaySuite, *,
                  max_tool_calls: int = 64, tolerance: float = 1e-6) -> ReplayReport:
  """Re-executes one audit record; see the module docstring."""
  logged_reward = float(record["reward"])
  if record.get("task") is None:
    return ReplayReport(False, "the record has no task fields to rebuild it from", None,
                        logged_reward)
  task = suite.task_from_dict(record["task"])
  calls = [a for a in record["actions"] if a["kind"] == "call"]
  toolbox = _LoggedTransients(suite.make_toolbox(task), calls)
  episode = episodes_lib.Episode(task, syntax=record.get("syntax", "marker"))
  rng = np.random.default_rng(0)
  for index, action in enumerate(record["actions"]):
    if episode.done:
      return ReplayReport(False, f"action {index}: the episode had already ended", None,
                          logged_reward)
    if action["kind"] == "truncated":
      episodes_lib.end_unanswered(episode, action["text"])
      continue
    episodes_lib.advance(episode, action["text"], toolbox=toolbox, rng=rng,
                     max_tool_calls=max_tool_calls)
    replayed = episode.actions[-1]
    if replayed.kind != action["kind"]:
      return ReplayReport(False, f"action {index}: kind {replayed.kind!r}, logged "
                          f"{action['kind']!r}", None, logged_reward)
    if replayed.result is not None:
      for field, value in (("status", replayed.result.status.value),
                           ("observation", replayed.result.observation),
                           ("guardrail", replayed.result.guardrail)):
        if action.get(field) is not None and value != action[field]:
          return ReplayReport(False, f"action {index}: {field} {value!r}, logged "
                              f"{action[field]!r}", None, logged_reward)
  if not episode.done:
    episodes_lib.end_unanswered(episode)
  if episode.answer != record["answer"]:
    return ReplayReport(False, f"answer {episode.answer!r}, logged {record['answer']!r}", None,
                        logged_reward)
  reward, terms = suite.score(episode)
  for name, weight in suite.group_terms.items():
    reward -= weight * record["reward_terms"].get(name, 0.0)
  for name, value in terms.items():
    logged = record["reward_terms"].get(name)
    if logged is None or not math.isclose(value, logged, abs_tol=tolerance):
      return ReplayReport(False, f"reward term {name}: {value}, logged {logged}", reward,
                          logged_reward)
  if not math.isclose(reward, logged_reward, abs_tol=tolerance):
    return ReplayReport(False, f"reward {reward}, logged {logged_reward}", reward, logged_reward)
  return ReplayReport(True, None, reward, logged_reward)
