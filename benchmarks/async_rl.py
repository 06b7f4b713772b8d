r"""Asynchronous vs synchronous GRPO on the calculator: completion tokens per second, side by side.

    python benchmarks/async_rl.py --json=/tmp/async_rl.json

One SFT phase (the smoke config's) is trained once; every run starts GRPO from a copy of it, so
both sides begin from the same policy. The sides run one after the other in interleaved rounds
(sync, async, sync, async, ...) at each tool latency (`--latencies_ms`, seconds added to every
tool call through `rollout.tool_latency_s`: a slow tool or remote service). Figure: sampled
completion tokens per second of GRPO steps 2..N (step 1 compiles; later new batch lengths load
from the XLA cache on disk that the warm-up round fills), from the job's own
`train/sampled_tokens` and `time/step_s`; the per-round ratio async / sync (above 1: async is
faster); median [min, max] over `--rounds`. Held-out success after the run (greedy-free curve
evaluation on 64 tasks) is printed beside it as context. Never fails on a time.
"""

import json
import os
import platform
import shutil
import statistics
import tempfile

from absl import app
from absl import flags
import jax

from experiments import configs
from experiments.configs import calculator
from rlagents import pipeline
from rlagents.metrics import cpu_model
from rlagents.metrics import read_csv
from rlagents.pipeline import _report

_ROUNDS = flags.DEFINE_integer("rounds", 3, "Interleaved rounds per latency.")
_WARMUP = flags.DEFINE_integer(
    "warmup_rounds", 1, "Rounds run first and not counted: they compile what later runs of "
    "this process reuse (the async side's log-prob recompute compiles at its first stale "
    "batch, inside the timed steps).")
_STEPS = flags.DEFINE_integer("grpo_steps", 10, "GRPO steps per run (the first is not timed).")
_SFT_STEPS = flags.DEFINE_integer("sft_steps", 250, "SFT steps of the shared starting policy.")
_LATENCIES = flags.DEFINE_list("latencies_ms", ["50", "0"], "Tool latencies to measure.")
_STALENESS = flags.DEFINE_integer("max_staleness", 1, "rl.max_staleness of the async side.")
_SAMPLERS = flags.DEFINE_integer(
    "num_samplers", 0, "rl.num_samplers of the async side (0: max_staleness + 1).")
_JSON = flags.DEFINE_string("json", None, "Also write the figures to this JSON file.")


def _config(**overrides):
  return pipeline.config_from_dict(configs.with_overrides(
      calculator.get_config("smoke").to_dict(), overrides))


def _without_final_report(config, workdir):
  original = _report.final_report
  _report.final_report = lambda job, *_: {"splits": {}}
  try:
    return pipeline.train_and_evaluate(config, workdir)
  finally:
    _report.final_report = original


def _run(sft_dir, root, mode, latency_ms):
  workdir = tempfile.mkdtemp(dir=root)
  for name in ("data", os.path.join("checkpoints", "sft")):
    shutil.copytree(os.path.join(sft_dir, name), os.path.join(workdir, name))
  config = _config(**{"sft.num_steps": _SFT_STEPS.value, "grpo.num_steps": _STEPS.value,
                      "eval.every_steps": max(1, _STEPS.value // 2), "proxy_drift.window": 2,
                      "checkpoint_every": 1000, "log_every": 1, "rl.mode": mode,
                      "rl.max_staleness": _STALENESS.value, "rl.num_samplers": _SAMPLERS.value,
                      "rollout.tool_latency_s": latency_ms / 1000.0})
  _without_final_report(config, workdir)
  rows = read_csv(os.path.join(workdir, "metrics.csv"))
  first = _SFT_STEPS.value + 1
  tokens = sum(r["value"] for r in rows
               if r["name"] == "train/sampled_tokens" and r["step"] > first)
  seconds = sum(r["value"] for r in rows if r["name"] == "time/step_s" and r["step"] > first)
  success = [r["value"] for r in rows if r["name"] == "eval/heldout_success"][-1]
  dropped = [r["value"] for r in rows if r["name"] == "async/dropped_batches"]
  shutil.rmtree(workdir)
  return {"tokens_per_s": tokens / seconds, "seconds": seconds, "tokens": tokens,
          "heldout_success": success, "dropped_batches": dropped[-1] if dropped else 0.0}


def main(argv):
  del argv
  root = tempfile.mkdtemp(prefix="async_rl_")
  # Every run builds its job's jitted functions afresh; XLA's compilation cache on disk lets
  # runs after the warm-up load what an earlier run compiled (each new batch length compiles
  # once per run otherwise, inside the timed steps: 2-4 s against 0.1-0.2 s steps at 0 ms).
  jax.config.update("jax_compilation_cache_dir", os.path.join(root, "xla_cache"))
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
  sft_dir = os.path.join(root, "sft")
  _without_final_report(_config(**{"sft.num_steps": _SFT_STEPS.value, "grpo.num_steps": 0}),
                        sft_dir)
  results = {"cpu": cpu_model(), "python": platform.python_version(), "jax": jax.__version__,
             "grpo_steps": _STEPS.value, "max_staleness": _STALENESS.value,
             "num_samplers": _SAMPLERS.value, "latencies": {}}
  for latency in [int(x) for x in _LATENCIES.value]:
    rounds = []
    for r in range(-_WARMUP.value if latency == int(_LATENCIES.value[0]) else 0, _ROUNDS.value):
      sync = _run(sft_dir, root, "sync", latency)
      asynchronous = _run(sft_dir, root, "async", latency)
      if r < 0:
        print(f"latency {latency:3d} ms warm-up round: sync {sync['tokens_per_s']:7.1f} tok/s, "
              f"async {asynchronous['tokens_per_s']:7.1f} tok/s (not counted)", flush=True)
        continue
      ratio = asynchronous["tokens_per_s"] / sync["tokens_per_s"]
      rounds.append({"sync": sync, "async": asynchronous, "ratio": ratio})
      print(f"latency {latency:3d} ms round {r}: sync {sync['tokens_per_s']:7.1f} tok/s "
            f"(heldout {sync['heldout_success']:.3f}), async "
            f"{asynchronous['tokens_per_s']:7.1f} tok/s (heldout "
            f"{asynchronous['heldout_success']:.3f}), ratio {ratio:.2f}x", flush=True)
    ratios = [x["ratio"] for x in rounds]
    summary = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}
    results["latencies"][str(latency)] = {"rounds": rounds, "ratio": summary}
    print(f"latency {latency} ms: async / sync completion tokens/s {summary['median']:.2f}x "
          f"[{summary['min']:.2f}, {summary['max']:.2f}] over {len(ratios)} rounds", flush=True)
  shutil.rmtree(root)
  if _JSON.value:
    with open(_JSON.value, "w") as f:
      json.dump(results, f, indent=2)


if __name__ == "__main__":
  app.run(main)
