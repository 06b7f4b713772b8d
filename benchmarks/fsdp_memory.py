r"""fsdp memory: per-device parameter + optimizer-state bytes at 1, 2 and 8 devices, all on 'fsdp'.

Run: `python benchmarks/fsdp_memory.py --json=/tmp/fsdp_memory.json`

Each device count runs in its own subprocess with
`XLA_FLAGS=--xla_force_host_platform_device_count=N`, a mesh of N devices all on 'fsdp'
(`MeshConfig(data=1, fsdp=N)`; `--data=D` puts D on 'data'), and BENCH.md's larger transformer policy (hidden 512, 8 layers, 8
heads, 4 KV heads, intermediate 1536, vocab 8192, untied LM head, float32: 33.6M parameters) with
AdamW. The
update is the GRPO step `grpo.grpo_split_update` through `parallel.make_update_step` (KL reference
beta 0.04, so the reference parameters are a third state argument, stored split like the policy),
on 8 rows of 128 tokens.

Reported per device count:
- stored: the bytes of the parameters and of the optimizer state held by device 0 between steps
  (the sum of the addressable shards' bytes on device 0), before and after `--repeats` real steps;
- compiled: `jax.jit(...).lower(...).compile().memory_analysis()` of the step, per device:
  arguments (state + reference + batch shard), outputs, temporaries (gathered parameters, whole
  gradients before the reduce-scatter, activations), when the backend reports them;
- `--compare_plain`: the same figures for the plain `grpo.grpo_update` (no split parts), which
  the wrapper hands to jit's partitioner on an fsdp mesh.
The ratio 1 device / N devices of the stored bytes is the saving (1/N is ideal: small arrays,
under 1024 elements, stay replicated).

`--overhead`: `make_update_step` on a one-device mesh against `jax.jit(update)` on the same SFT
step (BENCH.md's tiny shape, 8 rows of 64 tokens), interleaved rounds of `--steps` steps, ratio
of wall times (median, min, max), and alone the cost of a full placement check (`step.place` on
a placed state; the step skips even that for the state it returned).

Step times are context only (forced host devices share the same cores); the byte figures do not
depend on the machine's load.
"""

import functools
import json
import os
import statistics
import subprocess
import sys
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from rlagents import learners
from rlagents import networks
from rlagents import parallel
from rlagents.learners import grpo
from rlagents.learners import sft
from rlagents.metrics import cpu_model

_DEVICES = flags.DEFINE_list("devices", ["1", "2", "8"], "Forced CPU device counts.")
_JSON = flags.DEFINE_string("json", None, "Also write the figures to this JSON file.")
_COMPARE_PLAIN = flags.DEFINE_bool("compare_plain", True,
                                   "Also measure the plain update under jit's partitioner.")
_OVERHEAD = flags.DEFINE_bool("overhead", True, "Measure make_update_step's one-device overhead.")
_ROUNDS = flags.DEFINE_integer("rounds", 5, "Interleaved rounds of the overhead comparison.")
_STEPS = flags.DEFINE_integer("steps", 10, "Steps per side per round of the overhead comparison.")
_DATA = flags.DEFINE_integer("data", 1, "Devices on 'data' (the rest on 'fsdp'); device counts "
                             "it does not divide are skipped.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Real steps per update after the compile (the "
                                "stored bytes are read again after them; median time).")
_CHILD = flags.DEFINE_integer("child", 0, "Internal: measure one device count and print JSON.")

LARGER = dict(vocab_size=8192, d_model=512, n_layers=8, n_heads=8, n_kv_heads=4, d_ff=1536,
              tie_embeddings=False)
TINY = dict(vocab_size=512, d_model=256, n_layers=4, n_heads=4, n_kv_heads=2, d_ff=768)
ROWS, LENGTH = 8, 128


def _device0_bytes(tree, device) -> int:
  total = 0
  for x in jax.tree.leaves(tree):
    total += sum(s.data.nbytes for s in x.addressable_shards if s.device == device)
  return total


def _memory(compiled) -> dict:
  analysis = compiled.memory_analysis()
  if analysis is None:
    return {}
  names = ("argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes",
           "alias_size_in_bytes", "generated_code_size_in_bytes")
  return {n: int(getattr(analysis, n)) for n in names if hasattr(analysis, n)}


