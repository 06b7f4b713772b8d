"""Asynchronous GRPO: the staleness bound, partial rollouts' versions, and resume.

The sampler thread and its queue are tested with a stand-in job whose batches record the
version they were sampled with; the pipeline tests run the smoke job in `rl.mode='async'`.
"""

import json
import os
import threading
import time

import jax
import numpy as np
import pytest

from rlagents import checkpoint
from rlagents import episodes
from rlagents import hf
from rlagents import pipeline
from rlagents import rollout
from rlagents import sampling
from rlagents import tasks
from rlagents import tools
from rlagents.pipeline.phases import _async


class _Job:
  """Samples a 2-row batch per call, each policy token stamped with the newest version."""

  def __init__(self, delay: float = 0.0):
    self.delay = delay
    self.calls = 0

  def train_episodes(self, latest, tasks_, *, key, rng, group_size):
    del key, rng, group_size
    self.calls += 1
    _, version = latest.get()
    time.sleep(self.delay)
    mask = np.zeros((len(tasks_), 4), np.float32)
    mask[:, 1:] = 1
    versions = np.where(mask > 0, version, -1).astype(np.int32)
    return episodes.RolloutBatch([episodes.Episode(t) for t in tasks_], np.ones_like(versions),
                                 mask, np.zeros_like(mask), versions)


def _draw(index):
  return [f"task{index}"] * 2, jax.random.key(index), np.random.default_rng(index)


class _ConcurrentJob(_Job):
  """Records the batch indices it was asked for and how many calls ran at once."""

  def __init__(self, delay):
    super().__init__(delay)
    self.lock, self.running, self.most_at_once, self.tasks = threading.Lock(), 0, 0, []

  def train_episodes(self, latest, tasks_, **kwargs):
    with self.lock:
      self.running += 1
      self.most_at_once = max(self.most_at_once, self.running)
      self.tasks.append(tasks_[0])
    try:
      return super().train_episodes(latest, tasks_, **kwargs)
    finally:
      with self.lock:
        self.running -= 1


def test_batches_staler_than_the_bound_are_dropped_and_counted():
  job = _ConcurrentJob(delay=0.0)
  sampler = _async.AsyncSampler(job, _draw, group_size=2, params={}, version=0,
                                max_staleness=1)
  try:
    while len(sampler._ready) < 2:  # batches 0 and 1 are admitted at version 0
      time.sleep(0.01)
    time.sleep(0.05)
    assert sorted(sampler._ready) == [0, 1]  # batch 2 waits for version 1
    # A learner that jumps to version 2 drops both (it will never take them) and gets batch 2,
    # sampled afresh.
    sampler.publish({}, 2)
    batch, figures = sampler.next_batch(2)
    assert batch.episodes[0].task == "task2" and figures["async/staleness"] == 0
    assert sampler.dropped_batches == 2 and sampler.dropped_episodes == 4
    batch, figures = sampler.next_batch(3)  # admitted at version 2: one update stale at most
    assert batch.episodes[0].task == "task3" and figures["async/staleness"] <= 1
    assert figures["async/dropped_batches"] == 2
    # Batch 4 waits for version 3; after a jump to 5 it is never sampled: nothing is wasted.
    sampler.publish({}, 5)
    batch, figures = sampler.next_batch(5)
    assert batch.episodes[0].task == "task5" and figures["async/staleness"] == 0
    assert sampler.dropped_batches == 2 and "task4" not in job.tasks
  finally:
    sampler.close()
  assert not any(thread.is_alive() for thread in sampler._threads)


def test_the_admission_rule_keeps_every_batch_within_the_bound():
  """A slow learner and fast samplers: no batch is sampled only to be dropped, at most
  `max_staleness + 1` are sampled at once, and the learner gets them in order."""
  for staleness in (1, 3):
    job = _ConcurrentJob(delay=0.02)
    sampler = _async.AsyncSampler(job, _draw, group_size=2, params={}, version=0,
                                  max_staleness=staleness, num_threads=6)
    try:
      for version in range(8):
        batch, figures = sampler.next_batch(version)
        assert batch.episodes[0].task == f"task{version}"
        assert figures["async/staleness"] <= staleness
        time.sleep(0.05)  # the update
        sampler.publish({}, version + 1)
    finally:
      sampler.close()
    assert sampler.dropped_batches == 0
    assert job.most_at_once == staleness + 1
    assert max(int(t[4:]) for t in job.tasks) <= 7 + staleness


