"""What a phase's checkpoint holds, and restoring a phase from its newest readable one.

A phase carries its train state (with LoRA, the adapters but not the frozen base) and its RNG
key from one step to the next. The data position is the step: the batch of step `s` is drawn
from the generator `(seed, phase_id, s)`, so nothing else needs saving for an exact resume.
What the phase has cost so far (sampled tokens, seconds) and the statistics the loop keeps
(the soft reward's running moments, the drift monitor's points) travel in the metadata.
Host code.
"""

import dataclasses
from typing import Any

import jax
import numpy as np

from rlagents import checkpoint as checkpoint_lib


def state_tree(state, key, lora: bool = False) -> dict[str, Any]:
  """The arrays a phase saves: params (adapters only with LoRA), optimizer state, step, key."""
  params = state.params["lora"] if lora else state.params
  # The key as a host array: every process holds the same one, and a process-local device
  # array cannot join a multi-process save.
  return {"params": params, "opt_state": state.opt_state, "step": state.step,
          "key": np.asarray(key)}


def metadata(*, phase: str, phase_id: int, step: int, seed: int, **extra) -> dict[str, Any]:
  """A checkpoint's metadata: whose step it is, where the data stream continues, and `extra`."""
  return {"phase": phase, "step": step, "seed": seed,
          "data_position": {"rng": "numpy default_rng([seed, phase_id, step])",
                            "phase_id": phase_id, "next_step": step}, **extra}


@dataclasses.dataclass
class PhaseStart:
  """Where a phase starts: its train state, RNG key, step (0 for a fresh start) and the
  restored checkpoint's metadata ({} for a fresh start)."""
  state: Any
  key: jax.Array
  step: int
  metadata: dict[str, Any] = dataclasses.field(default_factory=dict)


def restore_phase(checkpointer, state, key, *, phase: str, seed: int,
                  lora: bool = False) -> PhaseStart:
  """Restores the newest readable checkpoint of a phase into `state`'s structure.

  A corrupt newer step is reported (`checkpoint.CheckpointWarning`) and the one before is used.

  Raises:
    checkpoint.CheckpointError: the checkpoint belongs to another phase, step or seed.
  """
  restored = checkpointer.restore_latest(state_tree(state, key, lora))
  if restored is None:
    return PhaseStart(state, key, 0)
  tree, found_metadata = restored.state, restored.metadata
  # Checkpoints written before the seed was recorded carry no "seed".
  found = (found_metadata.get("phase"), found_metadata.get("step"),
           found_metadata.get("seed", seed), int(tree["step"]))
  if found[:3] != (phase, restored.step, seed) or found[3] != restored.step:
    raise checkpoint_lib.CheckpointError(
        f"checkpoint {checkpointer.directory}/{restored.step} does not belong to this run: it "
        f"says phase {found[0]!r}, step {found[1]}, seed {found[2]}, state step {found[3]}; "
        f"expected phase {phase!r}, step {restored.step}, seed {seed}")
  params = {**state.params, "lora": tree["params"]} if lora else tree["params"]
  state = state.replace(params=params, opt_state=tree["opt_state"], step=tree["step"])
  return PhaseStart(state, tree["key"], restored.step, dict(found_metadata))
