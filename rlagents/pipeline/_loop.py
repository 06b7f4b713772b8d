"""The job's one loop: every phase's steps, with the same cadence and the same guards.

`run_phase` drives a registered phase (`phases.Phase`) from where its checkpoint left it to its
last step, and owns everything around the step: progress, metrics every `log_every` steps, the
held-out curve every `eval.every_steps` steps and at the phase's end, the proxy-drift monitor at
each of those points (online phases: training reward since the last point against calibration
success), the audit log of every training episode, checkpoints every `checkpoint_every` steps
and at the end, and the sampled-token budget. Host code.
"""

import logging
import time
from typing import Any

import jax
import numpy as np
import tqdm

from rlagents import evaluation
from rlagents.pipeline import _checkpoints
from rlagents.pipeline import _job as job_lib
from rlagents.pipeline import _outputs
from rlagents.pipeline.phases import _base

EVAL_PHASE_ID = 4


def curve_eval(job: job_lib.Job, params, global_step: int, out: _outputs.Outputs,
               split: str = "heldout") -> float:
  """Success of the policy with train-state `params` on the first `eval.curve_tasks` tasks of
  `split`, written to the metrics (`eval/{split}_...`) and the audit log; returns it."""
  config = job.config
  tasks = list(job.suite.splits[split])[:config.eval.curve_tasks]
  # The heldout curve keeps its original stream; other splits draw from their own.
  rng_path = () if split == "heldout" else (job.suite.eval_splits.index(split),)
  batch = job.policy_episodes(params, tasks, key=jax.random.PRNGKey(config.seed + 7),
                              rng=job.rng(EVAL_PHASE_ID, global_step, *rng_path),
                              sampler=job.sampler_eval)
  summary = evaluation.summarize_episodes(batch.episodes)
  out.metrics(global_step, {f"eval/{split}_{k}": v for k, v in summary.items()
                            if isinstance(v, float)})
  out.episodes(batch.episodes, phase="curve_eval", step=global_step, policy="policy",
               split=split)
  return summary["success"]


def watch_proxy_drift(job: job_lib.Job, params, global_step: int, train_rewards,
                      out: _outputs.Outputs) -> bool:
  """At an evaluation point: calibration success vs the mean training reward since the last.

  Feeds `job.drift_monitor`; writes `eval/calibration_success`, `train/reward_since_eval` and
  `alarm/proxy_drift` (1 when the monitor fires); returns whether it fired.
  """
  calibration = curve_eval(job, params, global_step, out, split="calibration")
  train_reward = float(np.mean(train_rewards))
  alarm = job.drift_monitor.update(global_step, train_reward, calibration)
  out.metrics(global_step, {"train/reward_since_eval": train_reward,
                            "alarm/proxy_drift": float(alarm)})
  if alarm:
    logging.warning("proxy drift at step %d: training reward rose to %.3f while calibration "
                    "success stayed at %.3f", global_step, train_reward, calibration)
  return alarm


def rollout_metrics(rollout) -> dict[str, float]:
  """The mean of each reward term, success, reward, calls, denied calls and sampled tokens."""
  summary = evaluation.summarize_episodes(rollout.episodes)
  names = sorted({n for e in rollout.episodes for n in e.reward_terms})
  terms = {f"reward/{name}": float(np.mean([e.reward_terms.get(name, 0.0)
                                            for e in rollout.episodes])) for name in names}
  return {**terms, "train/success": summary["success"],
          "train/mean_reward": summary["mean_reward"],
          "train/mean_tool_calls": summary["mean_tool_calls"],
          "train/denied_calls": float(summary["denied_calls"]),
          "train/sampled_tokens": float(rollout.loss_mask.sum())}


class PhaseStats:
  """What a phase has cost so far; restored from its checkpoint's metadata on resume."""

  def __init__(self, metadata: dict[str, Any]):
    self.steps = metadata.get("step", 0)
    self.sampled_tokens = metadata.get("sampled_tokens", 0)
    self.phase_seconds = metadata.get("phase_seconds", 0.0)
    self.denied_calls = metadata.get("denied_calls", 0)

  def as_dict(self) -> dict[str, Any]:
    return {"rl_steps": self.steps, "sampled_tokens": self.sampled_tokens,
            "phase_seconds": self.phase_seconds, "denied_calls": self.denied_calls}