def test_several_sampler_threads_sample_distinct_batches_at_once():
  job = _ConcurrentJob(delay=0.2)  # a tool latency: both threads wait in it together
  sampler = _async.AsyncSampler(job, _draw, group_size=2, params={}, version=0,
                                max_staleness=1, num_threads=2)
  try:
    taken = []
    for version in range(4):
      batch, _ = sampler.next_batch(version)
      taken.append(batch.episodes[0].task)
      assert version - batch.versions[batch.loss_mask > 0].min() <= 1
      sampler.publish({}, version + 1)
  finally:
    sampler.close()
  assert job.most_at_once == 2
  assert len(set(job.tasks)) == len(job.tasks)  # every batch index handed out once
  assert len(set(taken)) == 4
  assert not any(thread.is_alive() for thread in sampler._threads)


def test_a_bound_of_zero_keeps_only_fresh_batches_and_a_failure_surfaces():
  job = _Job(delay=0.01)
  sampler = _async.AsyncSampler(job, _draw, group_size=2, params={}, version=0,
                                max_staleness=0)
  try:
    for version in range(3):
      batch, figures = sampler.next_batch(version)
      assert figures["async/staleness"] == 0
      assert set(batch.versions[batch.loss_mask > 0]) == {version}
      sampler.publish({}, version + 1)
  finally:
    sampler.close()

  class Broken(_Job):
    def train_episodes(self, *args, **kwargs):
      raise ValueError("tool server down")

  sampler = _async.AsyncSampler(Broken(), _draw, group_size=2, params={}, version=0,
                                max_staleness=1)
  with pytest.raises(RuntimeError, match="asynchronous sampler failed"):
    sampler.next_batch(0)
  sampler.close()


TOKENIZER = hf.build_char_tokenizer()


class _PublishingSampler:
  """Scripted segments; after the first turn it publishes new weights, as a learner would."""

  def __init__(self, segments, latest):
    self.segments = [list(s) for s in segments]
    self.latest = latest
    self.turn = 0

  def __call__(self, params, tokens, lengths, active, key):
    del key
    tokens, lengths = np.array(tokens), np.array(lengths)
    generated = np.zeros(tokens.shape, bool)
    logprobs = np.zeros(tokens.shape, np.float32)
    for b in np.flatnonzero(active):
      ids = TOKENIZER.encode(self.segments[b].pop(0), add_special_tokens=False)
      tokens[b, lengths[b]:lengths[b] + len(ids)] = ids
      generated[b, lengths[b]:lengths[b] + len(ids)] = True
      logprobs[b, lengths[b]:lengths[b] + len(ids)] = params["logp"]
      lengths[b] += len(ids)
    self.turn += 1
    self.latest.publish({"logp": -2.0}, 8)  # an update lands between two turns
    return sampling.SegmentOutput(tokens=tokens, lengths=lengths, logprobs=logprobs,
                                  generated_mask=generated,
                                  stop_token=np.full(len(lengths), -1, np.int32))


def test_a_partial_rollout_keeps_each_tokens_version_and_logprob():
  latest = rollout.LatestParams({"logp": -1.0}, 7)
  call, answer = "<call>calc(2+3)</call>", "<answer>5</answer>"
  task = tasks.CalculatorTask(task_id="t", expression="2+3", answer=5, split="train",
                              num_operands=2, max_digits=1)
  batch = rollout.sample_episodes(
      latest, [task], sampler=_PublishingSampler([[call, answer]], latest), tokenizer=TOKENIZER,
      toolbox=tools.ToolBox([tools.CalculatorTool(failure_rate=0.0)]),
      config=rollout.RolloutConfig(batch_size=2, max_length=96), key=jax.random.key(0),
      rng=np.random.default_rng(0))
  mask = batch.loss_mask[0] > 0
  versions, logprobs = batch.versions[0][mask], batch.logprobs[0][mask]
  first = len(TOKENIZER.encode(call, add_special_tokens=False))
  np.testing.assert_array_equal(versions[:first], 7)
  np.testing.assert_array_equal(versions[first:], 8)
  np.testing.assert_array_equal(logprobs[:first], -1.0)
  np.testing.assert_array_equal(logprobs[first:], -2.0)
  assert (batch.versions[0][~mask] == -1).all()
  assert batch.episodes[0].answer == "5"


