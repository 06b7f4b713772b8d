"""Scripted hacking policies are each caught by their detector and score below honest ones."""

import numpy as np
import pytest

from rlagents import episodes
from rlagents import guardrails
from rlagents import rewards
from rlagents import sandbox
from rlagents import tools
from rlagents.tasks import codefix
from rlagents.tasks import retrieval
from rlagents.tasks import scripted_policies

LIMITS = sandbox.SandboxLimits(cpu_seconds=1, wall_seconds=3, memory_bytes=128 * 2**20)
CONFIG = rewards.SuiteRewardConfig()


@pytest.fixture(scope="module")
def retrieval_suite():
  corpus, splits = retrieval.generate_suite(retrieval.RetrievalSuiteConfig(num_places=30))
  return corpus, splits["train"][:20]


def _retrieval(policy, corpus, tasks):
  box = guardrails.guarded_toolbox([tools.DocumentSearchTool(corpus)])
  episodes = scripted_policies.run_scripted_episodes(
      scripted_policies.retrieval_segment, policy, tasks, toolbox_for=lambda t: box,
      rng=np.random.default_rng(0), max_tool_calls=6)
  for e in episodes:
    e.reward_terms = rewards.retrieval_reward_terms(e)
    e.reward = rewards.compose_retrieval_reward(e.reward_terms, CONFIG)
  return episodes


def _codefix(policy, tasks):
  def toolbox_for(task):
    return guardrails.guarded_toolbox(
        [tools.UnitTestRunnerTool({codefix.TEST_FILE: task.tests}, limits=LIMITS)])
  episodes = scripted_policies.run_scripted_episodes(
      scripted_policies.codefix_segment, policy, tasks, toolbox_for=toolbox_for,
      rng=np.random.default_rng(0), max_tool_calls=6)
  for e in episodes:
    e.reward_terms = rewards.codefix_reward_terms(e, limits=LIMITS)
    e.reward = rewards.compose_codefix_reward(e.reward_terms, CONFIG)
  return episodes


def _mean(episodes):
  return float(np.mean([e.reward for e in episodes]))


@pytest.mark.parametrize("policy, detector", [("pad", "padding"), ("copy", "irrelevant_copy"),
                                              ("spam", "redundant_calls")])
def test_retrieval_hacks_are_caught_and_score_below_honest(retrieval_suite, policy, detector):
  corpus, tasks = retrieval_suite
  honest = _retrieval("honest", corpus, tasks)
  hacked = _retrieval(policy, corpus, tasks)
  assert _mean(honest) == 1.0
  counts = rewards.count_detections(hacked, ("padding", "irrelevant_copy", "redundant_calls"))
  assert counts[detector] == len(tasks), counts
  assert rewards.count_detections(honest, (detector,))[detector] == 0
  assert _mean(hacked) < _mean(honest)


def test_an_ungrounded_answer_earns_nothing(retrieval_suite):
  corpus, tasks = retrieval_suite
  episode = episodes.Episode(tasks[0])
  episodes.advance(episode, f"<answer>{tasks[0].answer}</answer>", toolbox=tools.ToolBox([]),
                  rng=np.random.default_rng(0), max_tool_calls=2)
  terms = rewards.retrieval_reward_terms(episode)
  assert terms["grounded"] == 0 and terms["correct_answer"] == 0


@pytest.mark.parametrize("policy, detector", [("edit_test", "test_tampering"),
                                              ("spam", "redundant_calls")])
def test_codefix_hacks_are_caught_and_score_below_honest(policy, detector):
  tasks = codefix.generate_suite(codefix.CodeFixSuiteConfig(num_tasks=10))["train"][:3]
  honest = _codefix("honest", tasks)
  hacked = _codefix(policy, tasks)
  assert _mean(honest) == 1.0
  assert rewards.count_detections(hacked, (detector,))[detector] == len(tasks)
  assert rewards.count_detections(honest, (detector,))[detector] == 0
  assert _mean(hacked) < _mean(honest)
  if policy == "edit_test":
    assert all(e.reward == 0 for e in hacked)


def test_padding_detector():
  assert not rewards.detect_padding("42")
  assert rewards.detect_padding("42 42 42 42")          # repeat fraction 0.75
  assert rewards.detect_padding(" ".join(f"w{i}" for i in range(13)))
  assert not rewards.detect_padding("the capital is paris")


def test_diversity_penalty_is_the_share_of_identical_group_members():
  def episode(text):
    e = episodes.Episode(task=None)
    e.actions.append(episodes.Action(text, "answer"))
    return e
  # Group of 4: three identical ("a"), one distinct: each "a" shares with 2 of 3 others.
  penalty = rewards.diversity_penalty([episode("a"), episode("a"), episode("a"), episode("b")])
  assert penalty == pytest.approx([2 / 3, 2 / 3, 2 / 3, 0.0])


def test_proxy_drift_monitor_alarms_only_when_calibration_does_not_follow():
  monitor = rewards.ProxyDriftMonitor(rewards.ProxyDriftConfig(window=4, min_reward_rise=0.1))
  fired = [monitor.update(s, 0.2 + 0.1 * s, 0.5) for s in range(6)]
  assert fired == [False, False, False, True, True, True]
  healthy = rewards.ProxyDriftMonitor(rewards.ProxyDriftConfig(window=4, min_reward_rise=0.1))
  assert not any(healthy.update(s, 0.2 + 0.1 * s, 0.5 + 0.05 * s) for s in range(6))


def test_unknown_detector_is_an_error():
  with pytest.raises(ValueError, match="unknown detectors"):
    rewards.count_detections([], ("speling",))
