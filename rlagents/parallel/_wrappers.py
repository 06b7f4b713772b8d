"""One inner update, device wrappers: shard_map (and fsdp) over a mesh, or `jax.pmap`.

An inner update is `update(*state_args, batch, axis_name=None) -> (new_state, metrics)`: pure, it
reduces its gradients and metrics across `axis_name` (`rlagents.learners` write theirs so), or a
`SplitUpdate` (its gradient and optimizer parts, which fsdp needs to save memory). The first
`num_state_args` positional arguments (train state, reference parameters) are laid out by the
sharding rules; the last is the batch, split on its leading dimension.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import Mesh
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from rlagents.parallel import _mesh
from rlagents.parallel import _sharding
from rlagents.parallel import _split

BATCH_AXES = (_mesh.DATA, _mesh.FSDP)


def _fsdp_dim(spec: P) -> int | None:
  for dim, name in enumerate(spec):
    if name == _mesh.FSDP:
      return dim
  return None


def _gather(x, spec: P):
  """The whole array from this device's fsdp slice."""
  dim = _fsdp_dim(spec)
  return x if dim is None else lax.all_gather(x, _mesh.FSDP, axis=dim, tiled=True)


def _reduce_scatter(x, spec: P):
  """The sum over all devices of `x`, as this device's fsdp slice (whole when replicated)."""
  dim = _fsdp_dim(spec)
  if dim is None:
    return lax.psum(x, BATCH_AXES)
  return lax.psum(lax.psum_scatter(x, _mesh.FSDP, scatter_dimension=dim, tiled=True), _mesh.DATA)


def _shardings(mesh: Mesh, specs):
  return jax.tree.map(lambda s: NamedSharding(mesh, s), specs)


def shard_map_update(update, mesh: Mesh, *, num_state_args: int = 1, min_size: int = 1024,
                     donate: bool = False):
  """`update` over `mesh`, jitted: data-parallel over 'data', fsdp over 'fsdp'.

  The batch's leading dimension is split over ('data', 'fsdp'). How the state is handled depends
  on `update`:
  - a `SplitUpdate` (the learners' `*_split_update`): each device gathers only the parameters
    (and the other state arguments, e.g. the KL reference) for the forward and backward pass on
    its batch shard, the gradients are reduce-scattered (`lax.psum_scatter` over 'fsdp', `psum`
    over 'data', weighted by each shard's part of the loss's denominator) so each device gets
    the slice of the parameters it stores, and the optimizer runs on the stored slices of the
    parameters and optimizer state (jit's partitioner: elementwise on the slices, one scalar
    all-reduce for a global norm). The optimizer state is never gathered.
  - a plain update on a mesh with fsdp size 1: under `jax.shard_map`, reducing over both axes.
  - a plain update with fsdp > 1: jitted on the global arrays with the state's shardings (jit's
    partitioner places the collectives); exact, but the memory it uses is the partitioner's
    choice. Pass a `SplitUpdate` to control it.
  Every path equals the single-device update on the whole batch (to float rounding).

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
  num_shards = _mesh.num_batch_shards(mesh)
  split = isinstance(update, _split.SplitUpdate)
  fsdp = mesh.shape[_mesh.FSDP] > 1

  def step(*args):
    state_args, batch = args[:num_state_args], args[num_state_args]
    _sharding.check_batch(batch, num_shards)
    specs = tuple(_sharding.state_specs(a, mesh, min_size=min_size) for a in state_args)
    batch_specs = jax.tree.map(lambda _: _sharding.BATCH_SPEC, batch)
    out_shardings = (_shardings(mesh, specs[0]), NamedSharding(mesh, P()))

    if split:
      param_specs = update.params(specs[0])

      def grads_body(*local_args):
        local_state, local_rest = local_args[0], local_args[1:num_state_args]
        local_batch = local_args[num_state_args]
        params = jax.tree.map(_gather, update.params(local_state), param_specs)
        rest = tuple(jax.tree.map(_gather, a, s) for a, s in zip(local_rest, specs[1:]))
        grads, weight, metrics = update.grads(local_state, params, *rest, local_batch,
                                              axis_name=BATCH_AXES)
        share = weight / jnp.maximum(lax.psum(weight, BATCH_AXES), 1e-9)
        grads = jax.tree.map(lambda g, s: _reduce_scatter(g * share, s), grads, param_specs)
        return grads, metrics

      grads, metrics = jax.shard_map(grads_body, mesh=mesh, in_specs=(*specs, batch_specs),
                                     out_specs=(param_specs, P()), check_vma=False)(*args)
      new_state, metrics = update.apply(state_args[0], grads, metrics)
    elif fsdp:
      batch = jax.lax.with_sharding_constraint(
          batch, jax.tree.map(lambda _: NamedSharding(mesh, _sharding.BATCH_SPEC), batch))
      new_state, metrics = update(*state_args, batch, axis_name=None)
    else:
      body = functools.partial(update, axis_name=BATCH_AXES)
      new_state, metrics = jax.shard_map(body, mesh=mesh, in_specs=(*specs, batch_specs),
                                         out_specs=(specs[0], P()), check_vma=False)(*args)
    return jax.lax.with_sharding_constraint((new_state, metrics), out_shardings)

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
