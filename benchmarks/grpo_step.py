r"""GRPO update-step throughput on 1, 2 and 8 forced CPU devices (data-parallel shard_map).

Run: `python benchmarks/grpo_step.py --devices=1,2,8 --repeats=3 --json=/tmp/grpo_step.json`

Each device count runs in its own subprocess with
`XLA_FLAGS=--xla_force_host_platform_device_count=N` (XLA reads it when the backend starts). The
step is `rlagents.learners.grpo.grpo_update` wrapped by `rlagents.parallel.shard_map_update` on
BENCH.md's tiny Qwen2 shape (hidden 256, 4 layers, 4 heads, 2 KV heads, intermediate 768, vocab
512, random init), 8 prompts x group 8 = 64 rows of a 32-token prompt and 32 completion tokens,
KL beta 0.04, AdamW. Reported: compile time, then completion tokens/s of the update (median, min,
max of --repeats timed steps). Forced host devices share the same cores, so this measures the
wrappers' overhead, not a speed-up.

Not here yet: the full step (generation + reward + update) side by side with TRL's GRPOTrainer.
"""

import json
import os
import statistics
import subprocess
import sys
import time

from absl import app
from absl import flags

from rlagents.metrics import cpu_model

_DEVICES = flags.DEFINE_list("devices", ["1", "2", "8"], "Forced CPU device counts.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed steps per device count.")
_CHILD = flags.DEFINE_integer("child", 0, "Internal: run one device count and print JSON.")
_JSON = flags.DEFINE_string("json", None, "Also write the figures to this JSON file.")

PROMPTS, GROUP, PROMPT_LEN, NEW_TOKENS = 8, 8, 32, 32


def _child(repeats: int) -> dict:
  import functools  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from rlagents import learners, networks, parallel  # pylint: disable=g-import-not-at-top
  from rlagents.learners import grpo  # pylint: disable=g-import-not-at-top

  length = PROMPT_LEN + NEW_TOKENS
  model = networks.Transformer(networks.TransformerConfig(
      vocab_size=512, d_model=256, n_layers=4, n_heads=4, n_kv_heads=2, d_ff=768,
      max_len=length))
  params = model.init(jax.random.key(0), jnp.zeros((1, length), jnp.int32),
                      jnp.arange(length)[None])
  config = learners.GRPOConfig(prompts_per_step=PROMPTS, group_size=GROUP, kl_beta=0.04,
                               microbatch_size=0,
                               optimizer=learners.OptimizerConfig(learning_rate=1e-5))
  rng = np.random.default_rng(0)
  rows = PROMPTS * GROUP
  mask = np.zeros((rows, length), np.float32)
  mask[:, PROMPT_LEN:] = 1
  batch = {"tokens": rng.integers(1, 512, (rows, length)).astype(np.int32), "loss_mask": mask,
           "old_logprobs": (-6.0 * mask).astype(np.float32),
           "rewards": rng.random(rows).astype(np.float32)}
  batch["advantages"] = np.asarray(grpo.grpo_advantages(batch, config))
  mesh = parallel.make_mesh(parallel.MeshConfig(data=-1))
  step = parallel.shard_map_update(functools.partial(grpo.grpo_update, config=config), mesh,
                                   num_state_args=2, donate=True)
  state = parallel.shard_state(learners.create_train_state(model, params, config.optimizer), mesh)
  ref = parallel.shard_state(params, mesh)
  placed = parallel.shard_batch(batch, mesh)
  start = time.perf_counter()
  state, metrics = step(state, ref, placed)
  jax.block_until_ready(metrics)
  compile_s = time.perf_counter() - start
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    state, metrics = step(state, ref, placed)
    jax.block_until_ready(metrics)
    times.append(time.perf_counter() - start)
  tokens = rows * NEW_TOKENS
  return {"devices": jax.device_count(), "compile_and_first_step_s": compile_s,
          "step_s_median": statistics.median(times),
          "tokens_per_s_median": tokens / statistics.median(times),
          "tokens_per_s_min": tokens / max(times), "tokens_per_s_max": tokens / min(times),
          "jax": jax.__version__}


def main(argv):
  del argv
  if _CHILD.value:
    print("RESULT " + json.dumps(_child(_REPEATS.value)))
    return
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  results = []
  for count in _DEVICES.value:
    env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={count}",
           "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, os.path.abspath(__file__), f"--child={count}",
                          f"--repeats={_REPEATS.value}"], env=env, capture_output=True,
                         text=True, check=True)
    line = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")][-1]
    results.append(json.loads(line[len("RESULT "):]))
  print(f"CPU: {cpu_model()}; jax {results[0]['jax']}; python {sys.version.split()[0]}")
  print(f"GRPO update step, tiny Qwen2, {PROMPTS}x{GROUP} rows, {NEW_TOKENS} completion tokens")
  print("devices  compile+first (s)  step median (s)  completion tok/s median [min, max]")
  for r in results:
    print(f"{r['devices']:>7}  {r['compile_and_first_step_s']:>17.2f}  {r['step_s_median']:>15.3f}"
          f"  {r['tokens_per_s_median']:>10.0f} [{r['tokens_per_s_min']:.0f}, "
          f"{r['tokens_per_s_max']:.0f}]")
  if _JSON.value:
    with open(_JSON.value, "w") as f:
      json.dump({"cpu": cpu_model(), "scaling": results}, f, indent=1)


if __name__ == "__main__":
  app.run(main)
