"""The device mesh: a `data` axis (batch split) and an `fsdp` axis (parameters split)."""

import dataclasses
import math

import jax
import numpy as np
from jax.sharding import Mesh

DATA = "data"
FSDP = "fsdp"
AXES = (DATA, FSDP)


@dataclasses.dataclass(frozen=True, kw_only=True)
class MeshConfig:
  """How the devices are arranged.

  Attributes:
    data: devices along the `data` axis (the batch is split over it); -1 takes all devices the
      other axis leaves.
    fsdp: devices along the `fsdp` axis (large parameters are split over it, and the batch too);
      -1 takes all devices the other axis leaves.
    fsdp_min_size: arrays with fewer elements than this stay replicated.
  """
  data: int = -1
  fsdp: int = 1
  fsdp_min_size: int = 1024

  def __post_init__(self):
    for name in ("data", "fsdp"):
      value = getattr(self, name)
      if value == 0 or value < -1:
        raise ValueError(f"MeshConfig.{name} must be >= 1 or -1 (all remaining), got {value}")
    if self.data == -1 and self.fsdp == -1:
      raise ValueError("MeshConfig: at most one of data and fsdp may be -1")
    if self.fsdp_min_size < 1:
      raise ValueError(f"MeshConfig.fsdp_min_size must be >= 1, got {self.fsdp_min_size}")

  def axis_sizes(self, num_devices: int) -> tuple[int, int]:
    """`(data, fsdp)` for `num_devices` devices, with -1 resolved."""
    data, fsdp = self.data, self.fsdp
    fixed = (data if data != -1 else 1) * (fsdp if fsdp != -1 else 1)
    if num_devices % fixed:
      raise ValueError(f"MeshConfig(data={self.data}, fsdp={self.fsdp}) does not fit "
                       f"{num_devices} devices: {fixed} does not divide {num_devices}")
    if data == -1:
      data = num_devices // fixed
    if fsdp == -1:
      fsdp = num_devices // fixed
    if data * fsdp != num_devices:
      raise ValueError(f"MeshConfig(data={self.data}, fsdp={self.fsdp}) uses {data * fsdp} "
                       f"devices but {num_devices} are given")
    return data, fsdp


def make_mesh(config: MeshConfig = MeshConfig(), devices=None) -> Mesh:
  """A `Mesh` with axes ('data', 'fsdp') over `devices` (default: all, of every process).

  Built with `jax.sharding.Mesh`, so the axes are Auto (`jax.make_mesh` would make Explicit ones).
  """
  devices = list(jax.devices() if devices is None else devices)
  data, fsdp = config.axis_sizes(len(devices))
  return Mesh(np.asarray(devices, dtype=object).reshape(data, fsdp), AXES)


def num_batch_shards(mesh: Mesh) -> int:
  """How many pieces a batch is cut into: the product of the `data` and `fsdp` axes."""
  return math.prod(mesh.shape[a] for a in AXES)