def _child(num_devices: int) -> dict:
  assert jax.device_count() == num_devices, (jax.device_count(), num_devices)
  model = networks.Transformer(networks.TransformerConfig(**LARGER, max_len=LENGTH))
  params = jax.jit(model.init)(jax.random.key(0), jnp.zeros((1, 8), jnp.int32),
                               jnp.arange(8)[None])
  num_params = sum(x.size for x in jax.tree.leaves(params))
  config = learners.GRPOConfig(prompts_per_step=2, group_size=4, kl_beta=0.04, microbatch_size=0,
                               optimizer=learners.OptimizerConfig(learning_rate=1e-5))
  rng = np.random.default_rng(0)
  mask = np.ones((ROWS, LENGTH), np.float32)
  mask[:, :32] = 0
  batch = {"tokens": rng.integers(1, LARGER["vocab_size"], (ROWS, LENGTH)).astype(np.int32),
           "loss_mask": mask, "old_logprobs": np.full((ROWS, LENGTH), -9.0, np.float32) * mask,
           "rewards": rng.random(ROWS).astype(np.float32)}
  batch["advantages"] = np.asarray(grpo.grpo_advantages(batch, config))
  mesh = parallel.make_mesh(parallel.MeshConfig(data=_DATA.value, fsdp=-1))
  device = mesh.devices.flat[0]
  result = {"devices": num_devices, "mesh": dict(mesh.shape), "parameters": int(num_params)}
  updates = {"split": grpo.grpo_split_update(config)}
  if _COMPARE_PLAIN.value and mesh.shape["fsdp"] > 1:
    updates["plain"] = functools.partial(grpo.grpo_update, config=config)
  for name, update in updates.items():
    step = parallel.make_update_step(update, mesh, num_state_args=2, donate=True)
    state = learners.create_train_state(model, jax.tree.map(jnp.copy, params), config.optimizer)
    state, ref = step.place(state, params)
    figures = {"stored_params_bytes": _device0_bytes(state.params, device),
               "stored_opt_state_bytes": _device0_bytes(state.opt_state, device),
               "stored_reference_bytes": _device0_bytes(ref, device)}
    placed_batch = batch if num_devices == 1 else parallel.shard_batch(batch, mesh)
    start = time.perf_counter()
    compiled = step._step.lower(state, ref, placed_batch).compile()  # pylint: disable=protected-access
    figures["compile_s"] = time.perf_counter() - start
    figures["compiled"] = _memory(compiled)
    times = []
    for _ in range(_REPEATS.value):
      start = time.perf_counter()
      state, metrics = step(state, ref, batch)
      jax.block_until_ready(state)
      times.append(time.perf_counter() - start)
    figures["step_s"] = times
    figures["loss"] = float(metrics["grpo/loss"])
    figures["stored_after_steps_bytes"] = (_device0_bytes(state.params, device)
                                           + _device0_bytes(state.opt_state, device))
    figures["stored_bytes"] = figures["stored_params_bytes"] + figures["stored_opt_state_bytes"]
    result[name] = figures
  return result


