"""GRPO with imagined episodes beside real ones (Dyna): `algorithm='grpo_dyna'`, key-door suite.

Each step draws `grpo.prompts_per_step` prompts; `imagination.fraction` of the groups are rolled
out in the learned simulator (`world_models.TextWorldModelEnv`, inside jit), the rest in the real
environment (the suite's `jax_env`), with the same policy and sampler; an imagined group whose
model was unsure of any call (predictive entropy above `imagination.uncertainty_threshold`) is
rolled out again in the real environment. One GRPO update takes both. The simulator is first fit
on the real transitions in the audit log (the SFT demonstrations) and refit on the log's real
episodes every `imagination.refit_every` steps.

Real episodes are replayed through the guarded tools, scored, audited and drift-monitored as in
`grpo_jit`; imagined ones are written to the audit log marked `"imagined": true` (replay skips
them; the simulator never trains on them). Metrics: `imagination/groups`, `.../routed_groups`,
`.../success` (in imagination), `real/tool_calls` (real environment steps so far). At every
evaluation point the same policy's calibration success in imagination and in reality is
compared; a gap above `imagination.gap_margin` raises the proxy-drift alarm (and with
`stop_on_gap` ends imagination). Evaluation is always real (the loop's).

The simulator's parameters are not checkpointed: a resumed run refits it from the audit log.
"""

import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np

from rlagents import episodes as episodes_lib
from rlagents import networks
from rlagents import rollout as rollout_lib
from rlagents import world_models
from rlagents.pipeline import _job as job_lib
from rlagents.pipeline.phases import _base
from rlagents.pipeline.phases import grpo as grpo_phase


@dataclasses.dataclass
class _Context:
  update: object
  reference: object
  real_env: object
  sim_env: object
  sim_model: object
  sim_params: object
  rollout: object        # (policy params, sim params, task ids, key) -> (real, imagined)
  predictor: object
  imagining: bool = True
  real_calls: int = 0
  gaps: list = dataclasses.field(default_factory=list)


