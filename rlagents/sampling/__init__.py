"""Jitted batched generation with a KV cache: temperature, top-k, top-p, stop tokens, log-probs."""

from rlagents.sampling._generate import generate_segment
from rlagents.sampling._generate import SegmentOutput

__all__ = [
    "generate_segment",
    "SegmentOutput",
]
