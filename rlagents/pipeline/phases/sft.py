"""SFT: demonstrations from the suite's expert, then supervised training on their actions."""

import numpy as np

from rlagents import episodes as episodes_lib
from rlagents import evaluation
from rlagents import learners
from rlagents.pipeline import _job as job_lib
from rlagents.pipeline.phases import _base


class _LengthBuckets:
  """Samples batches whose episodes have similar lengths, so padding stays small (`multiple`
  0: one bucket of every episode)."""

  def __init__(self, tokens: np.ndarray, multiple: int = 32):
    lengths = episodes_lib.sequence_lengths(tokens)
    keys = -(-lengths // multiple) if multiple else np.zeros_like(lengths)
    self.buckets = [np.flatnonzero(keys == k) for k in np.unique(keys)]
    self.weights = np.array([len(b) for b in self.buckets], np.float64) / len(tokens)

  def sample(self, rng: np.random.Generator, batch_size: int) -> np.ndarray:
    bucket = self.buckets[rng.choice(len(self.buckets), p=self.weights)]
    return bucket[rng.integers(len(bucket), size=batch_size)]


class SFT(_base.Phase):
  """Supervised warm start on `sft.num_demonstrations` expert episodes (noisy on purpose)."""
  name, phase_id, periodic_eval = "sft", 2, False
  demos_phase_id = 1

  def settings(self, config):
    return config.sft

  def prepare(self, job, state, reference):
    config = job.config
    # A suite with fewer training tasks than demonstrations is cycled through, the expert's
    # slips drawn afresh each time.
    train = job.suite.splits["train"]
    tasks = [train[i % len(train)] for i in range(config.sft.num_demonstrations)]
    # The phase after SFT may ask for demonstrations on tasks of its own (self-play's smaller
    # problems) and for examples of a role of its own (self-play's proposer).
    following = _base.get_phase(config.algorithm)
    extra_tasks = following.warm_start_tasks(job, job.rng(self.demos_phase_id, 2))
    demos = job.expert_episodes(tasks + extra_tasks, job.rng(self.demos_phase_id))
    job.outputs.episodes(demos, phase="sft_demonstration", step=0, policy="expert")
    extra = following.warm_start_demonstrations(job, job.rng(self.demos_phase_id, 1))
    if extra:
      job.outputs.episodes(extra, phase="sft_demonstration", step=0, policy="expert",
                           role="proposer")
    trained = demos
    if config.sft.successful_only:
      trained = [d for d in demos if d.reward_terms["correct_answer"] > 0]
      if not trained:
        raise job_lib.JobError("sft.successful_only: none of the expert's "
                               f"{len(demos)} demonstrations succeeded")
    try:
      data = episodes_lib.stack_episodes(trained + extra, job.tokenizer,
                                         config.rollout.max_length,
                                         episode_format=job.format)
    except episodes_lib.EncodeError as error:
      raise job_lib.JobError(f"a demonstration does not fit the rollout buffer: {error}; raise "
                             "rollout.max_length and model.max_len") from None
    job.outputs.metrics(0, {"expert/train_success":
                            evaluation.summarize_episodes(demos[:len(tasks)])["success"],
                            "sft/demonstrations": float(len(trained))})
    return (data, _LengthBuckets(data.tokens, config.sft.length_bucket),
            learners.make_sft_step())

  def step(self, job, context, state, *, step, key, rng):
    data, buckets, update = context
    rows = buckets.sample(rng, job.config.sft.batch_size)
    batch = episodes_lib.trim_to_longest({"tokens": data.tokens[rows],
                                          "loss_mask": data.loss_mask[rows]})
    state, metrics = update(state, job.place_batch(batch))
    return _base.StepResult(state, metrics)

  def panels(self, config):
    return {"SFT loss": ["sft/nll"]}


SFT_PHASE = _base.register_phase(SFT())
