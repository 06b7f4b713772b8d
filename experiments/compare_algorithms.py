r"""SFT -> {GRPO, PPO, DPO, KTO} on the calculator suite: same seeds, same budget of sampled tokens.

    python -m experiments.compare_algorithms --workdir=/tmp/compare
    python -m experiments.compare_algorithms --workdir=/tmp/cmp_smoke --variant=smoke --seeds=0

For each seed the SFT phase runs once; every method then starts from a copy of that SFT checkpoint
in its own workdir and its own process (so its peak memory is its own), with the config
`experiments/configs/compare.py:<variant>` plus the method's overrides. RL methods stop once they
have sampled `sampled_token_budget` policy tokens; DPO and KTO sample the SFT policy up to the same
budget, keep what the verifier labels, and train offline. 'grpo+rm' is GRPO whose reward adds a
reward model (trained on verified expert preferences) to the verifiable gate.

Writes `<workdir>/comparison.md` (the table, median and min-max over seeds) and
`<workdir>/comparison.json` (every run's figures). Columns:
  held-out / OOD success: the trained policy on the `heldout` / `heldout_ood` splits, sampled at
    temperature 1;
  gain: held-out success minus the SFT policy's (same tasks, same sampling keys);
  phase time: wall seconds of the phase after SFT (sampling and updates; final evaluation not
    included), and seconds per point (0.01) of held-out gain;
  peak RSS: the method's process (restore, training, evaluation);
  sampled tokens: policy tokens sampled after SFT; trained parameters: in the optimizer.
"""

import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import time

from absl import app
from absl import flags

from rlagents import metrics

_WORKDIR = flags.DEFINE_string("workdir", "/tmp/rlagents_compare", "Where the runs live.")
_VARIANT = flags.DEFINE_enum("variant", "default", ["default", "main", "smoke"],
                             "Variant of experiments/configs/compare.py.")
_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds; the table reports medians.")
_METHODS = flags.DEFINE_list("methods", ["grpo", "ppo", "dpo", "kto", "grpo+rm"],
                             "Methods to compare (see METHODS).")

METHODS = {
    "grpo": {"algorithm": "grpo"},
    "ppo": {"algorithm": "ppo"},
    "ppo(separate critic)": {"algorithm": "ppo", "ppo.critic": "separate"},
    "dpo": {"algorithm": "dpo"},
    "kto": {"algorithm": "kto"},
    "grpo+rm": {"algorithm": "grpo", "soft_reward.weight": 0.3,
                "soft_reward.normalization": "group"},
    # Asynchronous GRPO (docs/main_job.md#asynchronous-training) at two staleness bounds.
    "grpo(async s1)": {"algorithm": "grpo", "rl.mode": "async", "rl.max_staleness": 1},
    "grpo(async s4)": {"algorithm": "grpo", "rl.mode": "async", "rl.max_staleness": 4},
}


def job_config(variant: str, seed: int, overrides: dict):
  """The validated job config of one run."""
  from experiments.configs import compare  # pylint: disable=g-import-not-at-top
  from rlagents import pipeline  # pylint: disable=g-import-not-at-top
  from experiments.configs import with_overrides  # pylint: disable=g-import-not-at-top
  values = with_overrides(compare.get_config(variant).to_dict(), {"seed": seed, **overrides})
  return pipeline.config_from_dict(values)


def _child(kind: str, variant: str, seed: int, overrides: dict, workdir: str) -> None:
  from rlagents import pipeline  # pylint: disable=g-import-not-at-top
  config = job_config(variant, seed, overrides)
  if kind == "sft":
    pipeline.train_sft_only(config, workdir)
  else:
    pipeline.train_and_evaluate(config, workdir)


def _run_in_process(kind, variant, seed, overrides, workdir) -> float:
  """Runs one phase in a fresh process; returns its wall seconds."""
  start = time.time()
  process = multiprocessing.get_context("spawn").Process(
      target=_child, args=(kind, variant, seed, overrides, workdir))
  process.start()
  process.join()
  if process.exitcode != 0:
    raise RuntimeError(f"{kind} run in {workdir} failed (exit code {process.exitcode})")
  return time.time() - start


