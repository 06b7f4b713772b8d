"""GRPO on host rollouts: episodes through the suite's guarded tools, group-relative advantages."""

import jax

from rlagents import episodes as episodes_lib
from rlagents import learners
from rlagents import rewards
from rlagents.pipeline import _job as job_lib
from rlagents.pipeline.phases import _async
from rlagents.pipeline.phases import _base


def apply_diversity_penalty(episodes, group_size: int, weight: float) -> None:
  """Subtracts `weight * rewards.diversity_penalty(group)` from each episode of each group."""
  for start in range(0, len(episodes), group_size):
    group = episodes[start:start + group_size]
    for episode, penalty in zip(group, rewards.diversity_penalty(group)):
      episode.reward_terms["diversity"] = penalty
      episode.reward -= weight * penalty


def prepare_update(job, reference):
  """The jitted GRPO update `(state, reference, batch) -> (state, metrics)` of `job.config.grpo`
  (microbatched when `grpo.microbatch_size` is set) and the reference placed on the job's mesh;
  phases that train with GRPO updates (grpo, grpo_dyna) share it."""
  grpo = job.config.grpo
  if grpo.microbatch_size:
    update = learners.MicrobatchedGRPOStep(grpo, microbatch_size=grpo.microbatch_size,
                                           place_batch=job.place_batch)
  else:
    jitted = learners.make_grpo_step(grpo)
    update = lambda state, ref, batch: jitted(
        state, ref, job.place_batch(episodes_lib.trim_to_longest(batch)))
  return update, job.place_state(reference)


class GRPO(_base.Phase):
  """GRPO from the SFT policy, the SFT policy as the KL reference (`config.grpo`).

  With `rl.mode='async'` a background sampler (`_async.AsyncSampler`) samples the batches with
  the newest published weights while the learner updates; see `pipeline.RLLoopConfig`.
  """
  name, phase_id, online = "grpo", 3, True

  def settings(self, config):
    return config.grpo

  def _draw(self, job, key):
    grpo = job.config.grpo

    def draw(index):
      rng = job.rng(self.phase_id, index)
      prompts = self.draw_tasks(job, rng, grpo.prompts_per_step)
      tasks = [task for task in prompts for _ in range(grpo.group_size)]
      return tasks, jax.random.fold_in(key, index), rng

    return draw

  def prepare(self, job, state, reference):
    # In async mode the sampler starts at the first step of this invocation (it needs the
    # step's weights and key): the third slot holds it then.
    return [*prepare_update(job, reference),
            "async" if job.config.rl.mode == "async" else None]

  def _start_sampler(self, job, context, state, step, key):
    rl = job.config.rl
    params = job.policy_params(state.params)  # On every process: it may gather the shards.
    # Process 0 samples (the batch is broadcast to the others at every step).
    sampler = None if jax.process_index() else _async.AsyncSampler(
        job, self._draw(job, key), group_size=job.config.grpo.group_size,
        params=params, version=step,
        max_staleness=rl.max_staleness, queue_size=rl.queue_size,
        num_threads=rl.num_samplers)
    context[2] = (sampler, _async.make_recompute())
    return context[2]

  def step(self, job, context, state, *, step, key, rng):
    update, reference, asynchronous = context
    config, grpo = job.config, job.config.grpo
    if asynchronous == "async":
      asynchronous = self._start_sampler(job, context, state, step, key)
    extra = {}
    if asynchronous is None:
      prompts = self.draw_tasks(job, rng, grpo.prompts_per_step)
      group_tasks = [task for task in prompts for _ in range(grpo.group_size)]
      rollout = job.train_episodes(state.params, group_tasks, key=key, rng=rng,
                                   group_size=grpo.group_size)
    else:
      sampler, recompute = asynchronous
      rollout, extra = _async.broadcast_from_first(
          sampler.next_batch(step) if sampler is not None else None)
    if config.diversity_weight:
      apply_diversity_penalty(rollout.episodes, grpo.group_size, config.diversity_weight)
    batch = _base.policy_batch(rollout)
    if asynchronous is not None:
      batch = _async.off_policy_batch(batch, rollout, state, step, recompute,
                                      place=job.place_batch, fetch=job_lib.fetch)
    for _ in range(grpo.updates_per_batch):
      state, metrics = update(state, reference, batch)
    if asynchronous is not None:
      params = job.policy_params(state.params)
      if sampler is not None:
        sampler.publish(params, step + 1)
    return _base.StepResult(state, metrics, rollout, extra_metrics=extra)

  def checkpoint_metadata(self, context):
    asynchronous = context[2] if context else None
    if not isinstance(asynchronous, tuple) or asynchronous[0] is None:
      return {}
    return {"async_in_flight_episodes": asynchronous[0].in_flight_episodes()}

  def resumed(self, metadata):
    if "async_in_flight_episodes" not in metadata:
      return None
    return (f"asynchronous sampler: {metadata['async_in_flight_episodes']} episodes sampled "
            "ahead of the checkpoint were not saved and are dropped; sampling starts anew")

  def finish(self, job, context):
    asynchronous = context[2] if context else None
    if not isinstance(asynchronous, tuple) or asynchronous[0] is None:
      return {}
    sampler = asynchronous[0]
    dropped_at_end = sampler.close()
    return {"async": {"dropped_stale_batches": sampler.dropped_batches,
                      "dropped_stale_episodes": sampler.dropped_episodes,
                      "sampled_ahead_and_unused_episodes": dropped_at_end}}

  def panels(self, config):
    return {"KL to SFT": ["grpo/kl"]}


GRPO_PHASE = _base.register_phase(GRPO())
