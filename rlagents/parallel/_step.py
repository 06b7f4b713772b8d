"""The entry point a training loop calls: an update step on a mesh that places its own inputs."""

import functools

import jax
from jax.sharding import Mesh

from rlagents.parallel import _mesh
from rlagents.parallel import _sharding
from rlagents.parallel import _wrappers


class UpdateStep:
  """`step(*state_args, batch) -> (state, metrics)` on a mesh; see `make_update_step`.

  Attributes:
    mesh: the device mesh the step runs on.
    num_state_args: positional arguments before the batch that are laid out by the rules.
    min_size: arrays with fewer elements stay replicated.
  """

  def __init__(self, update, mesh: Mesh | _mesh.MeshConfig | None = None, *,
               num_state_args: int = 1, donate: bool = False, min_size: int | None = None):
    if num_state_args < 1:
      raise ValueError(f"num_state_args must be >= 1, got {num_state_args}")
    if mesh is None or isinstance(mesh, _mesh.MeshConfig):
      config = mesh or _mesh.MeshConfig()
      mesh = _mesh.make_mesh(config)
      min_size = config.fsdp_min_size if min_size is None else min_size
    elif not isinstance(mesh, Mesh):
      raise TypeError(f"mesh must be a jax.sharding.Mesh, a parallel.MeshConfig or None, got "
                      f"{type(mesh).__name__}")
    if set(mesh.axis_names) != set(_mesh.AXES):
      raise ValueError(f"mesh axes must be {_mesh.AXES} (parallel.make_mesh), got "
                       f"{mesh.axis_names}")
    self.mesh = mesh
    self._known = {}
    self.num_state_args = num_state_args
    self.min_size = 1024 if min_size is None else min_size
    donate_argnums = (0,) if donate else ()
    self._single = mesh.devices.size == 1
    if self._single:  # nothing to split or reduce: the update as it is
      self._step = jax.jit(functools.partial(update, axis_name=None),
                           donate_argnums=donate_argnums)
    else:
      self._step = _wrappers.shard_map_update(update, mesh, num_state_args=num_state_args,
                                              min_size=self.min_size, donate=donate)

  def place(self, *state_args):
    """The state arguments laid out on the mesh by the rules (those already so are kept)."""
    return tuple(_sharding.shard_state(a, self.mesh, min_size=self.min_size) for a in state_args)

  def _placed(self, index: int, arg):
    # The objects this step placed or returned are laid out already: recognised by identity,
    # without a look at every array. (State arguments are taken as immutable, as JAX arrays are.)
    known = self._known.get(index)
    if known is not None and any(arg is k for k in known):
      return known[-1]
    (placed,) = self.place(arg)
    # The first argument may be donated, so only the state a step returns is remembered for it.
    self._known[index] = (arg, placed) if index else None
    return placed

  def __call__(self, *args):
    """`(*state_args, batch) -> (state, metrics)`; `batch` is this process's part (host arrays)."""
    if len(args) != self.num_state_args + 1:
      raise TypeError(f"the update step takes {self.num_state_args} state argument(s) and a "
                      f"batch, got {len(args)} arguments")
    state_args = tuple(self._placed(i, a) for i, a in enumerate(args[:-1]))
    batch = args[-1]
    if self._single:
      _sharding.check_batch(batch, 1)
    else:
      batch = _sharding.shard_batch(batch, self.mesh)
    state, metrics = self._step(*state_args, batch)
    self._known[0] = (state,)
    return state, metrics


def make_update_step(update, mesh: Mesh | _mesh.MeshConfig | None = None, *,
                     num_state_args: int = 1, donate: bool = False,
                     min_size: int | None = None) -> UpdateStep:
  """An update step on every device of `mesh` that places its inputs itself.

  `step(*state_args, batch) -> (state, metrics)`: the state arguments (train state, KL reference)
  are laid out by the sharding rules on their first call (host arrays, or arrays on other
  devices); an argument already laid out, such as the state the step returned, is passed as it
  is. `batch` is a pytree of host arrays, this process's part (under `jax.distributed` each
  process passes its own rows; the global batch is the parts in process order); its leading size
  must divide by this process's devices, else a one-line `ValueError` names the field. The state
  comes back laid out by the rules (split over 'fsdp' between steps), metrics replicated. On a
  one-device mesh the step is `jax.jit(update)` itself.

  Args:
    update: a plain inner update `update(*state_args, batch, *, axis_name=None)` or a
      `SplitUpdate` (the learners' `*_split_update`, which fsdp needs to keep the optimizer state
      sharded; see `shard_map_update`).
    mesh: a `Mesh` from `make_mesh`, a `MeshConfig` (a mesh over all devices of all processes),
      or None for `MeshConfig()` (every device on 'data').
    num_state_args: positional arguments before the batch.
    donate: donate the first state argument's buffers (do not reuse it after the call).
    min_size: arrays with fewer elements stay replicated (default: the `MeshConfig`'s
      `fsdp_min_size`, or 1024).
  """
  return UpdateStep(update, mesh, num_state_args=num_state_args, donate=donate,
                    min_size=min_size)
