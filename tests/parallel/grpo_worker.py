"""One process of a multi-process GRPO update (run by tests/parallel/test_distributed.py).

    launch/multiprocess_local.sh 2 tests/parallel/grpo_worker.py OUT_DIR

Every process joins `jax.distributed` (from the RLAGENTS_* variables the launcher sets), builds
the same tiny policy and the same global batch (`batch()`), keeps its own rows (process i the
i-th block), and all take `STEPS` steps of `grpo.grpo_split_update` together through
`parallel.make_update_step` on a mesh of every device of every process, all on 'fsdp' (so
parameters and optimizer state are split across the processes). Each process writes the whole final
parameters (gathered) and the metrics to OUT_DIR/process_<i>.npz.
"""

import os
import sys

import jax
from jax.experimental import multihost_utils
import jax.numpy as jnp
import numpy as np

from rlagents import learners
from rlagents import networks
from rlagents import parallel
from rlagents.learners import grpo

STEPS, ROWS, LENGTH, MIN_SIZE = 2, 16, 16, 64


def setup():
  """`(model, params, config)`: the same tiny policy in every process and in the test."""
  model = networks.Transformer(networks.TransformerConfig(
      vocab_size=16, d_model=32, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=64, max_len=LENGTH))
  params = model.init(jax.random.key(0), jnp.zeros((1, 8), jnp.int32), jnp.arange(8)[None])
  config = learners.GRPOConfig(prompts_per_step=4, group_size=4, kl_beta=0.1, microbatch_size=0,
                               optimizer=learners.OptimizerConfig(learning_rate=1e-3,
                                                                  max_grad_norm=0.05))
  return model, params, config


def batch(config, step: int) -> dict:
  """The global batch of `step` (numpy, groups contiguous), with its advantages."""
  rng = np.random.default_rng(step)
  mask = (rng.random((ROWS, LENGTH)) < np.linspace(0.2, 0.9, ROWS)[:, None]).astype(np.float32)
  mask[:, :3] = 0
  out = {"tokens": rng.integers(1, 16, (ROWS, LENGTH)).astype(np.int32), "loss_mask": mask,
         "old_logprobs": np.where(mask > 0, -2.0 + 0.1 * rng.standard_normal(mask.shape),
                                  0.0).astype(np.float32),
         "rewards": rng.random(ROWS).astype(np.float32)}
  out["advantages"] = np.asarray(grpo.grpo_advantages(out, config))
  return out


def main(out_dir: str):
  parallel.initialize()
  pid, count = jax.process_index(), jax.process_count()
  model, params, config = setup()
  state = learners.create_train_state(model, params, config.optimizer)
  step = parallel.make_update_step(
      grpo.grpo_split_update(config),
      parallel.MeshConfig(data=1, fsdp=-1, fsdp_min_size=MIN_SIZE), num_state_args=2,
      donate=True)
  rows = ROWS // count
  losses = []
  for i in range(STEPS):
    local = {k: v[pid * rows:(pid + 1) * rows] for k, v in batch(config, i).items()}
    state, metrics = step(state, params, local)
    losses.append(float(np.asarray(metrics["grpo/loss"].addressable_data(0))))
  # Stored split: each device holds 1/N of the split arrays, so no process holds them whole.
  split = [x for x in jax.tree.leaves((state.params, state.opt_state))
           if not x.is_fully_replicated]
  assert split and all(x.addressable_shards[0].data.size * jax.device_count() == x.size
                       for x in split)
  whole = multihost_utils.process_allgather(state.params, tiled=True)
  flat = {jax.tree_util.keystr(p): np.asarray(x)
          for p, x in jax.tree_util.tree_leaves_with_path(whole)}
  np.savez(os.path.join(out_dir, f"process_{pid}.npz"), losses=np.asarray(losses),
           devices=jax.device_count(), **flat)


if __name__ == "__main__":
  main(sys.argv[1])
