"""Orbax checkpoints of a whole train state, written atomically, with resume (host code)."""

from rlagents.checkpoint._manager import CheckpointError
from rlagents.checkpoint._manager import Checkpointer

__all__ = ["CheckpointError", "Checkpointer"]