def run_comparison(workdir: str, variant: str, seeds, methods) -> dict:
  """Runs every (seed, method) and returns `{'runs': [...], 'table': markdown}`."""
  for name in methods:
    if name not in METHODS:
      raise ValueError(f"unknown method {name!r}; choose from {', '.join(METHODS)}")
  runs = []
  for seed in seeds:
    sft_dir = os.path.join(workdir, f"seed{seed}", "sft")
    os.makedirs(os.path.dirname(sft_dir), exist_ok=True)
    _run_in_process("sft", variant, seed, {}, sft_dir)
    for name in methods:
      run_dir = os.path.join(workdir, f"seed{seed}", name.replace("+", "_").replace("(", "_")
                             .replace(")", "").replace(" ", "_"))
      if not os.path.exists(os.path.join(run_dir, "report.json")):
        shutil.rmtree(run_dir, ignore_errors=True)
        shutil.copytree(os.path.join(sft_dir, "checkpoints", "sft"),
                        os.path.join(run_dir, "checkpoints", "sft"))
      process_seconds = _run_in_process("rl", variant, seed, METHODS[name], run_dir)
      with open(os.path.join(run_dir, "report.json")) as f:
        report = json.load(f)
      algorithm = report["algorithm"]
      splits = report["splits"]
      stats = report["after_sft"]
      gain = splits["heldout"][algorithm]["success"] - splits["heldout"]["sft"]["success"]
      run = {
          "seed": seed, "method": name,
          "heldout_success": splits["heldout"][algorithm]["success"],
          "ood_success": splits["heldout_ood"][algorithm]["success"],
          "sft_heldout_success": splits["heldout"]["sft"]["success"],
          "sft_ood_success": splits["heldout_ood"]["sft"]["success"],
          "gain": gain,
          "phase_seconds": stats["phase_seconds"],
          "seconds_per_point": (stats["phase_seconds"] / (100 * gain)) if gain > 0 else None,
          "process_seconds": process_seconds,
          "peak_rss_mib": report["peak_rss_mib_this_invocation"],
          "sampled_tokens": stats["sampled_tokens"],
          "trained_parameters": stats["trained_parameters"],
          "steps": stats["rl_steps"],
      }
      if "reward_model" in report:
        run["reward_model_heldout_accuracy"] = report["reward_model"]["heldout_accuracy"]
        run["reward_model_heldout_pairs"] = report["reward_model"]["heldout_pairs"]
        run["reward_model_seconds"] = report["reward_model"]["seconds"]
      runs.append(run)
      print(json.dumps(run), flush=True)
  return {"runs": runs, "table": markdown_table(runs, methods)}


def _median(values, fmt: str) -> str:
  values = [v for v in values if v is not None]
  if not values:
    return "-"
  text = format(statistics.median(values), fmt)
  if len(values) > 1:
    text += f" ({format(min(values), fmt)}-{format(max(values), fmt)})"
  return text


def markdown_table(runs, methods) -> str:
  """Median (min-max) over seeds of each method's figures."""
  header = ("| method | held-out success | OOD success | gain over SFT | phase time (s) "
            "| s per point of gain | peak RSS (MiB) | sampled tokens | trained parameters "
            "| steps |")
  lines = [header, "|" + "---|" * 10]
  sft = [r for r in runs if r["method"] == methods[0]]
  lines.append(f"| sft (start) | {_median([r['sft_heldout_success'] for r in sft], '.3f')} | "
               f"{_median([r['sft_ood_success'] for r in sft], '.3f')} | - | - | - | - | - | - "
               f"| - |")
  for name in methods:
    rows = [r for r in runs if r["method"] == name]
    lines.append(
        f"| {name} | {_median([r['heldout_success'] for r in rows], '.3f')} | "
        f"{_median([r['ood_success'] for r in rows], '.3f')} | "
        f"{_median([r['gain'] for r in rows], '+.3f')} | "
        f"{_median([r['phase_seconds'] for r in rows], '.0f')} | "
        f"{_median([r['seconds_per_point'] for r in rows], '.1f')} | "
        f"{_median([r['peak_rss_mib'] for r in rows], '.0f')} | "
        f"{_median([r['sampled_tokens'] for r in rows], '.0f')} | "
        f"{_median([r['trained_parameters'] for r in rows], ',.0f')} | "
        f"{_median([r['steps'] for r in rows], '.0f')} |")
  rm = [r for r in runs if "reward_model_heldout_accuracy" in r]
  if rm:
    lines.append("")
    lines.append(f"Reward model (grpo+rm): held-out pairwise accuracy "
                 f"{_median([r['reward_model_heldout_accuracy'] for r in rm], '.3f')} on "
                 f"{_median([r['reward_model_heldout_pairs'] for r in rm], '.0f')} pairs of "
                 f"verified expert episodes; its training took "
                 f"{_median([r['reward_model_seconds'] for r in rm], '.0f')} s (not in the "
                 f"phase time).")
  return "\n".join(lines)


def main(argv):
  del argv
  workdir = _WORKDIR.value
  os.makedirs(workdir, exist_ok=True)
  start = time.time()
  seeds = [int(s) for s in _SEEDS.value]
  result = run_comparison(workdir, _VARIANT.value, seeds, list(_METHODS.value))
  load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
  result.update(variant=_VARIANT.value, seeds=seeds, total_seconds=time.time() - start,
                cpu=metrics.cpu_model(), cpus=os.cpu_count(), uptime_at_end=load)
  footer = (f"\n\nVariant '{_VARIANT.value}', seeds {seeds}; median (min-max) over seeds. "
            f"{result['cpus']} CPUs ({result['cpu']}); whole comparison "
            f"{result['total_seconds'] / 60:.1f} min; `uptime` at the end: {load}")
  with open(os.path.join(workdir, "comparison.md"), "w") as f:
    f.write(result["table"] + footer + "\n")
  with open(os.path.join(workdir, "comparison.json"), "w") as f:
    json.dump(result, f, indent=2)
  print(result["table"] + footer)


if __name__ == "__main__":
  app.run(main)
