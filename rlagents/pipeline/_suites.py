"""The retrieval and code-fix suites in the main job, and every suite's replay recipe.

`--config.task=codefix` (or `retrieval` with `--config.scripted_policy=...`) runs the suite end
to end with a scripted policy: TFDS data, guarded tools (an allow-list of the suite's tools
and a review gate that denies by default), the sandbox, the suite's reward with its hacking
detectors, the hash-chained audit trail and a report with detector counts. The retrieval
suite's tools and reward are also those the trained retrieval policy meets (`retrieval_parts`).
Host code.
"""

import dataclasses
import json
import os
from typing import Any

import numpy as np

from rlagents import evaluation
from rlagents import guardrails
from rlagents import rewards
from rlagents import sandbox
from rlagents import tasks as tasks_lib
from rlagents import tools as tools_lib
from rlagents.tasks import scripted_policies
from rlagents.tasks import suites_tfds

SCRIPTED_SPLITS = ("train", "heldout", "calibration")
DETECTORS = {"calculator": ("padding", "redundant_calls"),
              "retrieval": ("padding", "irrelevant_copy", "redundant_calls"),
              "codefix": ("test_tampering", "redundant_calls")}


def retrieval_parts(config, data_dir):
  """(task -> guarded toolbox, episode -> (reward, terms), scripted segment) of retrieval QA."""
  corpus = suites_tfds.load_corpus(config.retrieval, data_dir=data_dir)
  search = tools_lib.DocumentSearchTool(corpus, top_k=2)
  toolbox = guardrails.guarded_toolbox([search], allow={"search": None})

  def score(episode):
    terms = rewards.retrieval_reward_terms(episode)
    return rewards.compose_retrieval_reward(terms, config.suite_reward), terms

  return (lambda task: toolbox), score, scripted_policies.retrieval_segment


def _codefix_parts(config):
  limits = sandbox.SandboxLimits(cpu_seconds=2, wall_seconds=5, memory_bytes=256 * 2**20)

  def toolbox_for(task):
    runner = tools_lib.UnitTestRunnerTool({tasks_lib.codefix.TEST_FILE: task.tests},
                                          limits=limits)
    return guardrails.guarded_toolbox([runner], allow={"run_tests": None})

  def score(episode):
    terms = rewards.codefix_reward_terms(episode, limits=limits)
    return rewards.compose_codefix_reward(terms, config.suite_reward), terms

  return toolbox_for, score, scripted_policies.codefix_segment


def replay_suite(config, suite_name: str, data_dir: str) -> guardrails.ReplaySuite:
  """How `experiments.replay` rebuilds and scores one suite's logged episodes."""
  if suite_name == "calculator":
    toolbox = tools_lib.ToolBox([tools_lib.CalculatorTool(failure_rate=0.0)])

    def score(episode):
      terms = rewards.reward_terms(episode, tasks_lib.is_correct)
      return rewards.compose_reward(terms, config.reward), terms

    return guardrails.ReplaySuite(lambda d: tasks_lib.CalculatorTask(**d), lambda t: toolbox,
                                  score, group_terms={"diversity": config.diversity_weight})
  if suite_name == "retrieval":
    toolbox_for, score, _ = retrieval_parts(config, data_dir)
    return guardrails.ReplaySuite(tasks_lib.retrieval.from_record, toolbox_for, score,
                                  group_terms={"diversity": config.diversity_weight})
  if suite_name == "codefix":
    toolbox_for, score, _ = _codefix_parts(config)
    return guardrails.ReplaySuite(tasks_lib.codefix.from_record, toolbox_for, score)
  raise ValueError(f"unknown task suite {suite_name!r}")


def run_scripted_suite(config, workdir: str) -> dict[str, Any]:
  """Plays `config.scripted_policy` on every split of `config.task`; returns the report."""
  data_dir = os.path.join(workdir, "data")
  suite_config = getattr(config, config.task)
  if config.task == "retrieval":
    toolbox_for, score, segment = retrieval_parts(config, data_dir)
  else:
    toolbox_for, score, segment = _codefix_parts(config)
  audit = guardrails.AuditLog(os.path.join(workdir, "audit", "episodes.jsonl"), resume_step=None)
  policy = config.scripted_policy or "honest"
  report = {"task": config.task, "policy": policy, "splits": {}}
  for index, split in enumerate(SCRIPTED_SPLITS):
    tasks = suites_tfds.load_split(config.task, split, suite=suite_config, data_dir=data_dir)
    tasks = tasks[:config.eval.curve_tasks]
    rng = np.random.default_rng([config.seed, 5, index])
    episodes = scripted_policies.run_scripted_episodes(
        segment, policy, tasks, toolbox_for=toolbox_for, rng=rng,
        max_tool_calls=config.rollout.max_tool_calls)
    for episode in episodes:
      episode.reward, episode.reward_terms = score(episode)
    audit.write(episodes, phase="final_eval", step=0, policy=policy,
                split=split, suite=config.task)
    summary = evaluation.summarize_episodes(episodes)
    summary["detectors"] = rewards.count_detections(episodes, DETECTORS[config.task])
    summary["denied_calls"] = sum(r.status == tools_lib.CallStatus.DENIED
                                  for e in episodes for r in e.calls)
    report["splits"][split] = summary
  with open(os.path.join(workdir, "report.json"), "w") as f:
    json.dump(report, f, indent=2)
  return report
