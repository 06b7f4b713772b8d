"""The main job: SFT on a noisy expert, then GRPO with a verifiable reward, then evaluation.

Host code that drives jitted update steps. Everything a run needs to resume and to be audited
lives in its workdir:

    config.json             the resolved config (a resumed run must use the same one)
    tokenizer/              the policy's tokenizer (transformers format)
    data/                   the task suite as a TFDS dataset (array_record)
    checkpoints/{sft,grpo}/ Orbax checkpoints of each phase (with `lora.rank`, of the adapters only)
    export/                 the final policy as a transformers checkpoint (LoRA merged)
    metrics.csv, tensorboard/, learning_curves.png
    audit/episodes.jsonl    every episode, hash-chained: task, each state, action, tool result,
                            guardrail decision and reward term (see `rlagents.guardrails`)
    report.json             the final figures for the expert, the SFT and the GRPO policy

Started again on the same workdir, the job restores the newest readable checkpoint of the phase
it was in and continues from that step; data order, sampling keys and the tools' randomness are
functions of (seed, step), so a resumed run continues exactly where it stopped, and metrics and
audit records the interrupted run wrote after that step are dropped and written again. A corrupt
newest checkpoint is reported and the one before it is used (docs/checkpoints.md).

Multi-host: every process runs the phases and takes part in the (collective) checkpoint saves and
restores; only process 0 writes config.json, the tokenizer, metrics, the audit log and the report.
"""

import dataclasses
import functools
import json
import logging
import os
import resource
import time
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
import tensorflow_datasets as tfds
import tqdm
from flax.training import train_state

from rlagents import checkpoint as checkpoint_lib
from rlagents import envs
from rlagents import evaluation
from rlagents import guardrails
from rlagents import hf
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
from rlagents.tasks import retrieval_expert
from rlagents.tasks import suites_tfds

EVAL_SPLITS = ("heldout", "heldout_ood", "calibration")
# The retrieval suite has no out-of-distribution split.
RETRIEVAL_EVAL_SPLITS = ("heldout", "calibration")


class JobError(RuntimeError):
  """A problem with the job's inputs or workdir, reported as one line."""


def _rng(seed: int, *path: int) -> np.random.Generator:
  return np.random.default_rng([seed, *path])


