"""rlagents: train language models into tool-using agents with reinforcement learning, in JAX."""

from rlagents import _xla_cpu

_xla_cpu.apply()
