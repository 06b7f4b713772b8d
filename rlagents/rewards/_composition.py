"""The default reward of a tool-use episode: a verifiable gate plus light shaping (host code).

    reward = w_correct * [answer verified]
           + w_tool * [some call returned a result that verifies]      (the right tool, valid
                                                                        arguments, a useful result)
           + w_redundant * (number of calls repeating a call that had already succeeded)
           + w_invalid * (number of calls that were malformed, named an unknown tool or had
                          arguments the tool rejected)
           + w_recovery * [the tool failed transiently and the answer is still verified]

The recovery bonus counts only failures the agent did not cause (a busy tool it retried). A
failure of its own making earns no bonus and costs `w_invalid`: were a malformed call followed by
a good one worth a bonus, the optimizer would learn to fail on purpose and farm it.

Each term's raw value is logged beside the total, so a shaping term that starts to dominate the
gate (reward hacking by farming a bonus) shows up in the metrics.
"""

import dataclasses
from typing import Any, Callable

from rlagents import episodes as episodes_lib
from rlagents.tools import CallStatus

TERMS = ("correct_answer", "correct_tool_call", "redundant_calls", "invalid_calls", "recovery")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RewardConfig:
  """Weights of the reward terms.

  Attributes:
    correct_answer: weight of the verifiable gate (1 when the final answer verifies).
    correct_tool_call: bonus, once per episode, for a call whose result verifies.
    redundant_call: added per call that repeats an earlier successful call (a penalty: <= 0).
    invalid_call: added per malformed call, call to an unknown tool or call with rejected
      arguments (a penalty: <= 0; a busy tool is not the agent's fault and costs nothing).
    recovery: bonus when the tool failed transiently (busy) and the episode still ends correct.
  """
  correct_answer: float = 1.0
  correct_tool_call: float = 0.1
  redundant_call: float = -0.05
  invalid_call: float = -0.05
  recovery: float = 0.1

  def __post_init__(self):
    if self.correct_answer <= 0:
      raise ValueError(f"RewardConfig.correct_answer must be > 0, got {self.correct_answer}")
    for name in ("redundant_call", "invalid_call"):
      if getattr(self, name) > 0:
        raise ValueError(f"RewardConfig.{name} is a penalty and must be <= 0, got "
                         f"{getattr(self, name)}")
    for name in ("correct_tool_call", "recovery"):
      if getattr(self, name) < 0:
        raise ValueError(f"RewardConfig.{name} must be >= 0, got {getattr(self, name)}")


def reward_terms(episode: episodes_lib.Episode,
                 verify: Callable[[Any, str], bool]) -> dict[str, float]:
  """The raw (unweighted) value of every term for one finished episode."""
  calls = episode.calls
  correct = episode.answer is not None and verify(episode.task, episode.answer)
  useful_call = any(r.status == CallStatus.OK and verify(episode.task, r.observation)
                    for r in calls)
  redundant = 0
  succeeded = set()
  for r in calls:
    if r.status == CallStatus.OK:
      if r.call in succeeded:
        redundant += 1
      succeeded.add(r.call)
  invalid = sum(not r.valid for r in calls)
  tool_failed = any(r.status == CallStatus.TRANSIENT_ERROR for r in calls)
  return {
      "correct_answer": float(correct),
      "correct_tool_call": float(useful_call),
      "redundant_calls": float(redundant),
      "invalid_calls": float(invalid),
      "recovery": float(tool_failed and correct),
  }


def compose_reward(terms: dict[str, float], config: RewardConfig) -> float:
  """The weighted sum of the terms."""
  return (config.correct_answer * terms["correct_answer"]
          + config.correct_tool_call * terms["correct_tool_call"]
          + config.redundant_call * terms["redundant_calls"]
          + config.invalid_call * terms["invalid_calls"]
          + config.recovery * terms["recovery"])