class GRPODyna(_base.Phase):
  """GRPO on real and imagined groups (`config.grpo`, `config.imagination`)."""
  name, phase_id, online = "grpo_dyna", 3, True

  def settings(self, config):
    return config.grpo

  def validate(self, config):
    if config.task != "keydoor":
      return (f"algorithm='grpo_dyna' learns a simulator of the key-door world; task="
              f"{config.task!r} has none (use task='keydoor')")
    for field in ("lora.rank", "diversity_weight", "soft_reward.weight"):
      section, _, name = field.rpartition(".")
      value = getattr(getattr(config, section) if section else config, name)
      if value:
        return f"algorithm='grpo_dyna' does not support {field}={value}"
    if config.init_from:
      return "algorithm='grpo_dyna' runs on the built-in character tokenizer; init_from is set"
    return None

  def _fit(self, job, model, params, steps):
    settings = job.config.imagination
    transitions = world_models.transitions_from_audit(
        os.path.join(job.workdir, "audit", "episodes.jsonl"), suite="keydoor")
    if not transitions:
      raise job_lib.JobError("grpo_dyna: the audit log holds no real key-door transitions to "
                             "fit the simulator on")
    data = world_models.encode_text_transitions(transitions, job.tokenizer)
    params, _ = world_models.fit_text_world_model(
        model, data, steps=steps, batch_size=settings.batch_size,
        learning_rate=settings.learning_rate, seed=job.config.seed, params=params,
        event_weight=settings.event_weight)
    return params

  def prepare(self, job, state, reference):
    config, settings = job.config, job.config.imagination
    update, reference = grpo_phase.prepare_update(job, reference)
    train = job.suite.splits["train"]
    real_env = job.suite.jax_env(train, job.tokenizer, config.rollout)
    sim_model = networks.Transformer(world_models.text_world_model_config(
        len(job.tokenizer), d_model=settings.d_model, n_layers=settings.n_layers))
    sim_params = self._fit(job, sim_model, None, settings.fit_steps)
    sim_env = world_models.TextWorldModelEnv.wrap(real_env, sim_model, sim_params,
                                                  job.tokenizer)
    real_rollout = rollout_lib.make_jit_rollout(job.model, real_env, config.rollout)

    def both(params, sim_params, task_ids, key):
      imagined_env = dataclasses.replace(sim_env, params=sim_params)
      imagined = rollout_lib.make_jit_rollout(job.model, imagined_env, config.rollout)
      return real_rollout(params, task_ids, key), imagined(params, task_ids, key)

    context = _Context(update, reference, real_env, sim_env, sim_model, sim_params,
                       jax.jit(both), None)
    context.predictor = world_models.TextHostPredictor(sim_model, sim_params, job.tokenizer)
    return context

  def _decode(self, job, episodes, tasks, toolbox_for):
    host = job_lib.fetch(episodes)
    return host, rollout_lib.decode_jit_episodes(
        host.tokens, host.length, host.loss_mask, host.call_status, tasks,
        tokenizer=job.tokenizer, toolbox_for=toolbox_for,
        max_tool_calls=job.config.rollout.max_tool_calls)

  def step(self, job, context, state, *, step, key, rng):
    config, settings, grpo = job.config, job.config.imagination, job.config.grpo
    if step and step % settings.refit_every == 0:
      context.sim_params = self._fit(job, context.sim_model, context.sim_params,
                                     settings.refit_steps)
      context.predictor = world_models.TextHostPredictor(context.sim_model, context.sim_params,
                                                         job.tokenizer)
    train = job.suite.splits["train"]
    prompt_ids = rng.choice(len(train), grpo.prompts_per_step, replace=False)
    imagined_groups = (int(round(settings.fraction * grpo.prompts_per_step))
                       if context.imagining else 0)
    task_ids = np.repeat(prompt_ids, grpo.group_size)
    real, imagined = jax.device_get(context.rollout(
        job.policy_params(state.params), context.sim_params, task_ids, key))
    # Groups 0..imagined_groups-1 come from imagination unless the model was unsure there.
    groups = np.arange(len(task_ids)) // grpo.group_size
    unsure = np.zeros(grpo.prompts_per_step, bool)
    np.logical_or.at(unsure, groups, imagined.uncertainty > settings.uncertainty_threshold)
    use_imagined = (groups < imagined_groups) & ~unsure[groups]
    merged = jax.tree.map(lambda a, b: np.where(
        use_imagined.reshape((-1,) + (1,) * (np.ndim(a) - 1)), b, a), real, imagined)
    terms = jax.vmap(context.real_env.reward_terms)(merged)
    rewards = np.asarray(context.real_env.compose_reward(terms), np.float32)
    batch = {"tokens": merged.tokens, "loss_mask": merged.loss_mask,
             "old_logprobs": merged.logprobs, "rewards": rewards}
    for _ in range(grpo.updates_per_batch):
      state, metrics = context.update(state, context.reference, batch)
    # The real rows: replayed through the guarded tools, scored, audited by the loop.
    rows = np.flatnonzero(~use_imagined)
    tasks = [train[i] for i in task_ids]
    real_rows = jax.tree.map(lambda a: a[rows], real)
    host, decoded = self._decode(job, real_rows, [tasks[i] for i in rows],
                                 job.suite.toolbox_for)
    job.score(decoded.episodes)
    context.real_calls += int(np.asarray(real_rows.num_calls).sum())
    extra = {"train/mismatched_calls": float(decoded.mismatched_calls),
             "imagination/groups": float(len(np.unique(groups[use_imagined]))),
             "imagination/routed_groups": float(np.sum(unsure[:imagined_groups])),
             "real/tool_calls": float(context.real_calls)}
    fake_rows = np.flatnonzero(use_imagined)
    if len(fake_rows):
      imagined_rows = jax.tree.map(lambda a: a[fake_rows], imagined)
      _, replayed = self._decode(
          job, imagined_rows, [tasks[i] for i in fake_rows],
          lambda task: world_models.SimulatedWorld(context.predictor, task).toolbox())
      fake_terms = jax.device_get(jax.vmap(context.real_env.reward_terms)(imagined_rows))
      for index, episode in enumerate(replayed.episodes):
        episode.reward_terms = {k: float(v[index]) for k, v in fake_terms.items()}
        episode.reward = float(rewards[fake_rows[index]])
      job.outputs.episodes(replayed.episodes, phase=self.name, step=job.sft_steps + step + 1,
                           policy="policy", imagined=True)
      extra["imagination/success"] = float(np.mean(fake_terms["correct_answer"]))
    every = config.eval.every_steps
    if every and (step + 1) % every == 0:
      extra.update(self._gap(job, context, state, step, key))
    rollout = episodes_lib.RolloutBatch(decoded.episodes, host.tokens, host.loss_mask,
                                        host.logprobs)
    return _base.StepResult(state, metrics, rollout, extra)

  def _gap(self, job, context, state, step, key):
    """Calibration success in imagination and in reality, same policy and key; the alarm."""
    settings = job.config.imagination
    tasks = list(job.suite.splits["calibration"])[:job.config.eval.curve_tasks]
    real_env = job.suite.jax_env(tasks, job.tokenizer, job.config.rollout)
    sim_env = world_models.TextWorldModelEnv.wrap(real_env, context.sim_model,
                                                  context.sim_params, job.tokenizer)
    real, imagined = calibration_success(job.model, job.policy_params(state.params), real_env,
                                         sim_env, job.config.rollout, key)
    gap, alarm = imagination_gap(real, imagined, margin=settings.gap_margin)
    if alarm:
      job.drift_monitor.alarms.append(job.sft_steps + step + 1)
      if settings.stop_on_gap:
        context.imagining = False
    context.gaps.append(gap)
    return {"imagination/calibration_success": imagined,
            "imagination/real_calibration_success": real, "imagination/gap": gap,
            "alarm/imagination_gap": float(alarm)}

  def panels(self, config):
    return {"KL to SFT": ["grpo/kl"],
            "imagination": ["imagination/calibration_success",
                            "imagination/real_calibration_success", "imagination/success"]}

  def finish(self, job, context):
    if context is None:
      return {}
    return {"real_tool_calls": context.real_calls,
            "imagination_gaps": [float(g) for g in context.gaps]}


def calibration_success(model, params, real_env, sim_env, rollout_config, key
                        ) -> tuple[float, float]:
  """`(real, imagined)` success of the policy on every task of `real_env` (its simulator in
  `sim_env`), the same key for both."""
  task_ids = jnp.arange(real_env.num_tasks)
  real = rollout_lib.make_jit_rollout(model, real_env, rollout_config)
  imagined = rollout_lib.make_jit_rollout(model, sim_env, rollout_config)
  real_episodes = jax.jit(real)(params, task_ids, key)
  imagined_episodes = jax.jit(imagined)(params, task_ids, key)
  return (float(jnp.mean(real_episodes.correct)), float(jnp.mean(imagined_episodes.correct)))


def imagination_gap(real: float, imagined: float, *, margin: float) -> tuple[float, bool]:
  """`(imagined - real, alarm)`: the alarm when success in imagination and in reality differ
  by more than `margin` either way (the model flatters the policy, or it fails where reality
  does not: both mean the policy is learning a world that is not there)."""
  gap = imagined - real
  return gap, abs(gap) > margin


GRPO_DYNA_PHASE = _base.register_phase(GRPODyna())
