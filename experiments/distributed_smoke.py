r"""Several processes, one GRPO run: each samples its own rollouts, one data-parallel step.

    launch/multiprocess_local.sh 2 -m experiments.distributed_smoke --workdir=/tmp/dsmoke

Each process builds the same tiny policy (same seed), samples completions for its own prompts
(its shard of the data), scores them (reward: the fraction of completion tokens equal to
`--target_token`), and all processes take the GRPO step together over the global mesh. Process 0
alone writes metrics.jsonl; the checkpoint is one Orbax save that all processes join (Orbax
writes each array once). Every process writes its final parameters to
`final_params_<process>.npz` so that a test can compare them.
"""

import functools
import json
import os

from absl import app
from absl import flags
import jax
from jax.experimental import multihost_utils
import jax.numpy as jnp
import numpy as np

from rlagents import learners
from rlagents import networks
from rlagents import parallel
from rlagents import sampling
from rlagents.checkpoint import Checkpointer
from rlagents.learners import grpo

_WORKDIR = flags.DEFINE_string("workdir", None, "Where metrics and the checkpoint go.",
                               required=True)
_COORDINATOR = flags.DEFINE_string("coordinator", None, "host:port of process 0's coordinator.")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Processes in the job.")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index.")
_STEPS = flags.DEFINE_integer("steps", 3, "GRPO steps.")
_PROMPTS = flags.DEFINE_integer("prompts_per_process", 2, "Prompts each process samples.")
_GROUP = flags.DEFINE_integer("group_size", 4, "Completions per prompt.")
_TARGET = flags.DEFINE_integer("target_token", 3, "The token the reward counts.")

PROMPT_LEN, NEW_TOKENS = 4, 8


def main(argv):
  del argv
  setup = parallel.initialize(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
  pid = jax.process_index()
  model = networks.Transformer(networks.TransformerConfig(
      vocab_size=16, d_model=32, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=64,
      max_len=PROMPT_LEN + NEW_TOKENS))
  length = PROMPT_LEN + NEW_TOKENS
  params = model.init(jax.random.key(0), jnp.zeros((1, length), jnp.int32),
                      jnp.arange(length)[None])
  config = learners.GRPOConfig(prompts_per_step=_PROMPTS.value, group_size=_GROUP.value,
                               kl_beta=0.04, microbatch_size=0,
                               optimizer=learners.OptimizerConfig(learning_rate=1e-2))
  mesh = parallel.make_mesh(parallel.MeshConfig(data=-1, fsdp=1))
  state = parallel.shard_state(learners.create_train_state(model, params, config.optimizer), mesh)
  ref_params = parallel.shard_state(params, mesh)
  step = parallel.shard_map_update(functools.partial(grpo.grpo_update, config=config), mesh,
                                   num_state_args=2)
  generate = jax.jit(functools.partial(sampling.generate_segment, model=model,
                                       max_new_tokens=NEW_TOKENS, stop_tokens=()))
  rows = _PROMPTS.value * _GROUP.value
  workdir = _WORKDIR.value
  os.makedirs(workdir, exist_ok=True)
  metrics_file = open(os.path.join(workdir, "metrics.jsonl"), "a") if pid == 0 else None
  key = jax.random.fold_in(jax.random.key(1), pid)  # this process's own rollouts
  for i in range(_STEPS.value):
    # ROLLOUT on this process, with its local copy of the (replicated) parameters.
    local_params = jax.tree.map(lambda x: np.asarray(x.addressable_data(0)), state.params)
    key, prompt_key, sample_key = jax.random.split(key, 3)
    prompts = jax.random.randint(prompt_key, (_PROMPTS.value, PROMPT_LEN), 1, 16)
    tokens = jnp.zeros((rows, length), jnp.int32).at[:, :PROMPT_LEN].set(
        jnp.repeat(prompts, _GROUP.value, axis=0))
    out = generate(local_params, tokens, jnp.full((rows,), PROMPT_LEN, jnp.int32),
                   jnp.ones((rows,), bool), sample_key)
    mask = np.asarray(out.generated_mask, np.float32)
    tokens = np.asarray(out.tokens)
    rewards = ((tokens == _TARGET.value) * mask).sum(1) / np.maximum(mask.sum(1), 1)
    batch = {"tokens": tokens, "loss_mask": mask,
             "old_logprobs": np.asarray(out.logprobs) * mask,
             "rewards": rewards.astype(np.float32)}
    batch["advantages"] = np.asarray(grpo.grpo_advantages(batch, config))  # groups are local
    # UPDATE over the global mesh.
    state, metrics = step(state, ref_params, parallel.shard_batch(batch, mesh))
    mean_reward = float(np.asarray(multihost_utils.process_allgather(
        rewards.mean())).mean())
    if metrics_file:
      record = {"step": i + 1, "reward": mean_reward,
                **{k: float(np.asarray(v.addressable_data(0))) for k, v in metrics.items()}}
      metrics_file.write(json.dumps(record) + "\n")
      metrics_file.flush()
  checkpointer = Checkpointer(os.path.join(workdir, "checkpoints"))
  checkpointer.save(_STEPS.value, state.params, {"step": _STEPS.value,
                                                  "processes": setup.num_processes})
  checkpointer.close()
  final = {jax.tree_util.keystr(p): np.asarray(x.addressable_data(0))
           for p, x in jax.tree_util.tree_leaves_with_path(state.params)}
  np.savez(os.path.join(workdir, f"final_params_{pid}.npz"), **final)
  if metrics_file:
    metrics_file.close()


if __name__ == "__main__":
  app.run(main)