def test_async_is_refused_for_phases_it_does_not_drive():
  values = pipeline.config_to_dict(pipeline.AgentJobConfig())
  values["rl"]["mode"] = "async"
  values["algorithm"] = "ppo"
  with pytest.raises(pipeline.ConfigError, match="rl.mode='async'"):
    pipeline.config_from_dict(values)
  values["rl"]["mode"] = "later"
  values["algorithm"] = "grpo"
  with pytest.raises(pipeline.ConfigError, match="rl.mode"):
    pipeline.config_from_dict(values)


class _Stop(Exception):
  pass


def _smoke(workdir_overrides=None):
  from experiments import configs
  from experiments.configs import calculator
  overrides = {"sft.num_steps": 30, "grpo.num_steps": 8, "checkpoint_every": 4,
               "eval.every_steps": 4, "proxy_drift.window": 2, "rl.mode": "async",
               "rl.max_staleness": 2, **(workdir_overrides or {})}
  return pipeline.config_from_dict(configs.with_overrides(
      calculator.get_config("smoke").to_dict(), overrides))


@pytest.mark.slow  # SFT 30 + 8 async GRPO steps, twice: about two minutes on 2 cores
def test_async_job_resumes_after_a_stop_and_says_what_it_dropped(tmp_path, capsys):
  workdir = str(tmp_path / "run")
  save = checkpoint.Checkpointer.save

  def save_then_stop(self, step, state, metadata):
    save(self, step, state, metadata)
    if metadata["phase"] == "grpo" and step == 4:
      raise _Stop

  checkpoint.Checkpointer.save = save_then_stop
  try:
    with pytest.raises(_Stop):
      pipeline.train_and_evaluate(_smoke(), workdir)
  finally:
    checkpoint.Checkpointer.save = save
  with checkpoint.Checkpointer(os.path.join(workdir, "checkpoints", "grpo")) as ckpt:
    metadata = ckpt.restore_latest().metadata
  assert metadata["step"] == 4 and "async_in_flight_episodes" in metadata
  capsys.readouterr()
  report = pipeline.train_and_evaluate(_smoke(), workdir)
  out = capsys.readouterr().out
  assert (f"asynchronous sampler: {metadata['async_in_flight_episodes']} episodes sampled "
          "ahead of the checkpoint") in out
  assert report["after_sft"]["rl_steps"] == 8
  figures = report["after_sft"]["async"]
  assert set(figures) == {"dropped_stale_batches", "dropped_stale_episodes",
                          "sampled_ahead_and_unused_episodes"}
  rows = [(r["step"], r["name"]) for r in pipeline_metrics(workdir)]
  assert len(rows) == len(set(rows))  # no step logged twice across the resume
  staleness = [r["value"] for r in pipeline_metrics(workdir) if r["name"] == "async/staleness"]
  assert staleness and max(staleness) <= 2
  # Every training episode of the 8 steps is in the audit log once, per step.
  steps = {}
  with open(os.path.join(workdir, "audit", "episodes.jsonl")) as f:
    for line in f:
      record = json.loads(line)
      if record.get("phase") == "grpo":
        steps[record["step"]] = steps.get(record["step"], 0) + 1
  assert sorted(steps) == list(range(31, 39)) and set(steps.values()) == {32}


def pipeline_metrics(workdir):
  from rlagents.metrics import read_csv
  return read_csv(os.path.join(workdir, "metrics.csv"))
