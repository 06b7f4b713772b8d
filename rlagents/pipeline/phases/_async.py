"""Asynchronous sampling for GRPO: a background sampler, a bounded queue and a staleness bound.

`rl.mode='async'`: a thread samples training batches with the newest weights the learner has
published (read at every turn, so a multi-turn episode may continue across an update, each token
keeping the version and log-prob of the weights that sampled it) and puts them into a queue of
`queue_size` batches; the learner takes them as they come. While the learner updates, the
sampler generates and the tools run, so the two overlap instead of idling in turn.

The learner's version is its update count. A batch's staleness is the learner's version minus
the oldest version among its tokens; a batch staler than `max_staleness` is dropped and counted.
For a stale batch the learner recomputes the old policy's log-probs with its current weights,
keeps the sampler's as `behaviour_logprobs`, and the GRPO loss reweights by truncated importance
sampling (`losses.importance_weights`). A fresh batch (staleness 0) is exactly the sync update.

Several processes (`jax.distributed`): process 0 runs the sampler and decides which batch the
learner takes; the batch is broadcast to the others (`broadcast_from_first`), so every process
updates on the same batch as in sync mode, where each samples the whole batch and keeps its rows.

Host code (threads; JAX releases the interpreter lock while it computes).
"""

import pickle
import queue
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
  """Produces GRPO training batches in a background thread; see the module docstring.

  Args:
    job: the run's `Job` (its suite, sampler, tools and scorer).
    draw: `draw(index) -> (tasks, key, rng)`, the tasks and randomness of batch `index`.
    group_size: episodes per task (for the learned reward's group statistics).
    params: the policy weights to start with (as the sampler takes them: LoRA merged, on the
      sampling device), at version `version`.
    version: the learner's update count at the start.
    max_staleness: batches staler than this are dropped.
    queue_size: batches sampled ahead of the learner.
    num_threads: sampler threads; each samples whole batches (batch indices are handed out in
      order, batches reach the queue as they finish).
  """

  def __init__(self, job, draw, *, group_size: int, params: Any, version: int,
               max_staleness: int, queue_size: int, num_threads: int = 1):
    self.latest = rollout_lib.LatestParams(params, version)
    self.max_staleness = max_staleness
    self.dropped_batches = 0
    self.dropped_episodes = 0
    self._job, self._draw, self._group_size = job, draw, group_size
    self._queue: queue.Queue = queue.Queue(maxsize=queue_size)
    self._stop = threading.Event()
    self._error: BaseException | None = None
    self._next_index = version
    self._lock = threading.Lock()
    self._in_progress: dict[int, int] = {}
    self._threads = [threading.Thread(target=self._produce, args=(worker,),
                                      name=f"rlagents-async-sampler-{worker}", daemon=True)
                     for worker in range(num_threads)]
    for thread in self._threads:
      thread.start()

  def _produce(self, worker: int) -> None:
    try:
      while not self._stop.is_set():
        with self._lock:
          index = self._next_index
          self._next_index += 1
        tasks, key, rng = self._draw(index)
        self._in_progress[worker] = len(tasks)
        batch = self._job.train_episodes(self.latest, tasks, key=key, rng=rng,
                                         group_size=self._group_size)
        while not self._stop.is_set():
          try:
            self._queue.put(batch, timeout=0.1)
            break
          except queue.Full:
            continue
        self._in_progress[worker] = 0
    except BaseException as error:  # Surfaces in the learner's thread at its next batch.
      self._error = error

  def publish(self, params: Any, version: int) -> None:
    """The learner's weights after its `version`-th update (a copy: updates donate buffers)."""
    self.latest.publish(jax.tree.map(jnp.copy, params), version)

  def next_batch(self, version: int) -> tuple[episodes_lib.RolloutBatch, dict[str, float]]:
    """The next batch no staler than `max_staleness` for a learner at `version`, and figures:
    its staleness (oldest token), the seconds the learner waited, the batches dropped so far."""
    start = time.perf_counter()
    while True:
      if self._error is not None:
        raise RuntimeError("the asynchronous sampler failed") from self._error
      try:
        batch = self._queue.get(timeout=0.1)
      except queue.Empty:
        continue
      sampled = batch.versions[batch.loss_mask > 0]
      oldest = int(sampled.min()) if sampled.size else version
      staleness = version - oldest
      if staleness > self.max_staleness:
        self.dropped_batches += 1
        self.dropped_episodes += len(batch.episodes)
        continue
      return batch, {"async/staleness": float(staleness),
                     "async/mean_token_staleness": float(np.mean(version - sampled))
                     if sampled.size else 0.0,
                     "async/wait_s": time.perf_counter() - start,
                     "async/dropped_batches": float(self.dropped_batches),
                     "async/dropped_episodes": float(self.dropped_episodes)}

  def in_flight_episodes(self) -> int:
    """Episodes sampled or being sampled that the learner has not taken (lost if stopped now)."""
    return (sum(len(b.episodes) for b in list(self._queue.queue))
            + sum(self._in_progress.values()))

  def close(self) -> int:
    """Stops the thread; returns the episodes it had sampled ahead that are dropped."""
    in_flight = self.in_flight_episodes()
    self._stop.set()
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
  trimmed = episodes_lib.trim_to_longest({"tokens": batch["tokens"]})["tokens"]
  tokens = place({"tokens": trimmed})["tokens"] if place is not None else trimmed
  old = np.zeros_like(batch["old_logprobs"])
  old[:, :trimmed.shape[1]] = fetch(recompute(state.apply_fn, state.params, tokens))
  return {**batch, "behaviour_logprobs": batch["old_logprobs"],
          "old_logprobs": old * (batch["loss_mask"] > 0)}


def make_recompute():
  """The jitted learner forward pass that gives the old policy's log-probs."""
  return jax.jit(learners.forward_logprobs, static_argnums=0)
