"""Orbax checkpoints of a whole train state, written atomically, with resume (host code)."""

from rlagents.checkpoint._manager import CheckpointError
from rlagents.checkpoint._manager import Checkpointer
from rlagents.checkpoint._manager import CheckpointWarning
from rlagents.checkpoint._manager import Restored

__all__ = ["CheckpointError", "Checkpointer", "CheckpointWarning", "Restored"]
