"""The job's other phases after SFT: PPO, DPO / KTO, and the reward model behind the soft reward.

Host code that drives the jitted steps of `rlagents.learners`, with the same rollout engine,
guarded tools, audit trail, checkpoints and evaluation as the GRPO phase in `_agent_job`.
"""

import json
import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import tqdm

from rlagents import checkpoint as checkpoint_lib
from rlagents import evaluation
from rlagents import learners
from rlagents import networks
from rlagents.learners import _preference_data
from rlagents.learners import dpo as dpo_lib
from rlagents.learners import ppo_agent
from rlagents.learners import reward_model as reward_model_lib
from rlagents.pipeline import _agent_job

def count_parameters(tree) -> int:
  return int(sum(np.prod(x.shape) for x in jax.tree.leaves(tree)))


def template_state(job):
  """A train state of the phase after SFT (`config.algorithm`), the structure its checkpoints
  restore into (the values come from SFT when the phase starts fresh)."""
  config = job.config
  if config.algorithm == "grpo":
    return job.train_state(job.init_params(), config.grpo.optimizer)
  if config.algorithm == "ppo":
    return _ppo_state(job, job.init_params())
  return learners.create_train_state(job.model, job.init_params(), config.dpo.optimizer)


def _ppo_state(job, policy_params):
  ppo = job.config.ppo
  value_model = networks.Transformer(networks.reward_model_config(job.model.config))
  params = ppo_agent.init_params(policy_params, job.model.config, critic=ppo.critic)
  return learners.create_train_state(value_model, params, ppo.optimizer)


# ---- the reward model (soft reward) ----

def train_reward_model(job, sft_params, out) -> dict[str, Any]:
  """Trains (or restores) the reward model on verified expert preferences; sets the job's scorer.

  The noisy expert plays `expert_attempts` episodes of each of `expert_tasks` training tasks; a
  task with a correct and an incorrect episode gives pairs (`learners.verified_preferences`),
  20% of the tasks are held out for the pairwise accuracy.
  """
  config = job.config
  model_config = networks.reward_model_config(job.model.config)
  model = networks.Transformer(model_config)
  params = networks.reward_model_params(sft_params, job.model.config)
  with checkpoint_lib.Checkpointer(
      os.path.join(job.workdir, "checkpoints", "reward_model")) as checkpointer:
    restored = checkpointer.restore_latest(params)
    if restored is not None:
      params, report = restored.state, restored.metadata
    else:
      params, report = _fit_reward_model(job, model, params)
      checkpointer.save(config.reward_model.num_steps, params, report)
  out.metrics(job.sft_steps, {f"reward_model/{k}": float(v) for k, v in report.items()})
  print(f"reward model: held-out pairwise accuracy {report['heldout_accuracy']:.3f} on "
        f"{report['heldout_pairs']} pairs", flush=True)
  score = jax.jit(lambda p, tokens: networks.sequence_scores(model.apply, p, tokens))
  job.learned_scorer = lambda tokens: np.asarray(score(params, _trim_tokens(tokens)))
  return report


def _fit_reward_model(job, model, params):
  """Trains the reward model from `params` on verified expert preferences; (params, report)."""
  config = job.config
  start = time.time()
  prefs = config.preferences
  tasks = job.splits["train"][:prefs.expert_tasks]
  episodes = job.expert_episodes([t for t in tasks for _ in range(prefs.expert_attempts)],
                                 _agent_job._rng(config.seed, _agent_job._PHASE_IDS["reward_model"]))
  rng = _agent_job._rng(config.seed, _agent_job._PHASE_IDS["reward_model"], 1)
  pairs = learners.verified_preferences(episodes, rng=rng)
  train, heldout = reward_model_lib.split_pairs(pairs, config.reward_model.heldout_fraction, rng)
  length = config.rollout.max_length
  params, report = learners.train_reward_model(
      model, params, learners.encode_pairs(train, job.tokenizer, length), config.reward_model,
      rng=rng, heldout_data=learners.encode_pairs(heldout, job.tokenizer, length))
  report["seconds"] = time.time() - start
  report["parameters"] = count_parameters(params)
  return params, report


