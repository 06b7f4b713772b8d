"""The default reward: each term on hand-built episodes, and that no shaping term can be farmed."""

import numpy as np
import pytest

from rlagents import episodes
from rlagents import rewards
from rlagents import tasks
from rlagents import tools

TASK = tasks.CalculatorTask(task_id="train-0", expression="12*3+4", answer=40, split="train",
                            num_operands=3, max_digits=2)


class _Busy(tools.CalculatorTool):
  """The calculator, busy on the first `busy_calls` well-formed calls."""

  def __init__(self, busy_calls: int):
    super().__init__()
    self.busy_left = busy_calls

  def __call__(self, arguments, rng):
    result = super().__call__(arguments, rng)
    if self.busy_left:
      self.busy_left -= 1
      raise tools.TransientToolError("busy, retry")
    return result


def _play(segments, busy_calls=0):
  toolbox = tools.ToolBox([_Busy(busy_calls)])
  episode = episodes.Episode(TASK)
  for segment in segments:
    episodes.advance(episode, segment, toolbox=toolbox, rng=np.random.default_rng(0),
                    max_tool_calls=4)
  episode.reward_terms = rewards.reward_terms(episode, tasks.is_correct)
  episode.reward = rewards.compose_reward(episode.reward_terms, rewards.RewardConfig())
  return episode


CALL = "<call>calc(12*3+4)</call>"
ANSWER = "<answer>40</answer>"


def test_clean_episode():
  episode = _play([CALL, ANSWER])
  assert episode.reward_terms == {"correct_answer": 1.0, "correct_tool_call": 1.0,
                                  "redundant_calls": 0.0, "invalid_calls": 0.0, "recovery": 0.0}
  assert episode.reward == pytest.approx(1.0 + 0.1)


def test_retry_after_busy_earns_the_recovery_bonus():
  episode = _play([CALL, CALL, ANSWER], busy_calls=1)
  assert episode.reward_terms["recovery"] == 1.0
  assert episode.reward_terms["redundant_calls"] == 0.0  # the busy call did not succeed
  assert episode.reward == pytest.approx(1.0 + 0.1 + 0.1)


def test_self_inflicted_failure_costs_and_earns_no_recovery():
  # A malformed call, then the right one: 1 + 0.1 (useful call) - 0.05 (invalid), no bonus, so
  # failing on purpose scores below the clean episode.
  episode = _play(["<call>calc(12*3+</call>", CALL, ANSWER])
  assert episode.reward_terms["invalid_calls"] == 1.0
  assert episode.reward_terms["recovery"] == 0.0
  assert episode.reward == pytest.approx(1.0 + 0.1 - 0.05)
  assert episode.reward < _play([CALL, ANSWER]).reward


def test_unknown_tool_and_bad_arguments_are_invalid():
  episode = _play(["<call>search(12*3+4)</call>", "<call>calc(12*x)</call>", CALL, ANSWER])
  assert episode.reward_terms["invalid_calls"] == 2.0


def test_redundant_calls_are_penalised_per_repeat():
  episode = _play([CALL, CALL, CALL, ANSWER])
  assert episode.reward_terms["redundant_calls"] == 2.0
  assert episode.reward == pytest.approx(1.0 + 0.1 - 2 * 0.05)


def test_wrong_answer_gets_only_the_call_bonus():
  episode = _play([CALL, "<answer>41</answer>"])
  assert episode.reward_terms["correct_answer"] == 0.0
  assert episode.reward == pytest.approx(0.1)


@pytest.mark.parametrize("field, value", [("invalid_call", 0.1), ("redundant_call", 0.5),
                                          ("correct_answer", 0.0), ("recovery", -1.0)])
def test_impossible_weights_are_rejected(field, value):
  with pytest.raises(ValueError, match=field):
    rewards.RewardConfig(**{field: value})
