"""The main job: SFT on a noisy expert, then GRPO with a verifiable reward, then evaluation.

Host code that drives jitted update steps. Everything a run needs to resume and to be audited
lives in its workdir:

    config.json             the resolved config (a resumed run must use the same one)
    tokenizer/              the policy's tokenizer (transformers format)
    data/                   the task suite as a TFDS dataset (array_record)
    checkpoints/{sft,grpo}/ Orbax checkpoints of each phase
    metrics.csv, tensorboard/, learning_curves.png
    audit/episodes.jsonl    every episode, hash-chained: task, each state, action, tool result,
                            guardrail decision and reward term (see `rlagents.guardrails`)
    report.json             the final figures for the expert, the SFT and the GRPO policy

Started again on the same workdir, the job restores the newest checkpoint of the phase it was in
and continues from that step; data order, sampling keys and the tools' randomness are functions of
(seed, step), so a resumed run continues exactly where it stopped.
"""

import dataclasses
import json
import logging
import os
import resource
import time
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import tensorflow_datasets as tfds
import tqdm

from rlagents import checkpoint as checkpoint_lib
from rlagents import evaluation
from rlagents import guardrails
from rlagents import learners
from rlagents import metrics as metrics_lib
from rlagents import networks
from rlagents import rewards
from rlagents import rollout as rollout_lib
from rlagents import tasks as tasks_lib
from rlagents import tools as tools_lib
from rlagents.pipeline import _config
from rlagents.pipeline import _policy_init
from rlagents.pipeline import _rlhf
from rlagents.pipeline import _suites
from rlagents.tasks import calculator_expert

EVAL_SPLITS = ("heldout", "heldout_ood", "calibration")


class JobError(RuntimeError):
  """A problem with the job's inputs or workdir, reported as one line."""


def _rng(seed: int, *path: int) -> np.random.Generator:
  return np.random.default_rng([seed, *path])


_PHASE_IDS = {"demos": 1, "sft": 2, "grpo": 3, "eval": 4}


class _Job:
  """The state shared by the phases of one run."""

  def __init__(self, config: _config.AgentJobConfig, workdir: str):
    self.config = config
    self.workdir = workdir
    try:
      policy = _policy_init.initial_policy(config.model, config.init_from)
    except _policy_init.PolicyInitError as error:
      raise JobError(str(error)) from None
    self.tokenizer = policy.tokenizer
    self.model = networks.Transformer(policy.model_config)
    self.pretrained_params = policy.params
    tfds.disable_progress_bar()
    self.splits = {
        split: tasks_lib.load_split(split, config=config.tasks,
                                    data_dir=os.path.join(workdir, "data"))
        for split in ("train",) + EVAL_SPLITS
    }
    # Allow-listed (the calculator only) with the review gate, like every suite.
    self.toolbox = guardrails.guarded_toolbox(
        [tools_lib.CalculatorTool(failure_rate=config.tool_failure_rate)], allow={"calc": None})
    self.expert = calculator_expert.NoisyExpert(config.expert)
    self.sampler = rollout_lib.make_sampler(self.model, self.tokenizer, config.rollout)
    self.sampler_greedy = rollout_lib.make_sampler(
        self.model, self.tokenizer, dataclasses.replace(config.rollout, temperature=0.0))
    self.sampler_eval = rollout_lib.make_sampler(
        self.model, self.tokenizer,
        dataclasses.replace(config.rollout, temperature=config.eval.temperature))
    self.sft_steps = config.sft.num_steps
    # The reward model's scorer (`tokens [N, T] -> scores [N]`) when `soft_reward.weight > 0`.
    self.learned_scorer = None
    self.running = rewards.RunningMeanStd()
    # What the phase after SFT cost: sampled tokens, steps, seconds, trained parameters.
    self.stats: dict[str, Any] = {}

  # ---- shared pieces ----

  def score(self, episodes: Sequence[rollout_lib.Episode]) -> None:
    for episode in episodes:
      episode.reward_terms = rewards.reward_terms(episode, tasks_lib.is_correct)
      episode.reward = rewards.compose_reward(episode.reward_terms, self.config.reward)

  def expert_episodes(self, tasks, rng) -> list[rollout_lib.Episode]:
    episodes = calculator_expert.run_expert_episodes(
        self.expert, tasks, toolbox=self.toolbox, rng=rng,
        max_tool_calls=self.config.rollout.max_tool_calls)
    self.score(episodes)
    return episodes

  def policy_episodes(self, params, tasks, *, key, rng, sampler=None) -> rollout_lib.RolloutBatch:
    batch = rollout_lib.sample_episodes(
        params, tasks, sampler=sampler or self.sampler, tokenizer=self.tokenizer,
        toolbox=self.toolbox, config=self.config.rollout, key=key, rng=rng)
    self.score(batch.episodes)
    return batch

  def train_episodes(self, params, tasks, *, key, rng, group_size: int) -> rollout_lib.RolloutBatch:
    """`policy_episodes` plus the learned reward term (when configured), for RL updates."""
    batch = self.policy_episodes(params, tasks, key=key, rng=rng)
    if self.learned_scorer is not None:
      rewards.add_learned_reward(batch.episodes, self.learned_scorer(batch.tokens),
                                 self.config.soft_reward, group_size=group_size,
                                 running=self.running)
    return batch

  def init_params(self):
    if self.pretrained_params is not None:
      # A copy: the update steps donate their input buffers.
      return jax.tree.map(jnp.copy, self.pretrained_params)
    length = self.config.rollout.max_length
    tokens = jnp.zeros((1, length), jnp.int32)
    positions = jnp.arange(length, dtype=jnp.int32)[None]
    return self.model.init(jax.random.PRNGKey(self.config.seed), tokens, positions)


