"""Multi-host start: `jax.distributed` from flags or the environment (host code)."""

import dataclasses
import os
from collections.abc import Mapping

import jax


@dataclasses.dataclass(frozen=True)
class ProcessSetup:
  """How this process joined: `source` is 'single', 'explicit', 'RLAGENTS_*', 'slurm' or 'tpu'."""
  source: str
  coordinator_address: str | None = None
  num_processes: int = 1
  process_id: int = 0


def resolve_setup(coordinator_address: str | None = None, num_processes: int | None = None,
                  process_id: int | None = None, *,
                  env: Mapping[str, str] = os.environ) -> ProcessSetup:
  """Decides how to start, without starting (pure, so it is tested without processes).

  Order: explicit arguments (all three, or none); `RLAGENTS_COORDINATOR`,
  `RLAGENTS_NUM_PROCESSES`, `RLAGENTS_PROCESS_ID` (all three, or none); a SLURM job step with
  more than one task (`SLURM_NTASKS`) or a Cloud TPU VM (`TPU_WORKER_HOSTNAMES` /
  `CLOUD_TPU_TASK_ID`), left to `jax.distributed.initialize()`'s own detection; otherwise one
  process.

  Raises:
    ValueError: a partial or inconsistent setting, naming it.
  """
  explicit = {"coordinator_address": coordinator_address, "num_processes": num_processes,
              "process_id": process_id}
  from_env = {"coordinator_address": env.get("RLAGENTS_COORDINATOR"),
              "num_processes": env.get("RLAGENTS_NUM_PROCESSES"),
              "process_id": env.get("RLAGENTS_PROCESS_ID")}
  env_names = {"coordinator_address": "RLAGENTS_COORDINATOR",
               "num_processes": "RLAGENTS_NUM_PROCESSES", "process_id": "RLAGENTS_PROCESS_ID"}
  for source, values, names in (("explicit", explicit, {k: k for k in explicit}),
                                ("RLAGENTS_*", from_env, env_names)):
    given = [k for k, v in values.items() if v not in (None, "")]
    if not given:
      continue
    if len(given) != 3:
      missing = [names[k] for k in values if k not in given]
      raise ValueError(f"multi-host setting ({source}) is incomplete: "
                       f"{', '.join(names[k] for k in given)} given but {', '.join(missing)} "
                       f"missing")
    try:
      count, index = int(values["num_processes"]), int(values["process_id"])
    except ValueError as e:
      raise ValueError(f"{names['num_processes']} and {names['process_id']} must be integers, "
                       f"got {values['num_processes']!r}, {values['process_id']!r}") from e
    address = str(values["coordinator_address"])
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
      raise ValueError(f"{names['coordinator_address']} must be host:port, got {address!r}")
    if count < 1:
      raise ValueError(f"{names['num_processes']} must be >= 1, got {count}")
    if not 0 <= index < count:
      raise ValueError(f"{names['process_id']} = {index} is outside [0, {count}) "
                       f"({names['num_processes']} = {count})")
    return ProcessSetup(source, address, count, index)
  if int(env.get("SLURM_NTASKS", "1") or 1) > 1:
    return ProcessSetup("slurm", num_processes=int(env["SLURM_NTASKS"]),
                        process_id=int(env.get("SLURM_PROCID", 0)))
  if env.get("TPU_WORKER_HOSTNAMES") or env.get("CLOUD_TPU_TASK_ID"):
    return ProcessSetup("tpu")
  return ProcessSetup("single")


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None) -> ProcessSetup:
  """Starts `jax.distributed` as `resolve_setup` decides (nothing for one process).

  On CPU the cross-process collectives use gloo. Call before any other JAX work.
  """
  setup = resolve_setup(coordinator_address, num_processes, process_id)
  if setup.source == "single":
    return setup
  jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU only; others ignore it
  if setup.source in ("slurm", "tpu"):
    jax.distributed.initialize()  # JAX's own cluster detection
  else:
    jax.distributed.initialize(coordinator_address=setup.coordinator_address,
                               num_processes=setup.num_processes, process_id=setup.process_id)
  return dataclasses.replace(setup, num_processes=jax.process_count(),
                             process_id=jax.process_index())
