"""Sharding rules: big parameters split over `fsdp`, the optimizer state following them, batches
split over `data` and `fsdp`."""

import jax
import numpy as np
from jax.sharding import Mesh
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from rlagents.parallel import _mesh

BATCH_SPEC = P((_mesh.DATA, _mesh.FSDP))


def array_spec(shape, fsdp_size: int, *, min_size: int = 1024) -> P:
  """The spec of one array: its largest dimension divisible by `fsdp_size` split over 'fsdp'.

  Arrays with fewer than `min_size` elements (biases, norms, scalars, counters), or none of whose
  dimensions `fsdp_size` divides, are replicated. The rule reads only the shape, so Adam's moments
  (shaped like their parameter) get their parameter's spec: optimizer state follows parameters.
  """
  shape = tuple(shape)
  if fsdp_size == 1 or not shape or int(np.prod(shape)) < min_size:
    return P()
  candidates = [d for d in range(len(shape)) if shape[d] % fsdp_size == 0]
  if not candidates:
    return P()
  dim = max(candidates, key=lambda d: (shape[d], -d))
  return P(*([None] * dim + [_mesh.FSDP]))


def state_specs(tree, mesh: Mesh, *, min_size: int = 1024):
  """`PartitionSpec`s for every array leaf of a train state (params, optimizer state, step)."""
  fsdp = mesh.shape[_mesh.FSDP]
  return jax.tree.map(lambda x: array_spec(np.shape(x), fsdp, min_size=min_size), tree)


def shard_state(tree, mesh: Mesh, *, min_size: int = 1024):
  """Puts a train state (or params) on `mesh` by `state_specs`.

  Arrays already laid out so (e.g. the state an update step returned) are kept as they are,
  without a copy. Host arrays come from every process's identical copy, so this also works on a
  mesh of several processes.
  """
  specs = state_specs(tree, mesh, min_size=min_size)

  def put(x, spec):
    sharding = NamedSharding(mesh, spec)
    if isinstance(x, jax.Array):
      if x.sharding == sharding or x.sharding.is_equivalent_to(sharding, x.ndim):
        return x
      if x.is_fully_addressable == sharding.is_fully_addressable:
        return jax.device_put(x, sharding)  # same processes: a copy between devices
    host = np.asarray(x)
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

  return jax.tree.map(put, tree, specs)


def check_batch(batch, num_shards: int, *, what: str = "devices") -> None:
  """Raises ValueError naming the field when a batch's leading size is not divisible."""
  for path, x in jax.tree_util.tree_leaves_with_path(batch):
    size = np.shape(x)[0] if np.ndim(x) else None
    if size is None or size % num_shards:
      raise ValueError(f"batch field {jax.tree_util.keystr(path)} has leading size {size}, not "
                       f"divisible by the {num_shards} {what} it is split over")


def shard_batch(batch, mesh: Mesh):
  """Puts a batch on `mesh` with its leading dimension split over ('data', 'fsdp').

  With several processes `batch` is this process's part (its own rollouts); the global batch is
  the processes' parts concatenated in process order.
  """
  local_devices = sum(d.process_index == jax.process_index() for d in mesh.devices.flat)
  several = local_devices < mesh.devices.size
  check_batch(batch, local_devices, what="devices of this process" if several else "devices")
  sharding = NamedSharding(mesh, BATCH_SPEC)

  def put(x):
    if isinstance(x, jax.Array) and x.sharding == sharding:
      return x  # already placed
    return jax.make_array_from_process_local_data(sharding, np.asarray(x))

  return jax.tree.map(put, batch)
