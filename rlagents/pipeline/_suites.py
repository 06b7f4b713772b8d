"""The built-in task suites (calculator, retrieval, code-fix, key-door) as registry entries, their replay
recipes, and scripted play.

Each factory reads what it needs of the job's config and returns a `tasks.TaskSuite`; the tools
it hands out are guarded (an allow-list of the suite's tools and a review gate that denies
gated calls, since nobody reviews during training). `--config.task=codefix` (or `retrieval`
with `--config.scripted_policy=...`) plays a scripted policy through the same suite: TFDS data,
guarded tools, the sandbox, the suite's reward with its hacking detectors, the audit trail and
a report with detector counts. Host code.
"""

import json
import os
from typing import Any

import numpy as np

from rlagents import envs
from rlagents import evaluation
from rlagents import guardrails
from rlagents import rewards
from rlagents import sandbox
from rlagents import tasks as tasks_lib
from rlagents import tools as tools_lib
from rlagents.tasks import calculator_expert
from rlagents.tasks import keydoor
from rlagents.tasks import retrieval_expert
from rlagents.tasks import scripted_policies
from rlagents.tasks import suites_tfds

SCRIPTED_SPLITS = ("train", "heldout", "calibration")


def calculator_suite(config, data_dir: str) -> tasks_lib.TaskSuite:
  """Arithmetic word problems with a calculator (a transiently failing one in training)."""
  eval_splits = ("heldout", "heldout_ood", "calibration")
  splits = {split: tasks_lib.load_split(split, config=config.tasks, data_dir=data_dir)
            for split in ("train",) + eval_splits}
  toolbox = guardrails.guarded_toolbox(
      [tools_lib.CalculatorTool(failure_rate=config.tool_failure_rate)], allow={"calc": None})
  expert = calculator_expert.NoisyExpert(config.expert)

  def score(episode):
    terms = rewards.reward_terms(episode, tasks_lib.is_correct)
    return rewards.compose_reward(terms, config.reward), terms

  def play_expert(tasks, rng, max_tool_calls):
    return calculator_expert.run_expert_episodes(expert, tasks, toolbox=toolbox, rng=rng,
                                                 max_tool_calls=max_tool_calls)

  def jax_env(tasks, tokenizer, rollout_config):
    return envs.CalculatorTextEnv.from_tasks(
        tasks, tokenizer, max_length=rollout_config.max_length,
        max_tool_calls=rollout_config.max_tool_calls,
        max_segment_tokens=rollout_config.max_segment_tokens,
        failure_rate=config.tool_failure_rate)

  return tasks_lib.TaskSuite(
      name="calculator", splits=splits, eval_splits=eval_splits, toolbox_for=lambda t: toolbox,
      score=score, reward_terms=rewards.TERMS, expert=play_expert,
      detectors=("padding", "redundant_calls"),
      task_from_record=lambda d: tasks_lib.CalculatorTask(**d), jax_env=jax_env,
      proposals=tasks_lib.proposal_grammar(config.tasks))


def retrieval_suite(config, data_dir: str) -> tasks_lib.TaskSuite:
  """Questions answered from a corpus through a search tool; the reward checks grounding."""
  eval_splits = ("heldout", "calibration")
  splits = {split: suites_tfds.load_split("retrieval", split, suite=config.retrieval,
                                          data_dir=data_dir)
            for split in ("train",) + eval_splits}
  corpus = suites_tfds.load_corpus(config.retrieval, data_dir=data_dir)
  toolbox = guardrails.guarded_toolbox([tools_lib.DocumentSearchTool(corpus, top_k=2)],
                                       allow={"search": None})
  expert = retrieval_expert.RetrievalExpert(config.retrieval_expert)

  def score(episode):
    terms = rewards.retrieval_reward_terms(episode)
    return rewards.compose_retrieval_reward(terms, config.suite_reward), terms

  def play_expert(tasks, rng, max_tool_calls):
    return retrieval_expert.run_expert_episodes(expert, tasks, toolbox=toolbox, rng=rng,
                                                max_tool_calls=max_tool_calls)

  return tasks_lib.TaskSuite(
      name="retrieval", splits=splits, eval_splits=eval_splits, toolbox_for=lambda t: toolbox,
      score=score, reward_terms=rewards.RETRIEVAL_TERMS, expert=play_expert,
      detectors=("padding", "irrelevant_copy", "redundant_calls"),
      task_from_record=tasks_lib.retrieval.from_record,
      scripted_segment=scripted_policies.retrieval_segment)