def _check_workdir(config: _config.AgentJobConfig, workdir: str) -> None:
  parent = os.path.dirname(os.path.abspath(workdir))
  if not os.path.isdir(parent):
    raise JobError(f"the parent directory of workdir {workdir!r} does not exist: {parent}")
  os.makedirs(workdir, exist_ok=True)
  path = os.path.join(workdir, "config.json")
  resolved = _config.config_to_dict(config)
  if os.path.exists(path):
    with open(path) as f:
      saved = json.load(f)
    if saved != json.loads(json.dumps(resolved)):
      differing = _first_difference(saved, json.loads(json.dumps(resolved)))
      raise JobError(f"workdir {workdir!r} holds a run with a different config (first "
                     f"difference at '{differing}'); use a new workdir or the same config")
  else:
    with open(path, "w") as f:
      json.dump(resolved, f, indent=2, sort_keys=True)


def _first_difference(a, b, path=""):
  if isinstance(a, dict) and isinstance(b, dict):
    for key in sorted(set(a) | set(b)):
      if a.get(key) != b.get(key):
        return _first_difference(a.get(key), b.get(key), f"{path}{key}.")
  return path.rstrip(".")


def _trim(batch: dict[str, np.ndarray], multiple: int = 32) -> dict[str, np.ndarray]:
  """Cuts the `[N, T]` arrays of a batch after its longest episode, rounded up to `multiple`.

  Most episodes are far shorter than the buffer; rounding keeps the number of distinct shapes
  (and so of compilations) small.
  """
  used = int(np.max(np.nonzero(batch["tokens"].any(axis=0))[0], initial=0)) + 1
  length = min(batch["tokens"].shape[1], -(-used // multiple) * multiple)
  return {k: (v[:, :length] if v.ndim == 2 else v) for k, v in batch.items()}


class _LengthBuckets:
  """Samples SFT batches whose episodes have similar lengths, so padding stays small."""

  def __init__(self, tokens: np.ndarray, multiple: int = 32):
    lengths = (tokens != 0).sum(axis=1)
    keys = -(-lengths // multiple)
    self.buckets = [np.flatnonzero(keys == k) for k in np.unique(keys)]
    self.weights = np.array([len(b) for b in self.buckets], np.float64) / len(tokens)

  def sample(self, rng: np.random.Generator, batch_size: int) -> np.ndarray:
    bucket = self.buckets[rng.choice(len(self.buckets), p=self.weights)]
    return bucket[rng.integers(len(bucket), size=batch_size)]


def _state_tree(state, key) -> dict[str, Any]:
  return {"params": state.params, "opt_state": state.opt_state, "step": state.step, "key": key}


def _restore_phase(checkpointer, state, key):
  """Restores the newest checkpoint of a phase into `state`; returns (state, key, step)."""
  step = checkpointer.latest_step()
  if step is None:
    return state, key, 0
  tree, _ = checkpointer.restore(step, _state_tree(state, key))
  state = state.replace(params=tree["params"], opt_state=tree["opt_state"], step=tree["step"])
  return state, tree["key"], step


def _run_sft(job: _Job, writer, audit) -> Any:
  """Phase 1: demonstrations from the noisy expert, then supervised training. Returns params."""
  config = job.config
  checkpointer = checkpoint_lib.Checkpointer(os.path.join(job.workdir, "checkpoints", "sft"))
  state = learners.create_train_state(job.model, job.init_params(), config.sft.optimizer)
  state, key, start = _restore_phase(checkpointer, state, jax.random.PRNGKey(config.seed))
  if start >= config.sft.num_steps:
    logging.info("SFT already finished at step %d", start)
    return state.params

  demo_tasks = job.splits["train"][:config.sft.num_demonstrations]
  demos = job.expert_episodes(demo_tasks, _rng(config.seed, _PHASE_IDS["demos"]))
  if start == 0:
    audit.write(demos, phase="sft_demonstration", step=0, policy="expert")
  data = rollout_lib.stack_episodes(demos, job.tokenizer, config.rollout.max_length)
  writer.write(0, {"expert/train_success": evaluation.summarize_episodes(demos)["success"]})

  buckets = _LengthBuckets(data.tokens)
  update = learners.make_sft_step()
  bar = tqdm.trange(start, config.sft.num_steps, desc="SFT", initial=start,
                    total=config.sft.num_steps, dynamic_ncols=True)
  for step in bar:
    rows = buckets.sample(_rng(config.seed, _PHASE_IDS["sft"], step), config.sft.batch_size)
    batch = _trim({"tokens": data.tokens[rows], "loss_mask": data.loss_mask[rows]})
    state, metrics = update(state, batch)
    done = step + 1
    if done % config.log_every == 0 or done == config.sft.num_steps:
      metrics = jax.device_get(metrics)
      writer.write(done, metrics)
      bar.set_postfix(nll=f"{metrics['sft/nll']:.3f}")
    if done % config.checkpoint_every == 0 or done == config.sft.num_steps:
      checkpointer.save(done, _state_tree(state, key), {"phase": "sft", "step": done})
  checkpointer.close()
  return state.params


def _curve_eval(job: _Job, params, global_step: int, writer, audit) -> float:
  config = job.config
  tasks = job.splits["heldout"][:config.eval.curve_tasks]
  batch = job.policy_episodes(params, tasks, key=jax.random.PRNGKey(config.seed + 7),
                              rng=_rng(config.seed, _PHASE_IDS["eval"], global_step),
                              sampler=job.sampler_eval)
  summary = evaluation.summarize_episodes(batch.episodes)
  writer.write(global_step, {f"eval/heldout_{k}": v for k, v in summary.items()
                             if isinstance(v, float)})
  audit.write(batch.episodes, phase="curve_eval", step=global_step, policy="policy",
              split="heldout")
  return summary["success"]


def _run_grpo(job: _Job, sft_params, writer, audit) -> Any:
  """Phase 2: GRPO from the SFT policy, with the SFT policy as the KL reference."""
  config, grpo = job.config, job.config.grpo
  checkpointer = checkpoint_lib.Checkpointer(os.path.join(job.workdir, "checkpoints", "grpo"))
  # A copy: the update donates the state's buffers, and the reference must survive them.
  state = learners.create_train_state(job.model, jax.tree.map(jnp.copy, sft_params),
                                      grpo.optimizer)
  state, key, start, metadata = _rlhf.restore(checkpointer, state,
                                              jax.random.PRNGKey(config.seed + 1))
  job.stats.update(trained_parameters=_rlhf.count_parameters(state.params), rl_steps=start,
                   sampled_tokens=metadata.get("sampled_tokens", 0),
                   phase_seconds=metadata.get("phase_seconds", 0.0))
  if "running" in metadata:
    job.running.load(metadata["running"])
  if start == 0:
    _curve_eval(job, sft_params, job.sft_steps, writer, audit)
  if start >= grpo.num_steps or metadata.get("finished"):
    return state.params

  if grpo.microbatch_size:
    update = learners.MicrobatchedGRPOStep(grpo, microbatch_size=grpo.microbatch_size)
  else:
    update = learners.make_grpo_step(grpo)
  train = job.splits["train"]
  bar = tqdm.trange(start, grpo.num_steps, desc="GRPO", initial=start, total=grpo.num_steps,
                    dynamic_ncols=True)
  done = start
  phase_start = time.time() - job.stats["phase_seconds"]
  for step in bar:
    if config.sampled_token_budget and job.stats["sampled_tokens"] >= config.sampled_token_budget:
      break
    t0 = time.perf_counter()
    rng = _rng(config.seed, _PHASE_IDS["grpo"], step)
    prompts = [train[i] for i in rng.choice(len(train), grpo.prompts_per_step, replace=False)]
    group_tasks = [task for task in prompts for _ in range(grpo.group_size)]
    rollout = job.train_episodes(state.params, group_tasks, key=jax.random.fold_in(key, step),
                                 rng=rng, group_size=grpo.group_size)
    t_rollout = time.perf_counter() - t0
    batch = {
        "tokens": rollout.tokens,
        "loss_mask": rollout.loss_mask,
        "old_logprobs": rollout.logprobs,
        "rewards": np.array([e.reward for e in rollout.episodes], np.float32),
    }
    if not grpo.microbatch_size:
      batch = _trim(batch)
    for _ in range(grpo.updates_per_batch):
      state, metrics = update(state, sft_params, batch)
    done = step + 1
    job.stats["sampled_tokens"] += int(rollout.loss_mask.sum())
    job.stats["rl_steps"] = done
    global_step = job.sft_steps + done
    audit.write(rollout.episodes, phase="grpo", step=global_step, policy="policy")
    if done % config.log_every == 0 or done == grpo.num_steps:
      _rlhf._log_rl_step(writer, global_step, metrics, rollout, t0, t_rollout, bar)
    if config.eval.every_steps and done % config.eval.every_steps == 0:
      success = _curve_eval(job, state.params, global_step, writer, audit)
      bar.write(f"GRPO step {done}: heldout success {success:.3f}")
    job.stats["phase_seconds"] = time.time() - phase_start
    if done % config.checkpoint_every == 0 or done == grpo.num_steps:
      checkpointer.save(done, _state_tree(state, key), _rlhf._rl_metadata(job, "grpo", done))
  job.stats["phase_seconds"] = time.time() - phase_start
  if done < grpo.num_steps:  # stopped by the token budget
    checkpointer.save(done, _state_tree(state, key),
                      {**_rlhf._rl_metadata(job, "grpo", done), "finished": True})
  checkpointer.close()
  return state.params


def _final_report(job: _Job, sft_params, grpo_params, audit) -> dict[str, Any]:
  """Evaluates the expert, the SFT policy and the policy of `config.algorithm` (named so)."""
  config = job.config
  name_rl = config.algorithm
  final_step = job.sft_steps + config.grpo.num_steps
  report: dict[str, Any] = {"splits": {}, "eval_temperature": config.eval.temperature}
  for index, split in enumerate(EVAL_SPLITS):
    tasks = job.splits[split]
    entry = {}
    expert = job.expert_episodes(tasks, _rng(config.seed, _PHASE_IDS["eval"], 10**6, index))
    entry["expert"] = evaluation.summarize_episodes(expert)
    audit.write(expert, phase="final_eval", step=final_step, policy="expert", split=split)
    for name, params in (("sft", sft_params), (name_rl, grpo_params)):
      policy_key = jax.random.PRNGKey(config.seed + 100 + index)
      batch = job.policy_episodes(params, tasks, key=policy_key,
                                  rng=_rng(config.seed, _PHASE_IDS["eval"], 10**6, index),
                                  sampler=job.sampler_eval)
      entry[name] = evaluation.summarize_episodes(batch.episodes)
      entry[name]["detectors"] = rewards.count_detections(
          batch.episodes, _suites.DETECTORS["calculator"])
      audit.write(batch.episodes, phase="final_eval", step=final_step, policy=name, split=split)
      if config.eval.greedy_too and split == "heldout":
        greedy = job.policy_episodes(params, tasks, key=policy_key,
                                     rng=_rng(config.seed, _PHASE_IDS["eval"], 10**6, index),
                                     sampler=job.sampler_greedy)
        entry[name]["greedy_success"] = evaluation.summarize_episodes(greedy.episodes)["success"]
    report["splits"][split] = entry
  heldout = report["splits"]["heldout"]
  report["algorithm"] = name_rl
  report[f"heldout_gain_{name_rl}_over_sft"] = (heldout[name_rl]["success"]
                                                - heldout["sft"]["success"])
  report[f"heldout_gain_{name_rl}_over_expert"] = (heldout[name_rl]["success"]
                                                   - heldout["expert"]["success"])
  return report


def train_and_evaluate(config: _config.AgentJobConfig, workdir: str) -> dict[str, Any]:
  """Runs (or resumes) the whole job in `workdir` and returns the report it writes."""
  _check_workdir(config, workdir)
  start_time = time.time()
  if config.task != "calculator":
    report = _suites.run_scripted_suite(config, workdir)
    report["wall_seconds_this_invocation"] = time.time() - start_time
    return report
  job = _Job(config, workdir)
  job.tokenizer.save_pretrained(os.path.join(workdir, "tokenizer"))

  resume_step = _resume_step(workdir, job.sft_steps)
  writer = metrics_lib.MetricsWriter(workdir, resume_step=resume_step)
  # Hash-chained: `guardrails.verify_audit_log` detects an edited line, and
  # `python -m experiments.replay` re-executes episodes from it.
  audit = guardrails.AuditLog(os.path.join(workdir, "audit", "episodes.jsonl"),
                              resume_step=resume_step)
  if resume_step is not None:
    logging.info("Resuming from global step %d", resume_step)
    print(f"Resuming {workdir} from step {resume_step}", flush=True)

  sft_params = _run_sft(job, writer, audit)
  reward_model_report = None
  if config.soft_reward.weight > 0 and config.algorithm in ("grpo", "ppo"):
    reward_model_report = _rlhf.train_reward_model(job, sft_params, writer)
  run_phase = {"grpo": _run_grpo, "ppo": _rlhf.run_ppo, "dpo": _rlhf.run_offline,
               "kto": _rlhf.run_offline}[config.algorithm]
  rl_params = run_phase(job, sft_params, writer, audit)
  report = _final_report(job, sft_params, rl_params, audit)
  report["wall_seconds_this_invocation"] = time.time() - start_time
  report["after_sft"] = dict(job.stats)
  if reward_model_report is not None:
    report["reward_model"] = reward_model_report
  # Peak resident memory of this process (Linux reports KiB).
  report["peak_rss_mib_this_invocation"] = resource.getrusage(
      resource.RUSAGE_SELF).ru_maxrss / 1024
  report["resumed_from_step"] = resume_step
  writer.close()

  with open(os.path.join(workdir, "report.json"), "w") as f:
    json.dump(report, f, indent=2)
  heldout = report["splits"]["heldout"]
  metrics_lib.plot_learning_curves(
      os.path.join(workdir, "metrics.csv"), os.path.join(workdir, "learning_curves.png"),
      panels={"SFT loss": ["sft/nll"],
              "heldout success": ["eval/heldout_success", "train/success"],
              f"reward terms ({config.algorithm.upper()})": [
                  f"reward/{t}" for t in rewards.TERMS + ("learned_term",)],
              "KL to SFT": ["grpo/kl", "ppo/kl_reward_penalty"]},
      markers={"expert": heldout["expert"]["success"]})
  return report


def train_sft_only(config: _config.AgentJobConfig, workdir: str) -> None:
  """Runs (or resumes) only the SFT phase in `workdir`.

  Several runs that differ only after SFT (e.g. `experiments/compare_algorithms.py`) can then
  start from a copy of `checkpoints/sft`, which the job finds and does not repeat.
  """
  _check_workdir(config, workdir)
  job = _Job(config, workdir)
  writer = metrics_lib.MetricsWriter(workdir, resume_step=_resume_step(workdir, job.sft_steps))
  audit = guardrails.AuditLog(os.path.join(workdir, "audit", "episodes.jsonl"),
                              resume_step=_resume_step(workdir, job.sft_steps))
  _run_sft(job, writer, audit)
  writer.close()


def _resume_step(workdir: str, sft_steps: int) -> int | None:
  """The global step of the newest checkpoint in `workdir`, or None for a fresh run."""
  root = os.path.join(workdir, "checkpoints")
  steps = {}
  rl_phases = ("grpo", "ppo", "dpo", "kto")
  for phase in ("sft",) + rl_phases:
    directory = os.path.join(root, phase)
    if os.path.isdir(directory):
      numbered = [int(d) for d in os.listdir(directory) if d.isdigit()]
      if numbered:
        steps[phase] = max(numbered)
  for phase in rl_phases:
    if phase in steps:
      return sft_steps + steps[phase]
  return steps.get("sft")
