"""GRPO on host rollouts: episodes through the suite's guarded tools, group-relative advantages."""

from rlagents import episodes as episodes_lib
from rlagents import learners
from rlagents import rewards
from rlagents.pipeline.phases import _base


def apply_diversity_penalty(episodes, group_size: int, weight: float) -> None:
  """Subtracts `weight * rewards.diversity_penalty(group)` from each episode of each group."""
  for start in range(0, len(episodes), group_size):
    group = episodes[start:start + group_size]
    for episode, penalty in zip(group, rewards.diversity_penalty(group)):
      episode.reward_terms["diversity"] = penalty
      episode.reward -= weight * penalty


class GRPO(_base.Phase):
  """GRPO from the SFT policy, the SFT policy as the KL reference (`config.grpo`)."""
  name, phase_id, online = "grpo", 3, True

  def settings(self, config):
    return config.grpo

  def prepare(self, job, state, reference):
    grpo = job.config.grpo
    if grpo.microbatch_size:
      update = learners.MicrobatchedGRPOStep(grpo, microbatch_size=grpo.microbatch_size,
                                             place_batch=job.place_batch)
    else:
      jitted = learners.make_grpo_step(grpo)
      update = lambda state, ref, batch: jitted(
          state, ref, job.place_batch(episodes_lib.trim_to_longest(batch)))
    return update, job.place_state(reference)

  def step(self, job, context, state, *, step, key, rng):
    update, reference = context
    config, grpo = job.config, job.config.grpo
    prompts = self.draw_tasks(job, rng, grpo.prompts_per_step)
    group_tasks = [task for task in prompts for _ in range(grpo.group_size)]
    rollout = job.train_episodes(state.params, group_tasks, key=key, rng=rng,
                                 group_size=grpo.group_size)
    if config.diversity_weight:
      apply_diversity_penalty(rollout.episodes, grpo.group_size, config.diversity_weight)
    batch = _base.policy_batch(rollout)
    for _ in range(grpo.updates_per_batch):
      state, metrics = update(state, reference, batch)
    return _base.StepResult(state, metrics, rollout)

  def panels(self, config):
    return {"KL to SFT": ["grpo/kl"]}


GRPO_PHASE = _base.register_phase(GRPO())
