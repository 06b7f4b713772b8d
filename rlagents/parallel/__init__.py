"""Device mesh, sharding rules, data-parallel wrappers of the update steps, multi-host start."""

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
from rlagents.parallel._wrappers import pmap_update
from rlagents.parallel._wrappers import shard_map_update

__all__ = [
    "AXES",
    "MeshConfig",
    "ProcessSetup",
    "array_spec",
    "initialize",
    "make_mesh",
    "num_batch_shards",
    "resolve_setup",
    "pmap_update",
    "shard_batch",
    "shard_map_update",
    "shard_state",
    "state_specs",
]