def _overhead() -> dict:
  model = networks.Transformer(networks.TransformerConfig(**TINY, max_len=64))
  params = model.init(jax.random.key(0), jnp.zeros((1, 8), jnp.int32), jnp.arange(8)[None])
  rng = np.random.default_rng(0)
  batch = {"tokens": rng.integers(1, 512, (8, 64)).astype(np.int32),
           "loss_mask": np.ones((8, 64), np.float32)}
  sides = {"jit": jax.jit(sft.sft_update, donate_argnums=(0,)),
           "make_update_step": parallel.make_update_step(
               sft.sft_split_update(), parallel.make_mesh(devices=jax.devices()[:1]),
               donate=True)}
  states = {k: learners.create_train_state(model, jax.tree.map(jnp.copy, params),
                                           learners.OptimizerConfig()) for k in sides}
  for name, step in sides.items():  # compile and place
    states[name], _ = step(states[name], batch)
    jax.block_until_ready(states[name])
  rounds = {k: [] for k in sides}
  for _ in range(_ROUNDS.value):
    for name, step in sides.items():
      start = time.perf_counter()
      for _ in range(_STEPS.value):
        states[name], metrics = step(states[name], batch)
      jax.block_until_ready((states[name], metrics))
      rounds[name].append((time.perf_counter() - start) / _STEPS.value)
  ratios = [a / b for a, b in zip(rounds["make_update_step"], rounds["jit"])]
  # What make_update_step adds per call, alone: the check that the state is already placed.
  placer = sides["make_update_step"]
  start = time.perf_counter()
  for _ in range(200):
    placer.place(states["make_update_step"])
  place_s = (time.perf_counter() - start) / 200
  return {"step_s": rounds, "place_check_s": place_s,
          "num_state_leaves": len(jax.tree.leaves(states["jit"])),
          "ratio_make_update_step_over_jit": {
              "median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}}


def main(argv):
  del argv
  if _CHILD.value:
    print("RESULT " + json.dumps(_child(_CHILD.value)))
    return
  results = {"cpu": cpu_model(), "jax": jax.__version__, "model": LARGER,
             "rows": ROWS, "length": LENGTH, "runs": []}
  for count in [c for c in map(int, _DEVICES.value) if c % _DATA.value == 0]:
    env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={count}"}
    out = subprocess.run([sys.executable, __file__, f"--child={count}", f"--data={_DATA.value}",
                          f"--compare_plain={_COMPARE_PLAIN.value}", f"--repeats={_REPEATS.value}"],
                         env=env, capture_output=True, text=True, check=False)
    lines = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")]
    if out.returncode or not lines:
      raise RuntimeError(f"{count} devices failed:\n{out.stderr[-3000:]}")
    run = json.loads(lines[-1][7:])
    results["runs"].append(run)
  ones = [r["split"]["stored_bytes"] for r in results["runs"] if r["devices"] == 1]
  base = ones[0] if ones else None  # the saving is against one device
  print(f"cpu: {results['cpu']}; jax {results['jax']}")
  if results["runs"]:
    print(f"transformer {LARGER}, {results['runs'][0]['parameters'] / 1e6:.1f}M parameters; GRPO "
          f"step, {ROWS} rows x {LENGTH} tokens; mesh data={_DATA.value} x "
          f"fsdp=N/{_DATA.value}")
    print(f"{'devices':>7} {'update':>6} {'params MB':>9} {'opt MB':>8} {'stored MB':>9} "
          f"{'1-dev/N':>7} {'arg MB':>8} {'temp MB':>8} {'out MB':>8} {'compile s':>9} "
          f"{'step s':>7}")
  for run in results["runs"]:
    for name in ("split", "plain"):
      if name not in run:
        continue
      f = run[name]
      compiled = f["compiled"]
      mb = lambda key, c=compiled: f"{c[key] / 2**20:8.1f}" if key in c else f"{'n/a':>8}"
      f["ratio_to_one_device"] = base / f["stored_bytes"] if base else float("nan")
      print(f"{run['devices']:>7} {name:>6} {f['stored_params_bytes'] / 2**20:9.1f} "
            f"{f['stored_opt_state_bytes'] / 2**20:8.1f} {f['stored_bytes'] / 2**20:9.1f} "
            f"{f['ratio_to_one_device']:7.2f} {mb('argument_size_in_bytes')} "
            f"{mb('temp_size_in_bytes')} {mb('output_size_in_bytes')} {f['compile_s']:9.1f} "
            f"{statistics.median(f['step_s']):7.2f}")
  eight = [r for r in results["runs"] if r["devices"] == 8]
  if eight and base:
    fraction = eight[0]["split"]["stored_bytes"] / base
    results["fraction_at_8"] = fraction
    print(f"stored parameter + optimizer bytes per device at 8 devices: {fraction:.3f} of one "
          f"device's (acceptance: <= 1/6 = 0.167): {'holds' if fraction <= 1 / 6 else 'FAILS'}")
  if _OVERHEAD.value:
    results["overhead"] = _overhead()
    r = results["overhead"]["ratio_make_update_step_over_jit"]
    print(f"one-device make_update_step / jax.jit wall time per SFT step (tiny shape, 8x64): "
          f"median {r['median']:.3f} (min {r['min']:.3f}, max {r['max']:.3f}) over "
          f"{_ROUNDS.value} interleaved rounds of {_STEPS.value} steps; jit step "
          f"{statistics.median(results['overhead']['step_s']['jit']) * 1e3:.1f} ms; a full placement "
          f"check alone: {results['overhead']['place_check_s'] * 1e6:.0f} us per call "
          f"({results['overhead']['num_state_leaves']} state arrays)")
  if _JSON.value:
    with open(_JSON.value, "w") as f:
      json.dump(results, f, indent=1)


if __name__ == "__main__":
  app.run(main)
