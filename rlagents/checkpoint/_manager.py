"""Orbax checkpoints of a whole train state by step: atomic, kept N deep, async, and checked on restore.

Host code (not jittable). Layout of `directory` (see docs/checkpoints.md):

    <step>/state/...            the state pytree (Orbax, OCDBT): params, optimizer state, step, RNG
    <step>/metadata/metadata    a JSON dict written with the state (phase, data position, seed...)
    <step>/_CHECKPOINT_METADATA, commit_success.txt   written last by Orbax
    <step>.orbax-checkpoint-tmp a save in flight; renamed to <step> only once complete
    corrupt-<step>              a step found unreadable and set aside by `restore_latest`

Atomic: Orbax writes each step into a temporary directory and renames it when every file is
written, so a crash mid-save (even SIGKILL) never leaves a step that looks finished; the stale
temporary directory is removed when a `Checkpointer` next opens the directory.

Async: `save` returns once the arrays are copied off the device (the train step may then donate
their buffers); the files are written by a background thread. The next `save`, `restore`,
`wait_until_finished` and `close` wait for it, so a run that closes its checkpointer (also on an
exception: use it as a context manager) never exits with a save half done.

Multi-host: every process calls `save` and `restore` (Orbax's save is collective). Orbax writes
each array shard once, and only process 0 (the primary host) writes the metadata, renames the
temporary directory and deletes old steps; every process reads on restore. Setting a corrupt step
aside is done by process 0 only.

A step that is unreadable anyway (a disk fault, a truncated or deleted file, a hand edit) is
detected when it is read: `restore` raises `CheckpointError` naming the directory and the fault;
`restore_latest` warns (`CheckpointWarning`) and falls back to the newest readable step. Bytes
flipped inside a data file still parse; a SHA-256 of the state's values, recorded in the step's
metadata at save time and checked when a step is restored into a target, catches those.
"""

import dataclasses
import hashlib
import logging
import os
import warnings
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

# The metadata key under which `save` records the state's digest; `restore` removes it.
_DIGEST_KEY = "_rlagents_state_sha256"


class CheckpointError(RuntimeError):
  """A checkpoint exists but cannot be read (or cannot be written at the step asked for)."""


class CheckpointWarning(UserWarning):
  """A checkpoint step was unreadable and an older one is used instead."""


@dataclasses.dataclass(frozen=True)
class Restored:
  """A restored step: its number, the state pytree and the metadata dict saved with it."""
  step: int
  state: Any
  metadata: dict[str, Any]


def _state_digest(state: Any) -> str | None:
  """SHA-256 over every leaf's shape and values, in tree order; None if some leaf is not fully
  addressable by this process (then the check is skipped).

  Values are hashed as int64 or float64 (exact for every narrower type), so a step restored into
  a target whose leaf types differ from the saved ones (a Python int step, say) still matches.
  """
  digest = hashlib.sha256()
  for leaf in jax.tree.leaves(state):
    if isinstance(leaf, jax.Array):
      if not leaf.is_fully_addressable:
        return None
      if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        leaf = jax.random.key_data(leaf)
    value = np.asarray(jax.device_get(leaf))
    if value.dtype.kind in "biu":
      value = value.astype(np.int64)
    elif value.dtype.kind in "fc" or value.dtype.name == "bfloat16":
      value = value.astype(np.complex128 if value.dtype.kind == "c" else np.float64)
    value = np.ascontiguousarray(value)
    digest.update(f"{value.dtype.str}{value.shape}".encode())
    digest.update(value.tobytes())
  return digest.hexdigest()


def _first_line(error: BaseException) -> str:
  return (str(error).strip().splitlines() or [type(error).__name__])[0][:300]


