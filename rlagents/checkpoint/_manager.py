"""A thin layer over Orbax's CheckpointManager: a pytree state plus JSON metadata per step.

Orbax writes each step into a temporary directory and renames it when complete, so a crash
mid-save never leaves a half-written step that looks finished. A step that is unreadable anyway
(a disk fault, a hand edit) raises `CheckpointError` naming the directory.
"""

import os
from typing import Any

import jax
import orbax.checkpoint as ocp


class CheckpointError(RuntimeError):
  """A checkpoint exists but cannot be read."""


class Checkpointer:
  """Saves and restores `(state pytree, metadata dict)` by step in `directory`.

  Args:
    directory: where the steps live; created if missing.
    max_to_keep: the newest steps kept on disk.
  """

  def __init__(self, directory: str, *, max_to_keep: int = 2):
    self.directory = os.path.abspath(directory)
    self._manager = ocp.CheckpointManager(
        self.directory,
        options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True,
                                             enable_async_checkpointing=False),
        item_names=("state", "metadata"),
    )

  def latest_step(self) -> int | None:
    return self._manager.latest_step()

  def save(self, step: int, state: Any, metadata: dict[str, Any]) -> None:
    self._manager.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state), metadata=ocp.args.JsonSave(metadata)))
    self._manager.wait_until_finished()

  def restore(self, step: int, target: Any = None) -> tuple[Any, dict[str, Any]]:
    """Restores `step` into the structure (and shardings) of `target`, or as saved if None."""
    abstract = None if target is None else jax.tree.map(ocp.utils.to_shape_dtype_struct, target)
    try:
      restored = self._manager.restore(step, args=ocp.args.Composite(
          state=ocp.args.StandardRestore(abstract), metadata=ocp.args.JsonRestore()))
    except Exception as e:  # Orbax raises many types for unreadable data.
      first_line = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
      raise CheckpointError(
          f"checkpoint step {step} in {self.directory} is corrupt or unreadable "
          f"({type(e).__name__}: {first_line})") from e
    return restored.state, dict(restored.metadata)

  def close(self) -> None:
    self._manager.close()
