"""A work-around applied when `rlagents` is imported: XLA's concurrency-optimized CPU scheduler.

With jaxlib 0.10.2, a vmapped PPO program (`jit(vmap(train))` of `rlagents.learners.ppo`, 8
CartPole seeds) called repeatedly deadlocks on the CPU backend: on the second to fourth call every
thread waits on a condition variable and the call never returns (5 of 5 runs; jaxlib 0.9.2 ran the
same program 12 times without a hang). With `--xla_cpu_enable_concurrency_optimized_scheduler=false`
the same script ran 3 x 8 calls without a hang. The flag is CPU-only and costs ~8% on one
CartPole seed (`benchmarks/ppo_cartpole.py`, measured side by side), which a hang outweighs.

XLA reads `XLA_FLAGS` when the backend starts, so the flag is added to the environment at import,
unless the backend has started already, the variable already names the flag (set it to `true` to
keep the scheduler), or `RLAGENTS_KEEP_XLA_FLAGS=1` is set.
"""

import os
import sys

FLAG = "--xla_cpu_enable_concurrency_optimized_scheduler"


def _backend_started() -> bool:
  xla_bridge = sys.modules.get("jax._src.xla_bridge")
  return bool(xla_bridge is not None and getattr(xla_bridge, "_backends", None))


def apply() -> bool:
  """Adds `FLAG=false` to `XLA_FLAGS` when it can still take effect; True when it was added."""
  flags = os.environ.get("XLA_FLAGS", "")
  if (os.environ.get("RLAGENTS_KEEP_XLA_FLAGS") == "1" or FLAG in flags
      or _backend_started()):
    return False
  os.environ["XLA_FLAGS"] = f"{flags} {FLAG}=false".strip()
  return True
