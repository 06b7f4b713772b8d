"""Asynchronous sampling for GRPO: background samplers, an admission rule and a staleness bound.

`rl.mode='async'`: sampler threads sample training batches with the newest weights the learner
has published (read at every turn, so a multi-turn episode may continue across an update, each
token keeping the version and log-prob of the weights that sampled it); the learner takes batch
`i` for its update `i`. While the learner updates, the samplers generate and the tools run, so
the three overlap instead of idling in turn.

The learner's version is its update count. A batch's staleness is the learner's version minus
the oldest version among its tokens. A thread starts batch `i` only once version
`i - max_staleness` is published (fewer ahead with a smaller `queue_size`), so every batch is
within the bound and none is sampled only to be dropped; only batches of indices a learner
skipped (its version jumped) are dropped and counted.
For a stale batch the learner recomputes the old policy's log-probs with its current weights,
keeps the sampler's as `behaviour_logprobs`, and the GRPO loss reweights by truncated importance
sampling (`losses.importance_weights`). A fresh batch (staleness 0) is exactly the sync update.

Several processes (`jax.distributed`): process 0 runs the sampler and decides which batch the
learner takes; the batch is broadcast to the others (`broadcast_from_first`), so every process
updates on the same batch as in sync mode, where each samples the whole batch and keeps its rows.

Host code (threads; JAX releases the interpreter lock while it computes).
"""

import pickle
import threading
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax.experimental import multihost_utils

from rlagents import episodes as episodes_lib
from rlagents import learners
from rlagents import rollout as rollout_lib


class AsyncSampler:
  """Produces GRPO training batches in background threads; see the module docstring.

  Batch `i` is the learner's batch for its update `i` (`draw(i)`). A thread may start batch
  `i` only once the learner has published version `i - lookahead` or newer, so its oldest
  token is at most `lookahead` updates older than the learner that takes it: with
  `lookahead <= max_staleness` no batch is sampled only to be dropped. The learner takes the
  batches in order; while it updates on batch `i`, batches `i + 1 .. i + lookahead` are being
  sampled (each by its own thread, so one generates while another waits on its tools).

  Args:
    job: the run's `Job` (its suite, sampler, tools and scorer).
    draw: `draw(index) -> (tasks, key, rng)`, the tasks and randomness of batch `index`.
    group_size: episodes per task (for the learned reward's group statistics).
    params: the policy weights to start with (as the sampler takes them: LoRA merged, on the
      sampling device), at version `version`.
    version: the learner's update count at the start.
    max_staleness: the bound on a batch's staleness, kept by admission.
    queue_size: batches sampled ahead of the learner's current one (0: `max_staleness`;
      capped at it, since staler ones would be dropped).
    num_threads: sampler threads (0: one per batch that may be sampled at once,
      `lookahead + 1`); each samples whole batches.
  """

  def __init__(self, job, draw, *, group_size: int, params: Any, version: int,
               max_staleness: int, queue_size: int = 0, num_threads: int = 0):
    self.latest = rollout_lib.LatestParams(params, version)
    self.max_staleness = max_staleness
    self.lookahead = min(max_staleness, queue_size) if queue_size else max_staleness
    self.dropped_batches = 0
    self.dropped_episodes = 0
    self._job, self._draw, self._group_size = job, draw, group_size
    self._version = version  # the newest published (admission)
    self._next_index = version
    self._ready: dict[int, episodes_lib.RolloutBatch] = {}
    self._in_progress: dict[int, int] = {}
    self._condition = threading.Condition()
    self._stop = threading.Event()
    self._error: BaseException | None = None
    self._threads = [threading.Thread(target=self._produce,
                                      name=f"rlagents-async-sampler-{worker}", daemon=True)
                     for worker in range(num_threads or self.lookahead + 1)]
    for thread in self._threads:
      thread.start()

  def _claim(self) -> int | None:
    """The next batch index this thread may sample, once admitted (None: stopping)."""
    with self._condition:
      while not self._stop.is_set():
        index = max(self._next_index, self._version)
        if index > self._version + self.lookahead:
          self._condition.wait(timeout=0.1)
          continue
        self._next_index = index + 1
        self._in_progress[index] = 0
        return index
      return None

  def _produce(self) -> None:
    try:
      while (index := self._claim()) is not None:
        tasks, key, rng = self._draw(index)
        with self._condition:
          self._in_progress[index] = len(tasks)
        batch = self._job.train_episodes(self.latest, tasks, key=key, rng=rng,
                                         group_size=self._group_size)
        with self._condition:
          del self._in_progress[index]
          self._ready[index] = batch
          self._condition.notify_all()
    except BaseException as error:  # Surfaces in the learner's thread at its next batch.
      self._error = error
      with self._condition:
        self._condition.notify_all()

  def publish(self, params: Any, version: int) -> None:
    """The learner's weights after its `version`-th update (a copy: updates donate buffers)."""
    self.latest.publish(jax.tree.map(jnp.copy, params), version)
    with self._condition:
      self._version = max(self._version, version)
      self._condition.notify_all()

  def _drop(self, batch) -> None:
    self.dropped_batches += 1
    self.dropped_episodes += len(batch.episodes)

  def next_batch(self, version: int) -> tuple[episodes_lib.RolloutBatch, dict[str, float]]:
    """Batch `version` for a learner at `version`, and figures: its staleness (oldest token;
    at most `lookahead` by the admission rule, since a thread reads the weights after it is
    admitted), the seconds the learner waited, the batches dropped so far. Batches of earlier
    indices still waiting (a learner that skipped versions) are dropped."""
    start = time.perf_counter()
    with self._condition:
      while True:
        if self._error is not None:
          raise RuntimeError("the asynchronous sampler failed") from self._error
        for index in [i for i in self._ready if i < version]:
          self._drop(self._ready.pop(index))
        if version not in self._ready:
          self._condition.wait(timeout=0.1)
          continue
        batch = self._ready.pop(version)
        break
    sampled = batch.versions[batch.loss_mask > 0]
    staleness = version - (int(sampled.min()) if sampled.size else version)
    return batch, {"async/staleness": float(staleness),
                   "async/mean_token_staleness": float(np.mean(version - sampled))
                   if sampled.size else 0.0,
                   "async/wait_s": time.perf_counter() - start,
                   "async/dropped_batches": float(self.dropped_batches),
                   "async/dropped_episodes": float(self.dropped_episodes)}

  def in_flight_episodes(self) -> int:
    """Episodes sampled or being sampled that the learner has not taken (lost if stopped now)."""
    with self._condition:
      return (sum(len(b.episodes) for b in self._ready.values())
              + sum(self._in_progress.values()))

  def close(self) -> int:
    """Stops the threads; returns the episodes they had sampled ahead that are dropped."""
    in_flight = self.in_flight_episodes()
    self._stop.set()
    with self._condition:
      self._condition.notify_all()
    for thread in self._threads:
      thread.join(timeout=600)
    return in_flight