def _trim_tokens(tokens: np.ndarray, multiple: int = 32) -> np.ndarray:
  used = int(np.max(np.nonzero(tokens.any(axis=0))[0], initial=0)) + 1
  return tokens[:, :min(tokens.shape[1], -(-used // multiple) * multiple)]


# ---- PPO ----

def run_ppo(job, sft_params, start, checkpointer, out) -> Any:
  """PPO from the SFT policy (the frozen KL reference); returns the policy's parameters."""
  config, ppo = job.config, job.config.ppo
  state, key = start.state, start.key
  if start.step == 0:
    state = _ppo_state(job, jax.tree.map(jnp.copy, sft_params))
  job.start_stats(state, start.metadata)
  if start.step >= ppo.num_steps or job.budget_spent():
    return state.params["policy"]

  update = learners.PPOAgentStep(ppo)
  train = job.splits["train"]
  bar = tqdm.trange(start.step, ppo.num_steps, desc="PPO", initial=start.step,
                    total=ppo.num_steps, dynamic_ncols=True)
  phase_start = time.time() - job.stats["phase_seconds"]
  for step in bar:
    t0 = time.perf_counter()
    rng = _agent_job._rng(config.seed, _agent_job._PHASE_IDS["ppo"], step)
    tasks = [train[i] for i in rng.choice(len(train), ppo.episodes_per_step, replace=False)]
    rollout = job.train_episodes(state.params["policy"], tasks,
                                 key=jax.random.fold_in(key, step), rng=rng, group_size=1)
    t_rollout = time.perf_counter() - t0
    batch = _agent_job._trim({
        "tokens": rollout.tokens,
        "loss_mask": rollout.loss_mask,
        "old_logprobs": rollout.logprobs,
        "rewards": np.array([e.reward for e in rollout.episodes], np.float32),
    })
    state, metrics = update(state, sft_params, batch, rng)
    done = step + 1
    job.stats["sampled_tokens"] += int(rollout.loss_mask.sum())
    job.stats["rl_steps"] = done
    global_step = job.sft_steps + done
    out.episodes(rollout.episodes, phase="ppo", step=global_step, policy="policy")
    if done % config.log_every == 0 or done == ppo.num_steps:
      log_rl_step(out, global_step, metrics, rollout, t0, t_rollout, bar)
    if config.eval.every_steps and done % config.eval.every_steps == 0:
      success = _agent_job._curve_eval(job, state.params["policy"], global_step, out)
      bar.write(f"PPO step {done}: heldout success {success:.3f}")
    job.stats["phase_seconds"] = time.time() - phase_start
    # The step that spends the budget is the phase's last: saved, so a resume stops there too.
    if done % config.checkpoint_every == 0 or done == ppo.num_steps or job.budget_spent():
      checkpointer.save(done, _agent_job._state_tree(state, key),
                        _agent_job._checkpoint_metadata(config, "ppo", done, job))
    if job.budget_spent():
      break
  return state.params["policy"]


def log_rl_step(out, global_step, metrics, rollout, t0, t_rollout, bar) -> None:
  """Writes an RL step's update metrics, mean reward terms, success and timings."""
  summary = evaluation.summarize_episodes(rollout.episodes)
  names = sorted({n for e in rollout.episodes for n in e.reward_terms})
  terms = {f"reward/{name}": float(np.mean([e.reward_terms.get(name, 0.0)
                                            for e in rollout.episodes])) for name in names}
  out.metrics(global_step, {**jax.device_get(metrics), **terms,
                            "train/success": summary["success"],
                            "train/mean_reward": summary["mean_reward"],
                            "train/mean_tool_calls": summary["mean_tool_calls"],
                            "train/sampled_tokens": float(rollout.loss_mask.sum()),
                            "time/rollout_s": t_rollout,
                            "time/step_s": time.perf_counter() - t0})
  bar.set_postfix(success=f"{summary['success']:.2f}", reward=f"{summary['mean_reward']:.2f}")


# ---- DPO / KTO ----

def _sample_offline_data(job, sft_params, out, kind: str, path: str) -> None:
  """Samples the SFT policy on training prompts (up to the token budget), verifies each episode
  and writes the pairs (DPO) or labelled completions (KTO) as a JSONL file."""
  config, prefs = job.config, job.config.preferences
  train = job.splits["train"]
  rng = _agent_job._rng(config.seed, _agent_job._PHASE_IDS["preferences"])
  order = rng.permutation(len(train))[:prefs.policy_prompts]
  chunk = config.grpo.prompts_per_step
  episodes, sampled = [], 0
  for index, begin in enumerate(range(0, len(order), chunk)):
    if config.sampled_token_budget and sampled >= config.sampled_token_budget:
      break
    tasks = [train[i] for i in order[begin:begin + chunk] for _ in range(prefs.policy_samples)]
    chunk_rng = _agent_job._rng(config.seed, _agent_job._PHASE_IDS["preferences"], 1, index)
    batch = job.policy_episodes(sft_params, tasks, rng=chunk_rng,
                                key=jax.random.fold_in(jax.random.PRNGKey(config.seed + 1), index))
    sampled += int(batch.loss_mask.sum())
    episodes += batch.episodes
  out.episodes(episodes, phase=f"{kind}_data", step=job.sft_steps, policy="sft")
  if kind == "dpo":
    records = _preference_data.pair_records(
        learners.verified_preferences(episodes, rng=rng))
  else:
    records = _preference_data.feedback_records(learners.verified_feedback(episodes))
  # An episode that ran into the end of the rollout buffer can re-encode a few tokens longer
  # than `rollout.max_length` (the tool output cut at the buffer's end is whole in its text):
  # such records are left out and counted, where a user's file would be an error.
  completions = ("chosen", "rejected") if kind == "dpo" else ("completion",)
  kept = [r for r in records
          if all(_fits(r["prompt"], r[c], job.tokenizer, config.rollout.max_length)
                 for c in completions)]
  _preference_data.write_jsonl(path + ".tmp", kept)
  os.replace(path + ".tmp", path)
  with open(path + ".stats.json", "w") as f:
    json.dump({"sampled_tokens": sampled, "episodes": len(episodes), "records": len(kept),
               "records_too_long": len(records) - len(kept)}, f)


def _fits(prompt: str, completion: str, tokenizer, max_length: int) -> bool:
  try:
    _preference_data.encode(prompt, completion, tokenizer, max_length)
  except learners.PreferenceDataError:
    return False
  return True


def run_offline(job, sft_params, start, checkpointer, out) -> Any:
  """DPO or KTO from the SFT policy (the frozen reference); returns the trained parameters."""
  config, kind = job.config, job.config.algorithm
  settings = config.dpo
  state, key = start.state, start.key
  if start.step == 0:
    state = learners.create_train_state(job.model, jax.tree.map(jnp.copy, sft_params),
                                        settings.optimizer)
  job.start_stats(state, start.metadata)
  job.stats["sampled_tokens"] = 0
  phase_start = time.time() - job.stats["phase_seconds"]
  user_file = (config.preferences.preference_file if kind == "dpo"
               else config.preferences.feedback_file)
  path = user_file or os.path.join(job.workdir, "data", f"{kind}.jsonl")
  if not user_file and not os.path.exists(path):
    _sample_offline_data(job, sft_params, out, kind, path)
  if not user_file:
    with open(path + ".stats.json") as f:
      job.stats.update(json.load(f))
  length = config.rollout.max_length
  try:
    if kind == "dpo":
      data = learners.encode_pairs(learners.load_preferences(path), job.tokenizer, length)
      step_fn = learners.make_dpo_step(settings)
    else:
      data = learners.encode_feedback(learners.load_feedback(path), job.tokenizer, length)
      step_fn = learners.make_kto_step(settings)
  except learners.PreferenceDataError as e:
    raise _agent_job.JobError(str(e)) from None
  job.stats["train_examples"] = len(next(iter(data.values())))
  if start.step >= settings.num_steps:
    return state.params

  bar = tqdm.trange(start.step, settings.num_steps, desc=kind.upper(), initial=start.step,
                    total=settings.num_steps, dynamic_ncols=True)

  def on_step(done, state, metrics):
    bar.update(1)
    global_step = job.sft_steps + done
    job.stats["rl_steps"] = done
    job.stats["phase_seconds"] = time.time() - phase_start
    if done % config.log_every == 0 or done == settings.num_steps:
      out.metrics(global_step, jax.device_get(metrics))
    if config.eval.every_steps and done % config.eval.every_steps == 0:
      success = _agent_job._curve_eval(job, state.params, global_step, out)
      bar.write(f"{kind.upper()} step {done}: heldout success {success:.3f}")
    if done % config.checkpoint_every == 0 or done == settings.num_steps:
      checkpointer.save(done, _agent_job._state_tree(state, key),
                        _agent_job._checkpoint_metadata(config, kind, done, job))

  state = dpo_lib.train_offline(
      step_fn, state, sft_params, data, num_steps=settings.num_steps,
      batch_size=settings.batch_size, start=start.step, on_step=on_step,
      rng_for_step=lambda s: _agent_job._rng(config.seed, _agent_job._PHASE_IDS[kind], s))
  bar.close()
  return state.params
