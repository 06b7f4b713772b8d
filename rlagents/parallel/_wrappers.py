"""One inner update, two device wrappers: shard_map over a mesh, or `jax.pmap`.

An inner update is `update(*state_args, batch, axis_name=None) -> (new_state, metrics)`: pure, it
reduces its gradients and metrics across `axis_name` (`rlagents.learners` write theirs so). The
first `num_state_args` positional arguments (train state, reference parameters) are laid out by
the sharding rules; the last is the batch, split on its leading dimension.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from rlagents.parallel import _mesh
from rlagents.parallel import _sharding

BATCH_AXES = (_mesh.DATA, _mesh.FSDP)


def _gather(x, spec: P):
  for dim, name in enumerate(spec):
    if name == _mesh.FSDP:
      return lax.all_gather(x, _mesh.FSDP, axis=dim, tiled=True)
  return x


def _local_slice(x, spec: P, fsdp_size: int):
  for dim, name in enumerate(spec):
    if name == _mesh.FSDP:
      size = x.shape[dim] // fsdp_size
      return lax.dynamic_slice_in_dim(x, lax.axis_index(_mesh.FSDP) * size, size, axis=dim)
  return x


def shard_map_update(update, mesh: Mesh, *, num_state_args: int = 1, min_size: int = 1024,
                     donate: bool = False):
  """`update` under `jax.shard_map` over `mesh`, jitted.

  Each device gets `batch`'s shard (leading dimension over ('data', 'fsdp')). State arrays split
  over 'fsdp' are gathered whole for the step and each device keeps its slice of the result, so
  they are stored sharded (the step itself holds the whole state: a simple FSDP, exact, not one
  that saves working memory). Gradients and metrics are reduced over both axes by `update`.

  Args:
    update: the inner update (see the module docstring).
    mesh: from `make_mesh`.
    num_state_args: positional arguments before the batch that follow the sharding rules.
    min_size: arrays smaller than this stay replicated.
    donate: donate the first state argument's buffers.

  Returns:
    `step(*state_args, batch) -> (state, metrics)`; inputs may be plain arrays or already placed
    with `shard_state` / `shard_batch`; the state comes back laid out by the rules, metrics
    replicated.
  """
  fsdp_size = mesh.shape[_mesh.FSDP]
  num_shards = _mesh.num_batch_shards(mesh)

  def step(*args):
    state_args, batch = args[:num_state_args], args[num_state_args]
    _sharding.check_batch(batch, num_shards)
    specs = tuple(_sharding.state_specs(a, mesh, min_size=min_size) for a in state_args)
    batch_specs = jax.tree.map(lambda _: _sharding.BATCH_SPEC, batch)

    def body(*local_args):
      local_state, local_batch = local_args[:num_state_args], local_args[num_state_args]
      whole = tuple(jax.tree.map(_gather, a, s) for a, s in zip(local_state, specs))
      new_state, metrics = update(*whole, local_batch, axis_name=BATCH_AXES)
      new_state = jax.tree.map(functools.partial(_local_slice, fsdp_size=fsdp_size),
                               new_state, specs[0])
      return new_state, metrics

    mapped = jax.shard_map(body, mesh=mesh, in_specs=(*specs, batch_specs),
                           out_specs=(specs[0], P()), check_vma=False)
    return mapped(*state_args, batch)

  return jax.jit(step, donate_argnums=(0,) if donate else ())


def pmap_update(update, *, num_state_args: int = 1, axis_name: str = _mesh.DATA,
                devices=None):
  """`update` under `jax.pmap` (data parallel, state replicated on every device).

  Returns `step(*state_args, batch) -> (state, metrics)` on host-shaped inputs: the state is
  replicated, the batch's leading dimension split into `[num_devices, N / num_devices]`; the
  returned state and metrics are those of device 0 (all devices hold the same).
  """
  devices = jax.local_devices() if devices is None else devices
  num = len(devices)

  def inner(*args):
    return update(*args, axis_name=axis_name)

  mapped = jax.pmap(inner, axis_name=axis_name, devices=devices)

  def step(*args):
    state_args, batch = args[:num_state_args], args[num_state_args]
    _sharding.check_batch(batch, num)
    replicated = [jax.tree.map(lambda x: jnp.broadcast_to(x, (num, *jnp.shape(x))), a)
                  for a in state_args]
    split = jax.tree.map(lambda x: jnp.reshape(x, (num, x.shape[0] // num) + x.shape[1:]), batch)
    state, metrics = mapped(*replicated, split)
    return jax.tree.map(lambda x: x[0], (state, metrics))

  return step
