"""Device mesh, sharding rules, data-parallel and fsdp wrappers of the update steps, multi-host start.

The entry point a training loop calls is `make_update_step`:

    step = parallel.make_update_step(grpo.grpo_split_update(config),
                                     parallel.MeshConfig(data=-1, fsdp=2), num_state_args=2,
                                     donate=True)
    state, metrics = step(state, ref_params, host_batch)   # host_batch: this process's rows

It lays the state out once (large parameters and their optimizer state split over 'fsdp'), puts
each host batch on the mesh split over ('data', 'fsdp'), and runs the update on every device; a
`SplitUpdate` (gradient part + optimizer part) lets fsdp gather only the parameters, reduce-scatter
the gradients and update the stored slices. See docs/scale_out.md.
"""

from rlagents.parallel._distributed import initialize
from rlagents.parallel._distributed import ProcessSetup
from rlagents.parallel._distributed import resolve_setup
from rlagents.parallel._mesh import AXES
from rlagents.parallel._mesh import make_mesh
from rlagents.parallel._mesh import MeshConfig
from rlagents.parallel._mesh import num_batch_shards
from rlagents.parallel._sharding import array_spec
from rlagents.parallel._sharding import shard_batch
from rlagents.parallel._sharding import shard_state
from rlagents.parallel._sharding import state_specs
from rlagents.parallel._split import reduce_across
from rlagents.parallel._split import SplitUpdate
from rlagents.parallel._step import make_update_step
from rlagents.parallel._step import UpdateStep
from rlagents.parallel._wrappers import pmap_update
from rlagents.parallel._wrappers import shard_map_update

__all__ = [
    "AXES",
    "MeshConfig",
    "ProcessSetup",
    "SplitUpdate",
    "UpdateStep",
    "array_spec",
    "initialize",
    "make_mesh",
    "make_update_step",
    "num_batch_shards",
    "pmap_update",
    "reduce_across",
    "resolve_setup",
    "shard_batch",
    "shard_map_update",
    "shard_state",
    "state_specs",
]
