"""Summaries of finished, scored episodes."""

from typing import Sequence

import numpy as np

from rlagents import tools as tools_lib
from rlagents.episodes import Episode


def summarize_episodes(episodes: Sequence[Episode]) -> dict[str, float | None]:
  """End-to-end success and tool-use figures for scored episodes.

  Returns:
    success: fraction whose final answer verified.
    tool_call_validity: fraction of calls that parsed, named a known tool and had accepted
      arguments (a busy tool does not make a call invalid); None when no call was made.
    mean_tool_calls: calls per episode.
    redundant_calls: calls per episode that repeated an already successful call.
    no_tool_rate: fraction that answered without any call.
    unanswered_rate: fraction that ended without an answer.
    mean_reward: mean total reward.
    denied_calls: calls the guardrails refused (allow-list or review gate), in all.
    episodes: how many episodes.
    reward_terms: the mean of each reward term the episodes carry (e.g. the bug-fix suite's
      `test_runs` per episode and its detectors' flag rates).
  """
  if not episodes:
    raise ValueError("summarize_episodes needs at least one episode")
  calls = [r for e in episodes for r in e.calls]
  return {
      "success": float(np.mean([e.reward_terms["correct_answer"] for e in episodes])),
      "tool_call_validity": (float(np.mean([r.valid for r in calls])) if calls else None),
      "mean_tool_calls": len(calls) / len(episodes),
      "redundant_calls": float(np.mean([e.reward_terms["redundant_calls"] for e in episodes])),
      "no_tool_rate": float(np.mean([not e.calls for e in episodes])),
      "unanswered_rate": float(np.mean([e.answer is None for e in episodes])),
      "mean_reward": float(np.mean([e.reward for e in episodes])),
      "denied_calls": sum(r.status == tools_lib.CallStatus.DENIED for r in calls),
      "episodes": len(episodes),
      "reward_terms": {name: float(np.mean([e.reward_terms.get(name, 0.0) for e in episodes]))
                       for name in sorted({n for e in episodes for n in e.reward_terms})},
  }