_PHASE_IDS = {"demos": 1, "sft": 2, "grpo": 3, "eval": 4, "ppo": 5, "dpo": 6, "kto": 6,
              "reward_model": 7, "preferences": 8}


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
    # With LoRA the trained parameters are {'base': frozen variables, 'lora': adapters}, and
    # `apply_fn` runs the model on the merged weights; the base gets no gradient (stop_gradient,
    # so XLA drops its weight-gradient products) and no update (`train_state`'s optimizer).
    self.lora = config.lora.lora_config() if config.lora.rank else None
    if self.lora is None:
      self.apply_fn = self.model.apply
    else:
      self._merge = jax.jit(functools.partial(networks.merge_lora, config=self.lora))
      model, lora = self.model, self.lora

      def apply_lora(params, *args, **kwargs):
        merged = networks.merge_lora(jax.lax.stop_gradient(params["base"]), params["lora"],
                                     config=lora)
        return model.apply(merged, *args, **kwargs)

      self.apply_fn = apply_lora
    tfds.disable_progress_bar()
    data_dir = os.path.join(workdir, "data")
    if config.task == "calculator":
      self.eval_splits = EVAL_SPLITS
      self.splits = {split: tasks_lib.load_split(split, config=config.tasks, data_dir=data_dir)
                     for split in ("train",) + EVAL_SPLITS}
      # Allow-listed (the calculator only) with the review gate, like every suite.
      self.toolbox = guardrails.guarded_toolbox(
          [tools_lib.CalculatorTool(failure_rate=config.tool_failure_rate)],
          allow={"calc": None})
      self.expert = calculator_expert.NoisyExpert(config.expert)
      self._score_episode = self._score_calculator
    elif config.task == "retrieval":
      self.eval_splits = RETRIEVAL_EVAL_SPLITS
      self.splits = {split: suites_tfds.load_split("retrieval", split, suite=config.retrieval,
                                                   data_dir=data_dir)
                     for split in ("train",) + RETRIEVAL_EVAL_SPLITS}
      # The search tool over the suite's corpus, allow-listed, with the review gate.
      toolbox_for, self._score_episode, _ = _suites.retrieval_parts(config, data_dir)
      self.toolbox = toolbox_for(None)
      self.expert = retrieval_expert.RetrievalExpert(config.retrieval_expert)
    else:
      raise JobError(f"task {config.task!r} has no trained policy; it runs scripted policies "
                     "(config.scripted_policy)")
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
    # Watches GRPO's evaluation points; a resumed run starts a fresh window.
    self.drift_monitor = rewards.ProxyDriftMonitor(config.proxy_drift)

  # ---- shared pieces ----

  def _score_calculator(self, episode) -> tuple[float, dict[str, float]]:
    terms = rewards.reward_terms(episode, tasks_lib.is_correct)
    return rewards.compose_reward(terms, self.config.reward), terms

  def score(self, episodes: Sequence[rollout_lib.Episode]) -> None:
    """Sets each episode's reward and reward terms (the suite's verifier and shaping)."""
    for episode in episodes:
      episode.reward, episode.reward_terms = self._score_episode(episode)

  def expert_episodes(self, tasks, rng) -> list[rollout_lib.Episode]:
    run = (calculator_expert.run_expert_episodes if self.config.task == "calculator"
           else retrieval_expert.run_expert_episodes)
    episodes = run(self.expert, tasks, toolbox=self.toolbox, rng=rng,
                   max_tool_calls=self.config.rollout.max_tool_calls)
    self.score(episodes)
    return episodes

  def policy_params(self, params):
    """The model variables that `params` (the train state's) stand for: LoRA merged."""
    if self.lora is None:
      return params
    return self._merge(params["base"], params["lora"])

  def train_state(self, params, optimizer: learners.OptimizerConfig):
    """A train state over `params`; with LoRA only the adapters get an optimizer (and state)."""
    if self.lora is None:
      return learners.create_train_state(self.model, params, optimizer)
    labels = lambda p: {"base": jax.tree.map(lambda _: "frozen", p["base"]),
                        "lora": jax.tree.map(lambda _: "train", p["lora"])}
    tx = optax.multi_transform(
        {"train": learners.make_optimizer(optimizer), "frozen": optax.set_to_zero()}, labels)
    return train_state.TrainState.create(apply_fn=self.apply_fn, params=params, tx=tx)

  def policy_episodes(self, params, tasks, *, key, rng, sampler=None) -> rollout_lib.RolloutBatch:
    batch = rollout_lib.sample_episodes(
        self.policy_params(params), tasks, sampler=sampler or self.sampler, tokenizer=self.tokenizer,
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

  def start_stats(self, state, metadata: dict[str, Any]) -> None:
    """Restores what the phase after SFT has cost so far (and the soft reward's statistics)."""
    self.stats.update(trained_parameters=_rlhf.count_parameters(state.params),
                      rl_steps=metadata.get("step", 0),
                      sampled_tokens=metadata.get("sampled_tokens", 0),
                      phase_seconds=metadata.get("phase_seconds", 0.0))
    if "running" in metadata:
      self.running.load(metadata["running"])

  def budget_spent(self) -> bool:
    budget = self.config.sampled_token_budget
    return bool(budget) and self.stats["sampled_tokens"] >= budget

  def init_params(self):
    if self.pretrained_params is not None:
      # A copy: the update steps donate their input buffers.
      params = jax.tree.map(jnp.copy, self.pretrained_params)
    else:
      length = self.config.rollout.max_length
      tokens = jnp.zeros((1, length), jnp.int32)
      positions = jnp.arange(length, dtype=jnp.int32)[None]
      params = self.model.init(jax.random.PRNGKey(self.config.seed), tokens, positions)
    if self.lora is None:
      return params
    adapters = networks.init_lora(jax.random.PRNGKey(self.config.seed + 2), params,
                                  config=self.lora)
    return {"base": params, "lora": adapters}


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
  elif jax.process_index() == 0:
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


def _state_tree(state, key, lora: bool = False) -> dict[str, Any]:
  """Everything a phase carries from one step to the next (the data position is the step: the
  batch of step `s` is drawn from `_rng(seed, phase, s)`); GRPO's advantages are group-relative
  within each step, so there are no running reward statistics to keep. With LoRA, the adapters
  but not the frozen base."""
  params = state.params["lora"] if lora else state.params
  return {"params": params, "opt_state": state.opt_state, "step": state.step, "key": key}


def _checkpoint_metadata(config, phase: str, done: int, job: _Job | None = None) -> dict[str, Any]:
  """The step's metadata; with `job`, also the RL phase's costs and the soft reward's statistics."""
  metadata = {"phase": phase, "step": done, "seed": config.seed,
              "data_position": {"rng": "numpy default_rng([seed, phase_id, step])",
                                "phase_id": _PHASE_IDS[phase], "next_step": done}}
  if job is not None:
    metadata.update(sampled_tokens=job.stats["sampled_tokens"],
                    phase_seconds=job.stats["phase_seconds"], running=job.running.state())
  return metadata


@dataclasses.dataclass
class _PhaseStart:
  """Where a phase starts: its train state, RNG key, step (0 for a fresh start) and the
  restored checkpoint's metadata ({} for a fresh start)."""
  state: Any
  key: jax.Array
  step: int
  metadata: dict[str, Any] = dataclasses.field(default_factory=dict)


def _restore_phase(checkpointer, state, key, *, phase: str, seed: int,
                   lora: bool = False) -> _PhaseStart:
  """Restores the newest readable checkpoint of a phase into `state`'s structure.

  A corrupt newer step is reported (`checkpoint.CheckpointWarning`) and the one before is used.
  """
  restored = checkpointer.restore_latest(_state_tree(state, key, lora))
  if restored is None:
    return _PhaseStart(state, key, 0)
  tree, metadata = restored.state, restored.metadata
  # Checkpoints written before the seed was recorded carry no "seed".
  found = (metadata.get("phase"), metadata.get("step"), metadata.get("seed", seed),
           int(tree["step"]))
  if found[:3] != (phase, restored.step, seed) or found[3] != restored.step:
    raise checkpoint_lib.CheckpointError(
        f"checkpoint {checkpointer.directory}/{restored.step} does not belong to this run: it "
        f"says phase {found[0]!r}, step {found[1]}, seed {found[2]}, state step {found[3]}; "
        f"expected phase {phase!r}, step {restored.step}, seed {seed}")
  params = {**state.params, "lora": tree["params"]} if lora else tree["params"]
  state = state.replace(params=params, opt_state=tree["opt_state"], step=tree["step"])
  return _PhaseStart(state, tree["key"], restored.step, dict(metadata))


class _Outputs:
  """The phases' metrics writer and audit log, written by process 0 only.

  On resume from global step `r`, the files keep what was written up to `r`; a phase that
  recomputes a step `<= r` (e.g. SFT re-run after its final checkpoint was found corrupt) does not
  write it again. The final evaluation is always written again (the audit log drops it on resume).
  """

  def __init__(self, workdir: str, resume_step: int | None, suite: str = "calculator"):
    self.resume_step = resume_step
    # Replay rebuilds an episode with its suite's tools; calculator records carry no name.
    self.suite_fields = {} if suite == "calculator" else {"suite": suite}
    self.primary = jax.process_index() == 0
    if self.primary:
      self._writer = metrics_lib.MetricsWriter(workdir, resume_step=resume_step)
      # Hash-chained: `guardrails.verify_audit_log` detects an edited line, and
      # `python -m experiments.replay` re-executes episodes from it.
      self._audit = guardrails.AuditLog(os.path.join(workdir, "audit", "episodes.jsonl"),
                                        resume_step=resume_step)

  def _new(self, step: int) -> bool:
    return self.primary and (self.resume_step is None or step > self.resume_step)

  def metrics(self, step: int, values) -> None:
    if self._new(step):
      self._writer.write(step, values)

  def episodes(self, episodes, *, phase: str, step: int, **fields) -> None:
    if self._new(step) or (self.primary and phase == "final_eval"):
      self._audit.write(episodes, phase=phase, step=step, **self.suite_fields, **fields)

  def close(self) -> None:
    if self.primary:
      self._writer.close()


def _run_sft(job: _Job, start: _PhaseStart, checkpointer, out: _Outputs) -> Any:
  """Phase 1: demonstrations from the noisy expert, then supervised training. Returns params."""
  config = job.config
  state, key = start.state, start.key
  if start.step >= config.sft.num_steps:
    logging.info("SFT already finished at step %d", start.step)
    return state.params

  # The calculator suite has a training task per demonstration; a smaller suite (retrieval)
  # is cycled through, the expert's slips drawn afresh each time.
  train = job.splits["train"]
  demo_tasks = [train[i % len(train)] for i in range(config.sft.num_demonstrations)]
  demos = job.expert_episodes(demo_tasks, _rng(config.seed, _PHASE_IDS["demos"]))
  out.episodes(demos, phase="sft_demonstration", step=0, policy="expert")
  try:
    data = rollout_lib.stack_episodes(demos, job.tokenizer, config.rollout.max_length)
  except ValueError as error:
    hint = (" (the retrieval suite's settings are in experiments/configs/retrieval.py)"
            if config.task == "retrieval" else "")
    raise JobError(f"a demonstration does not fit the rollout buffer: {error}; raise "
                   f"rollout.max_length and model.max_len{hint}") from None
  out.metrics(0, {"expert/train_success": evaluation.summarize_episodes(demos)["success"]})

  buckets = _LengthBuckets(data.tokens)
  update = learners.make_sft_step()
  bar = tqdm.trange(start.step, config.sft.num_steps, desc="SFT", initial=start.step,
                    total=config.sft.num_steps, dynamic_ncols=True)
  for step in bar:
    rows = buckets.sample(_rng(config.seed, _PHASE_IDS["sft"], step), config.sft.batch_size)
    batch = _trim({"tokens": data.tokens[rows], "loss_mask": data.loss_mask[rows]})
    state, metrics = update(state, batch)
    done = step + 1
    if done % config.log_every == 0 or done == config.sft.num_steps:
      metrics = jax.device_get(metrics)
      out.metrics(done, metrics)
      bar.set_postfix(nll=f"{metrics['sft/nll']:.3f}")
    if done == config.sft.num_steps:
      # The SFT policy's point on the held-out curve belongs to this phase: it is written
      # before the final checkpoint, so a resume either keeps it or recomputes it.
      _curve_eval(job, state.params, done, out)
    if done % config.checkpoint_every == 0 or done == config.sft.num_steps:
      checkpointer.save(done, _state_tree(state, key, job.lora is not None), _checkpoint_metadata(config, "sft", done))
  return state.params


def _curve_eval(job: _Job, params, global_step: int, out: _Outputs,
                split: str = "heldout") -> float:
  config = job.config
  tasks = job.splits[split][:config.eval.curve_tasks]
  # The heldout curve keeps its original stream; other splits draw from their own.
  rng_path = () if split == "heldout" else (job.eval_splits.index(split),)
  batch = job.policy_episodes(params, tasks, key=jax.random.PRNGKey(config.seed + 7),
                              rng=_rng(config.seed, _PHASE_IDS["eval"], global_step, *rng_path),
                              sampler=job.sampler_eval)
  summary = evaluation.summarize_episodes(batch.episodes)
  out.metrics(global_step, {f"eval/{split}_{k}": v for k, v in summary.items()
                            if isinstance(v, float)})
  out.episodes(batch.episodes, phase="curve_eval", step=global_step, policy="policy",
               split=split)
  return summary["success"]


def _apply_diversity_penalty(episodes, group_size: int, weight: float) -> None:
  """Subtracts `weight * rewards.diversity_penalty(group)` from each episode of each group."""
  for start in range(0, len(episodes), group_size):
    group = episodes[start:start + group_size]
    for episode, penalty in zip(group, rewards.diversity_penalty(group)):
      episode.reward_terms["diversity"] = penalty
      episode.reward -= weight * penalty


def _watch_proxy_drift(job: _Job, params, global_step: int, train_rewards,
                       out: _Outputs) -> None:
  """At an evaluation point: calibration success vs the mean training reward since the last one.

  Feeds `job.drift_monitor`; writes `eval/calibration_success`, `train/reward_since_eval` and
  `alarm/proxy_drift` (1 when the monitor fires) to the metrics.
  """
  calibration = _curve_eval(job, params, global_step, out, split="calibration")
  train_reward = float(np.mean(train_rewards))
  alarm = job.drift_monitor.update(global_step, train_reward, calibration)
  out.metrics(global_step, {"train/reward_since_eval": train_reward,
                            "alarm/proxy_drift": float(alarm)})
  if alarm:
    logging.warning("proxy drift at step %d: training reward rose to %.3f while calibration "
                    "success stayed at %.3f", global_step, train_reward, calibration)


def _run_grpo(job: _Job, sft_params, start: _PhaseStart, checkpointer, out: _Outputs) -> Any:
  """Phase 2: GRPO from the SFT policy, with the SFT policy as the KL reference."""
  config, grpo = job.config, job.config.grpo
  state, key = start.state, start.key
  if start.step == 0:
    # A copy: the update donates the state's buffers, and the reference must survive them.
    state = job.train_state(jax.tree.map(jnp.copy, sft_params), grpo.optimizer)
  job.start_stats(state, start.metadata)
  if start.step >= grpo.num_steps or job.budget_spent():
    return state.params
  if config.rollout_mode == "jit":
    return _run_grpo_jit(job, state, key, start.step, sft_params, checkpointer, out)

  if grpo.microbatch_size:
    update = learners.MicrobatchedGRPOStep(grpo, microbatch_size=grpo.microbatch_size)
  else:
    update = learners.make_grpo_step(grpo)
  train = job.splits["train"]
  rewards_since_eval = []
  bar = tqdm.trange(start.step, grpo.num_steps, desc="GRPO", initial=start.step,
                    total=grpo.num_steps, dynamic_ncols=True)
  phase_start = time.time() - job.stats["phase_seconds"]
  for step in bar:
    t0 = time.perf_counter()
    rng = _rng(config.seed, _PHASE_IDS["grpo"], step)
    prompts = [train[i] for i in rng.choice(len(train), grpo.prompts_per_step, replace=False)]
    group_tasks = [task for task in prompts for _ in range(grpo.group_size)]
    rollout = job.train_episodes(state.params, group_tasks, key=jax.random.fold_in(key, step),
                                 rng=rng, group_size=grpo.group_size)
    if config.diversity_weight:
      _apply_diversity_penalty(rollout.episodes, grpo.group_size, config.diversity_weight)
    rewards_since_eval.extend(e.reward for e in rollout.episodes)
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
    out.episodes(rollout.episodes, phase="grpo", step=global_step, policy="policy")
    if done % config.log_every == 0 or done == grpo.num_steps:
      _rlhf.log_rl_step(out, global_step, metrics, rollout, t0, t_rollout, bar)
    if config.eval.every_steps and done % config.eval.every_steps == 0:
      success = _curve_eval(job, state.params, global_step, out)
      bar.write(f"GRPO step {done}: heldout success {success:.3f}")
      _watch_proxy_drift(job, state.params, global_step, rewards_since_eval, out)
      rewards_since_eval = []
    job.stats["phase_seconds"] = time.time() - phase_start
    # The step that spends the budget is the phase's last: saved, so a resume stops there too.
    if (done % config.checkpoint_every == 0 or done == grpo.num_steps
        or job.budget_spent()):
      checkpointer.save(done, _state_tree(state, key, job.lora is not None),
                        _checkpoint_metadata(config, "grpo", done, job))
    if job.budget_spent():
      break
  return state.params


def _run_grpo_jit(job: _Job, state, key, start: int, sft_params, checkpointer,
                  out: _Outputs) -> Any:
  """GRPO's loop with each step one compiled program (`rollout_mode="jit"`).

  The same prompts per step, reference, logging, curve evaluation and checkpoints as the host
  loop; the rollouts, reward and update run in `learners.make_jit_grpo_step` on the in-jit
  calculator (`envs.CalculatorTextEnv`, with the job's tool failure rate).
  """
  config, grpo = job.config, job.config.grpo
  train = job.splits["train"]
  env = envs.CalculatorTextEnv.from_tasks(
      train, job.tokenizer, max_length=config.rollout.max_length,
      max_tool_calls=config.rollout.max_tool_calls,
      max_segment_tokens=config.rollout.max_segment_tokens,
      failure_rate=config.tool_failure_rate)
  step_fn = learners.make_jit_grpo_step(job.model, env, config.rollout, grpo, config.reward)
  bar = tqdm.trange(start, grpo.num_steps, desc="GRPO (jit)", initial=start,
                    total=grpo.num_steps, dynamic_ncols=True)
  for step in bar:
    t0 = time.perf_counter()
    rng = _rng(config.seed, _PHASE_IDS["grpo"], step)
    prompt_ids = rng.choice(len(train), grpo.prompts_per_step, replace=False)
    state, metrics, _ = step_fn(state, sft_params, prompt_ids, jax.random.fold_in(key, step))
    done = step + 1
    global_step = job.sft_steps + done
    if done % config.log_every == 0 or done == grpo.num_steps:
      metrics = {k: float(v) for k, v in jax.device_get(metrics).items()}
      metrics["time/step_s"] = time.perf_counter() - t0
      out.metrics(global_step, metrics)
      bar.set_postfix(success=f"{metrics['train/success']:.2f}",
                      reward=f"{metrics['train/mean_reward']:.2f}")
    if config.eval.every_steps and done % config.eval.every_steps == 0:
      success = _curve_eval(job, state.params, global_step, out)
      bar.write(f"GRPO step {done}: heldout success {success:.3f}")
    if done % config.checkpoint_every == 0 or done == grpo.num_steps:
      checkpointer.save(done, _state_tree(state, key), _checkpoint_metadata(config, "grpo", done))
  return state.params


def _final_report(job: _Job, sft_params, rl_params, out: _Outputs) -> dict[str, Any]:
  """Evaluates the expert, the SFT policy and the policy of `config.algorithm` (named so)."""
  config = job.config
  name_rl = config.algorithm
  final_step = job.sft_steps + config.grpo.num_steps
  report: dict[str, Any] = {"splits": {}, "eval_temperature": config.eval.temperature}
  for index, split in enumerate(job.eval_splits):
    tasks = job.splits[split]
    entry = {}
    expert = job.expert_episodes(tasks, _rng(config.seed, _PHASE_IDS["eval"], 10**6, index))
    entry["expert"] = evaluation.summarize_episodes(expert)
    out.episodes(expert, phase="final_eval", step=final_step, policy="expert", split=split)
    for name, params in (("sft", sft_params), (name_rl, rl_params)):
      policy_key = jax.random.PRNGKey(config.seed + 100 + index)
      batch = job.policy_episodes(params, tasks, key=policy_key,
                                  rng=_rng(config.seed, _PHASE_IDS["eval"], 10**6, index),
                                  sampler=job.sampler_eval)
      entry[name] = evaluation.summarize_episodes(batch.episodes)
      entry[name]["detectors"] = rewards.count_detections(
          batch.episodes, _suites.DETECTORS[config.task])
      out.episodes(batch.episodes, phase="final_eval", step=final_step, policy=name, split=split)
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
  if config.task == "codefix" or config.scripted_policy:
    report = _suites.run_scripted_suite(config, workdir)
    report["wall_seconds_this_invocation"] = time.time() - start_time
    return report
  job = _Job(config, workdir)
  primary = jax.process_index() == 0
  if primary:
    job.tokenizer.save_pretrained(os.path.join(workdir, "tokenizer"))

  rl_phase = config.algorithm
  with checkpoint_lib.Checkpointer(os.path.join(workdir, "checkpoints", "sft")) as sft_ckpt, \
       checkpoint_lib.Checkpointer(os.path.join(workdir, "checkpoints", rl_phase)) as rl_ckpt:
    # Both phases are restored before anything is written: the global step the run resumes
    # from is that of the newest checkpoint that could actually be read.
    sft_start, rl_start = _restore_phases(job, sft_ckpt, rl_ckpt)
    if rl_start.step:
      resume_step = job.sft_steps + rl_start.step
    else:
      resume_step = sft_start.step or None
    out = _Outputs(workdir, resume_step, config.task)
    if resume_step is not None:
      logging.info("Resuming from global step %d", resume_step)
      print(f"Resuming {workdir} from step {resume_step}", flush=True)

    sft_params = _run_sft(job, sft_start, sft_ckpt, out)
    del sft_start
    reward_model_report = None
    if config.soft_reward.weight > 0 and rl_phase in ("grpo", "ppo"):
      reward_model_report = _rlhf.train_reward_model(job, sft_params, out)
    run_phase = {"grpo": _run_grpo, "ppo": _rlhf.run_ppo, "dpo": _rlhf.run_offline,
                 "kto": _rlhf.run_offline}[rl_phase]
    rl_params = run_phase(job, sft_params, rl_start, rl_ckpt, out)
    del rl_start
  # Leaving the block waited for the last (asynchronous) saves.
  report = _final_report(job, sft_params, rl_params, out)
  report["wall_seconds_this_invocation"] = time.time() - start_time
  report["after_sft"] = dict(job.stats)
  if reward_model_report is not None:
    report["reward_model"] = reward_model_report
  # Peak resident memory of this process (Linux reports KiB).
  report["peak_rss_mib_this_invocation"] = resource.getrusage(
      resource.RUSAGE_SELF).ru_maxrss / 1024
  report["resumed_from_step"] = resume_step
  report["proxy_drift"] = {"points": len(job.drift_monitor.history),
                           "alarm_steps": list(job.drift_monitor.alarms)}
  out.close()
  if not primary:
    return report

  hf.export_pretrained(job.policy_params(rl_params), job.model.config, job.tokenizer,
                       os.path.join(workdir, "export"))
  with open(os.path.join(workdir, "report.json"), "w") as f:
    json.dump(report, f, indent=2)
  heldout = report["splits"]["heldout"]
  metrics_lib.plot_learning_curves(
      os.path.join(workdir, "metrics.csv"), os.path.join(workdir, "learning_curves.png"),
      panels=curve_panels(config), markers={"expert": heldout["expert"]["success"]})
  return report


def curve_panels(config: _config.AgentJobConfig) -> dict[str, list[str]]:
  """The panels of `learning_curves.png` (title -> metric names) for `config.algorithm`.

  Online RL plots its reward terms and its KL to the SFT policy; DPO and KTO, which sample no
  episodes after SFT, plot their objective and the implicit rewards of their data instead.
  """
  phase = config.algorithm
  panels = {"SFT loss": ["sft/nll"], "heldout success": ["eval/heldout_success", "train/success"]}
  if phase == "dpo":
    panels["DPO objective"] = ["dpo/dpo_loss", "dpo/reward_accuracy"]
    panels["DPO implicit rewards"] = ["dpo/chosen_reward", "dpo/rejected_reward",
                                      "dpo/reward_margin"]
  elif phase == "kto":
    panels["KTO objective"] = ["kto/kto_loss"]
    panels["KTO implicit rewards"] = ["kto/desirable_reward", "kto/undesirable_reward",
                                      "kto/kl_reference"]
  else:
    terms = rewards.TERMS if config.task == "calculator" else rewards.RETRIEVAL_TERMS
    panels[f"reward terms ({phase.upper()})"] = [
        f"reward/{t}" for t in terms + ("learned_term",)]
    panels["KL to SFT"] = ["grpo/kl"] if phase == "grpo" else ["ppo/kl_reward_penalty"]
  return panels


def _restore_phases(job: _Job, sft_ckpt, rl_ckpt) -> tuple[_PhaseStart, _PhaseStart]:
  """The starts of SFT and of the phase after it (`config.algorithm`), from their checkpoints."""
  config, lora = job.config, job.lora is not None
  sft_start = _restore_phase(
      sft_ckpt, job.train_state(job.init_params(), config.sft.optimizer),
      jax.random.PRNGKey(config.seed), phase="sft", seed=config.seed, lora=lora)
  rl_start = _restore_phase(
      rl_ckpt, _rlhf.template_state(job), jax.random.PRNGKey(config.seed + 1),
      phase=config.algorithm, seed=config.seed, lora=lora)
  return sft_start, rl_start


def train_sft_only(config: _config.AgentJobConfig, workdir: str) -> None:
  """Runs (or resumes) only the SFT phase in `workdir`.

  Several runs that differ only after SFT (e.g. `experiments/compare_algorithms.py`) can then
  start from a copy of `checkpoints/sft`, which the job finds and does not repeat.
  """
  _check_workdir(config, workdir)
  job = _Job(config, workdir)
  if jax.process_index() == 0:
    job.tokenizer.save_pretrained(os.path.join(workdir, "tokenizer"))
  with checkpoint_lib.Checkpointer(os.path.join(workdir, "checkpoints", "sft")) as sft_ckpt:
    sft_start = _restore_phase(
        sft_ckpt, job.train_state(job.init_params(), config.sft.optimizer),
        jax.random.PRNGKey(config.seed), phase="sft", seed=config.seed,
        lora=job.lora is not None)
    out = _Outputs(workdir, sft_start.step or None, config.task)
    _run_sft(job, sft_start, sft_ckpt, out)
  out.close()