def run_phase(job: job_lib.Job, phase: _base.Phase, start: _checkpoints.PhaseStart,
              checkpointer, out: _outputs.Outputs, *, reference=None,
              step_offset: int = 0) -> tuple[Any, dict[str, Any]]:
  """Runs (or resumes) `phase`; returns its policy's train-state params and its stats.

  Args:
    job: the run's shared state.
    phase: the registered phase.
    start: the restored (or fresh) train state, key and step (`_checkpoints.restore_phase`).
    checkpointer: the phase's `checkpoint.Checkpointer`.
    out: the run's metrics and audit log.
    reference: the frozen reference policy (the SFT parameters); a fresh start begins from it.
    step_offset: global step of the phase's step 0 (the steps of the phases before it).
  """
  config = job.config
  num_steps = phase.num_steps(config)
  state, key = start.state, start.key
  if start.step == 0 and reference is not None:
    # A copy: the update steps donate the state's buffers, and the reference must survive them.
    state = phase.init_state(job, jax.tree.map(np.array, reference))
  stats = PhaseStats(start.metadata)
  if "running" in start.metadata:
    job.running.load(start.metadata["running"])
  if "drift" in start.metadata:
    job.drift_monitor.load(start.metadata["drift"])
  budget = config.sampled_token_budget if phase.online else 0
  spent = lambda: bool(budget) and stats.sampled_tokens >= budget
  if start.step >= num_steps or spent():
    return phase.policy_params(state), {**stats.as_dict(), **phase.finish(job, None)}

  context = phase.prepare(job, state, reference)
  if start.step:
    phase.restore(context, start.metadata)
    message = phase.resumed(start.metadata)
    if message:
      logging.info("%s", message)
      print(message, flush=True)
  state = job.place_state(state)
  every = config.eval.every_steps if phase.periodic_eval else 0
  # Saved with each checkpoint: a resume between two evaluation points feeds the drift monitor
  # the same mean as a straight run.
  rewards_since_eval: list[float] = list(start.metadata.get("rewards_since_eval", []))
  bar = tqdm.trange(start.step, num_steps, desc=phase.name.upper(), initial=start.step,
                    total=num_steps, dynamic_ncols=True)
  clock = time.time() - stats.phase_seconds
  for step in bar:
    t0 = time.perf_counter()
    result = phase.step(job, context, state, step=step, key=jax.random.fold_in(key, step),
                        rng=job.rng(phase.phase_id, step))
    state, done = result.state, step + 1
    global_step = step_offset + done
    values = dict(result.extra_metrics)
    if result.rollout is not None:
      values.update(rollout_metrics(result.rollout))
      stats.sampled_tokens += int(result.rollout.loss_mask.sum())
      stats.denied_calls += int(values["train/denied_calls"])
      rewards_since_eval.extend(e.reward for e in result.rollout.episodes)
      out.episodes(result.rollout.episodes, phase=phase.directory, step=global_step,
                   policy="policy")
    stats.sampled_tokens += result.extra_sampled_tokens
    stats.steps = done
    last = done == num_steps or spent()
    if done % config.log_every == 0 or last:
      values.update({k: float(v) for k, v in job_lib.fetch(result.metrics).items()})
      values["time/step_s"] = time.perf_counter() - t0
      out.metrics(global_step, values)
      shown = {k.split("/")[-1]: f"{v:.3g}" for k, v in values.items()
               if k in ("train/success", "train/mean_reward", "sft/nll")}
      bar.set_postfix(shown)
    if (every and done % every == 0) or last:
      params = phase.policy_params(state)
      success = curve_eval(job, params, global_step, out)
      bar.write(f"{phase.name.upper()} step {done}: heldout success {success:.3f}")
      for split in phase.extra_curve_splits(job):
        curve_eval(job, params, global_step, out, split=split)
      if rewards_since_eval:
        watch_proxy_drift(job, params, global_step, rewards_since_eval, out)
        rewards_since_eval = []
    stats.phase_seconds = time.time() - clock
    # The step that spends the budget is the phase's last: saved, so a resume stops there too.
    if done % config.checkpoint_every == 0 or last:
      extra = {}
      if phase.online:
        extra = {"sampled_tokens": stats.sampled_tokens, "phase_seconds": stats.phase_seconds,
                 "denied_calls": stats.denied_calls, "running": job.running.state(),
                 "drift": job.drift_monitor.state(),
                 "rewards_since_eval": [float(r) for r in rewards_since_eval]}
      extra.update(phase.checkpoint_metadata(context))
      checkpointer.save(done, _checkpoints.state_tree(state, key, job.lora is not None),
                        _checkpoints.metadata(phase=phase.directory, phase_id=phase.phase_id,
                                              step=done, seed=config.seed, **extra))
    if spent():
      break
  bar.close()
  return phase.policy_params(state), {**stats.as_dict(), **phase.finish(job, context)}