def codefix_suite(config, data_dir: str) -> tasks_lib.TaskSuite:
  """Buggy functions fixed against pinned tests run in the sandbox (scripted policies only)."""
  limits = sandbox.SandboxLimits(cpu_seconds=2, wall_seconds=5, memory_bytes=256 * 2**20,
                                 isolation=config.sandbox_isolation)
  splits = {split: suites_tfds.load_split("codefix", split, suite=config.codefix,
                                          data_dir=data_dir)
            for split in SCRIPTED_SPLITS}

  def toolbox_for(task):
    runner = tools_lib.UnitTestRunnerTool({tasks_lib.codefix.TEST_FILE: task.tests},
                                          limits=limits)
    return guardrails.guarded_toolbox([runner], allow={"run_tests": None})

  def score(episode):
    terms = rewards.codefix_reward_terms(episode, limits=limits)
    return rewards.compose_codefix_reward(terms, config.suite_reward), terms

  return tasks_lib.TaskSuite(
      name="codefix", splits=splits, eval_splits=("heldout", "calibration"),
      toolbox_for=toolbox_for, score=score, reward_terms=rewards.CODEFIX_TERMS,
      detectors=("test_tampering", "redundant_calls"),
      task_from_record=tasks_lib.codefix.from_record,
      scripted_segment=scripted_policies.codefix_segment, sandboxed=True)


tasks_lib.register_suite("calculator", calculator_suite, jax_native=True)
tasks_lib.register_suite("retrieval", retrieval_suite)
tasks_lib.register_suite("codefix", codefix_suite)
tasks_lib.register_suite("keydoor", keydoor.suite, jax_native=True)


def replay_suite(suite: tasks_lib.TaskSuite, config) -> guardrails.ReplaySuite:
  """How `experiments.replay` rebuilds and scores one suite's logged episodes.

  The tools are the suite's own, with transient failures taken from the log; the diversity
  penalty depends on a whole group, so its logged value is used as logged.
  """
  if suite.task_from_record is None:
    raise ValueError(f"task suite {suite.name!r} gives no task_from_record: its episodes "
                     "cannot be replayed")
  return guardrails.ReplaySuite(suite.task_from_record, suite.toolbox_for, suite.score,
                                group_terms={"diversity": config.diversity_weight})


def run_scripted_suite(suite: tasks_lib.TaskSuite, config, workdir: str) -> dict[str, Any]:
  """Plays `config.scripted_policy` on every split of `suite`; returns the report."""
  if suite.scripted_segment is None:
    raise ValueError(f"task suite {suite.name!r} has no scripted policies")
  audit = guardrails.AuditLog(os.path.join(workdir, "audit", "episodes.jsonl"), resume_step=None)
  policy = config.scripted_policy or "honest"
  report = {"task": suite.name, "policy": policy, "splits": {}}
  if suite.sandboxed:
    report["sandbox_isolation"] = sandbox.isolation_mode(
        sandbox.SandboxLimits(isolation=config.sandbox_isolation))
  for index, split in enumerate(SCRIPTED_SPLITS):
    tasks = list(suite.splits[split])[:config.eval.curve_tasks]
    rng = np.random.default_rng([config.seed, 5, index])
    episodes = scripted_policies.run_scripted_episodes(
        suite.scripted_segment, policy, tasks, toolbox_for=suite.toolbox_for, rng=rng,
        max_tool_calls=config.rollout.max_tool_calls)
    suite.score_all(episodes)
    audit.write(episodes, phase="final_eval", step=0, policy=policy, split=split,
                suite=suite.name)
    summary = evaluation.summarize_episodes(episodes)
    summary["detectors"] = rewards.count_detections(episodes, suite.detectors)
    report["splits"][split] = summary
  with open(os.path.join(workdir, "report.json"), "w") as f:
    json.dump(report, f, indent=2)
  return report
