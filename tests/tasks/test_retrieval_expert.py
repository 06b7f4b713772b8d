"""The retrieval suite's noisy demonstrator: honest when told to be, its slips caught by the reward."""

import dataclasses

import numpy as np
import pytest

from rlagents import evaluation
from rlagents import guardrails
from rlagents import rewards
from rlagents import tools
from rlagents.tasks import retrieval
from rlagents.tasks import retrieval_expert

SUITE = retrieval.RetrievalSuiteConfig(num_places=100)
NO_SLIPS = retrieval_expert.RetrievalExpertConfig(
    skip_search_rate=0.0, wrong_keyword_rate=0.0, wrong_passage_rate=0.0, typo_rate=0.0,
    redundant_rate=0.0)


def _play(config, seed=0):
  corpus, splits = retrieval.generate_suite(SUITE)
  toolbox = guardrails.guarded_toolbox([tools.DocumentSearchTool(corpus, top_k=2)],
                                       allow={"search": None})
  episodes = retrieval_expert.run_expert_episodes(
      retrieval_expert.RetrievalExpert(config), splits["train"], toolbox=toolbox,
      rng=np.random.default_rng(seed), max_tool_calls=3)
  for episode in episodes:
    episode.reward_terms = rewards.retrieval_reward_terms(episode)
    episode.reward = rewards.compose_retrieval_reward(episode.reward_terms,
                                                      rewards.SuiteRewardConfig())
  return episodes


def test_without_slips_every_answer_is_right_and_grounded():
  episodes = _play(NO_SLIPS)
  assert all(e.reward_terms["correct_answer"] == 1.0 for e in episodes)
  assert all(len(e.calls) == 1 for e in episodes)
  # The query is the fact's keyword and the place, not the question.
  assert episodes[0].calls[0].call.arguments.split()[0] in ("capital", "founded", "river")


@pytest.mark.parametrize("slip, caught_by", [
    ("skip_search_rate", "correct_answer"),
    ("wrong_passage_rate", "correct_answer"),
    ("typo_rate", "correct_answer"),
    ("redundant_rate", "redundant_calls"),
])
def test_each_slip_costs_reward(slip, caught_by):
  episodes = _play(dataclasses.replace(NO_SLIPS, **{slip: 1.0}))
  terms = [e.reward_terms[caught_by] for e in episodes]
  if caught_by == "correct_answer":
    assert np.mean(terms) == 0.0
  else:
    assert np.mean(terms) == 1.0
  assert np.mean([e.reward for e in episodes]) < 1.0


def test_default_expert_is_right_about_two_thirds_of_the_time():
  summary = evaluation.summarize_episodes(_play(retrieval_expert.RetrievalExpertConfig()))
  assert 0.5 < summary["success"] < 0.75
  assert 0.1 < summary["no_tool_rate"] < 0.25


def test_a_rate_outside_zero_one_is_named():
  with pytest.raises(ValueError, match="RetrievalExpertConfig.typo_rate must be in"):
    retrieval_expert.RetrievalExpertConfig(typo_rate=1.5)


def test_a_question_the_suite_does_not_ask_is_an_error():
  with pytest.raises(ValueError, match="not a retrieval-suite question"):
    retrieval_expert.parse_question("who is the mayor of velora?")