class Checkpointer:
  """Saves and restores `(state pytree, metadata dict)` by step in `directory`.

  Args:
    directory: where the steps live; created if missing.
    max_to_keep: the newest steps kept on disk (older ones are deleted after each save). Keep at
      least 2 so that a step found corrupt has a predecessor to fall back to.
    async_save: write in a background thread (see the module docstring).
    verify: record a SHA-256 of the state's values with each step and check it when a step is
      restored into a `target`, so silently flipped bytes are caught too (Orbax's own reads
      catch missing, truncated and unparsable files). Costs one host copy of the state per save.
  """

  def __init__(self, directory: str, *, max_to_keep: int = 2, async_save: bool = True,
               verify: bool = True):
    if max_to_keep < 1:
      raise ValueError(f"max_to_keep must be >= 1, got {max_to_keep}")
    self.directory = os.path.abspath(directory)
    self._verify = verify
    self._manager = ocp.CheckpointManager(
        self.directory,
        options=ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep, create=True, cleanup_tmp_directories=True,
            enable_async_checkpointing=async_save,
            multiprocessing_options=ocp.options.MultiprocessingOptions(primary_host=0)),
        item_names=("state", "metadata"),
    )

  def all_steps(self) -> list[int]:
    """The finished steps on disk, oldest first (readable or not: reading is what tells)."""
    return sorted(self._manager.all_steps())

  def latest_step(self) -> int | None:
    return self._manager.latest_step()

  def save(self, step: int, state: Any, metadata: dict[str, Any]) -> None:
    """Starts saving `state` and `metadata` (JSON-serialisable) as `step`; see `async_save`.

    Raises:
      CheckpointError: if `step` is not newer than the newest step on disk.
    """
    latest = self._manager.latest_step()
    if latest is not None and step <= latest:
      raise CheckpointError(f"cannot save step {step} in {self.directory}: step {latest} is "
                            "already there (a checkpoint directory belongs to one run)")
    if _DIGEST_KEY in metadata:
      raise ValueError(f"metadata key {_DIGEST_KEY!r} is reserved")
    if self._verify:
      metadata = {**metadata, _DIGEST_KEY: _state_digest(state)}
    saved = self._manager.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state), metadata=ocp.args.JsonSave(metadata)))
    if not saved:
      raise CheckpointError(f"Orbax declined to save step {step} in {self.directory}")

  def wait_until_finished(self) -> None:
    """Blocks until the save in flight (if any) is on disk."""
    self._manager.wait_until_finished()

  def restore(self, step: int, target: Any = None) -> tuple[Any, dict[str, Any]]:
    """Restores `step` into the structure (and shardings) of `target`, or as saved if None.

    Raises:
      CheckpointError: the step is missing, or a file of it is missing, truncated or garbled;
        the one-line message names the step directory and the fault.
    """
    self._manager.wait_until_finished()
    step_dir = os.path.join(self.directory, str(step))
    if not os.path.isdir(step_dir):
      raise CheckpointError(f"checkpoint step directory {step_dir} does not exist")
    abstract = None if target is None else jax.tree.map(ocp.utils.to_shape_dtype_struct, target)
    try:
      restored = self._manager.restore(step, args=ocp.args.Composite(
          state=ocp.args.StandardRestore(abstract), metadata=ocp.args.JsonRestore()))
      metadata = restored.metadata
      if not isinstance(metadata, dict):
        raise ValueError(f"metadata is {type(metadata).__name__}, not a JSON object")
      metadata = dict(metadata)
      expected = metadata.pop(_DIGEST_KEY, None)
      if target is not None and expected is not None and self._verify:
        actual = _state_digest(restored.state)
        if actual is not None and actual != expected:
          raise ValueError("the restored values do not match the SHA-256 recorded at save time")
    except Exception as e:  # Orbax and TensorStore raise many types for unreadable data.
      raise CheckpointError(
          f"checkpoint step directory {step_dir} is corrupt or unreadable "
          f"({type(e).__name__}: {_first_line(e)})") from e
    return restored.state, metadata

  def restore_latest(self, target: Any = None) -> Restored | None:
    """Restores the newest readable step; None if the directory holds no step.

    Each newer step that cannot be read is reported with a `CheckpointWarning` (and a log
    warning) naming its directory and the fault, then set aside as `corrupt-<step>` (by
    process 0) so the run can write that step again.

    Raises:
      CheckpointError: there are steps but none of them is readable (nothing is set aside).
    """
    self._manager.wait_until_finished()
    self._manager.reload()
    failures = []
    for step in reversed(self.all_steps()):
      try:
        state, metadata = self.restore(step, target)
      except CheckpointError as e:
        message = f"{e}; falling back to the previous checkpoint"
        logging.warning("%s", message)
        warnings.warn(message, CheckpointWarning, stacklevel=2)
        failures.append((step, str(e)))
        continue
      self._set_aside([s for s, _ in failures])
      return Restored(step=step, state=state, metadata=metadata)
    if failures:
      raise CheckpointError(f"no readable checkpoint in {self.directory}; " +
                            "; ".join(reason for _, reason in failures))
    return None

  def _set_aside(self, steps: list[int]) -> None:
    if steps and jax.process_index() == 0:
      for step in steps:
        target = os.path.join(self.directory, f"corrupt-{step}")
        suffix = 1
        while os.path.exists(target):
          suffix += 1
          target = os.path.join(self.directory, f"corrupt-{step}-{suffix}")
        os.rename(os.path.join(self.directory, str(step)), target)
        logging.warning("checkpoint step %d set aside as %s", step, target)
    if steps:
      if jax.process_count() > 1:  # The others must not see the step before it is gone.
        ocp.multihost.sync_global_processes(f"rlagents_checkpoint_set_aside_{steps[-1]}")
      self._manager.reload()

  def close(self) -> None:
    """Waits for the save in flight and the removal of unfinished saves, and releases Orbax's
    resources."""
    self._manager.wait_until_finished()
    # Orbax removes unfinished saves in the background from construction on and awaits that
    # only before a save, not in `close`: a checkpointer opened and closed without saving
    # could otherwise still delete a `<step>.orbax-checkpoint-tmp` directory afterwards (a
    # test saw one vanish while it was being written).
    cleanup = getattr(self._manager, "_cleanup_tmp_directory_future", None)
    if cleanup is not None:
      cleanup.result()
    self._manager.close()

  def __enter__(self) -> "Checkpointer":
    return self

  def __exit__(self, *exc_info) -> None:
    self.close()