def broadcast_from_first(value: Any) -> Any:
  """`value` of process 0 on every process (pickled through two broadcasts: its length, then
  its bytes); other processes pass anything (None). One process: `value` itself."""
  if jax.process_count() == 1:
    return value
  first = jax.process_index() == 0
  data = np.frombuffer(pickle.dumps(value), np.uint8) if first else np.zeros(0, np.uint8)
  size = int(multihost_utils.broadcast_one_to_all(np.asarray(data.size, np.int64)))
  buffer = data if first else np.zeros(size, np.uint8)
  return pickle.loads(np.asarray(multihost_utils.broadcast_one_to_all(buffer)).tobytes())


def off_policy_batch(batch: dict[str, np.ndarray], rollout: episodes_lib.RolloutBatch,
                     state, version: int, recompute, *, place=None,
                     fetch=np.asarray) -> dict[str, np.ndarray]:
  """`batch` for an update at `version`: where any token was sampled by older weights, the
  sampler's log-probs become `behaviour_logprobs` and `old_logprobs` are recomputed with the
  learner's current weights (`recompute(apply_fn, params, tokens)`; `place` puts the tokens on
  the learner's mesh and `fetch` brings the result back to the host, for states that span
  several processes); a fresh batch is as it is."""
  sampled = rollout.versions[rollout.loss_mask > 0]
  if not sampled.size or int(sampled.min()) == version:
    return batch
  trimmed = episodes_lib.trim_to_longest(
      {"tokens": batch["tokens"], "loss_mask": batch["loss_mask"]})["tokens"]
  tokens = place({"tokens": trimmed})["tokens"] if place is not None else trimmed
  old = np.zeros_like(batch["old_logprobs"])
  old[:, :trimmed.shape[1]] = fetch(recompute(state.apply_fn, state.params, tokens))
  return {**batch, "behaviour_logprobs": batch["old_logprobs"],
          "old_logprobs": old * (batch["loss_mask"] > 0)}


def make_recompute():
  """The jitted learner forward pass that gives the old policy's log-probs."""
  return jax.jit(learners.forward_logprobs, static_argnums=0)
