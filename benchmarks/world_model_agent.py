r"""GRPO on the key-door world with imagined episodes beside real ones, against real ones alone.

    python benchmarks/world_model_agent.py --seeds=0,1,2 --json=/tmp/world_model_agent.json
    python benchmarks/world_model_agent.py --variant=smoke --seeds=0      # minutes, for checks
    python benchmarks/world_model_agent.py --simulator_accuracy --seeds=0  # the simulator alone

For each seed, SFT runs once (the job's `sft` phase on the noisy expert); its checkpoint and
audit log are copied into two runs that differ only after SFT:

- real: `algorithm=grpo`, `rollout_mode=jit`, every group in the real world;
- dyna: `algorithm=grpo_dyna`, `--fraction` of the groups in the learned simulator (refit on
  the real episodes of the audit log every `--refit_every` steps), for as many steps as spend
  the same number of real tool calls as the real run (`--steps / (1 - fraction)`, rounded).

Figures per run, from its report and audit log: held-out and OOD success (real environment,
temperature 1), real tool calls spent in GRPO, calibration gaps between imagination and
reality, and held-out + OOD success by the length of the world's shortest solution (calls).
Prints a table and writes everything to `--json`; never fails on a figure.

With `--simulator_accuracy` no policy is trained: the simulator is fit as `grpo_dyna` first
fits it (`imagination.*` of the config, on the real transitions of the audit log, here the
`sft.num_demonstrations` noisy-expert episodes the SFT phase writes there), then scored on real
transitions of fresh expert episodes in the held-out worlds (`heldout`, `heldout_ood`): exact
next observation (whole string), effect (what the reward reads) and goal (what done and
success read).
"""

import json
import os
import shutil
import sys

from absl import app
from absl import flags

_SEEDS = flags.DEFINE_string("seeds", "0", "Comma-separated seeds.")
_VARIANT = flags.DEFINE_string("variant", "default", "Config variant of keydoor.py.")
_STEPS = flags.DEFINE_integer("steps", 60, "GRPO steps of the real-only run.")
_FRACTION = flags.DEFINE_float("fraction", 0.5, "Share of groups in imagination (dyna).")
_REFIT = flags.DEFINE_integer("refit_every", 10, "Simulator refit period (dyna).")
_WORKDIR = flags.DEFINE_string("workdir", "/tmp/world_model_agent", "Where the runs go.")
_JSON = flags.DEFINE_string("json", "", "Write the figures here too.")
_OVERRIDES = flags.DEFINE_multi_string("override", [], "Extra config overrides key=value.")
_ACCURACY = flags.DEFINE_bool("simulator_accuracy", False,
                              "Only fit the simulator and score it on held-out transitions.")
_ACCURACY_TRANSITIONS = flags.DEFINE_integer(
    "accuracy_transitions", 1000, "Held-out transitions scored per split (a uniform sample; "
    "each costs 40 forward passes of the simulator).")


def _config(seed, extra):
  sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
  from experiments.configs import keydoor  # pylint: disable=g-import-not-at-top
  from rlagents import pipeline  # pylint: disable=g-import-not-at-top
  values = keydoor.get_config(_VARIANT.value).to_dict()
  values["seed"] = seed
  for item in list(_OVERRIDES.value) + extra:
    key, _, value = item.partition("=")
    node = values
    *path, last = key.split(".")
    for part in path:
      node = node[part]
    node[last] = type(node[last])(json.loads(value) if value in ("true", "false") else value)
  return pipeline.config_from_dict(values)


def _by_length(workdir, algorithm):
  """Success by the shortest solution's length, on heldout and heldout_ood (final eval)."""
  from rlagents import guardrails  # pylint: disable=g-import-not-at-top
  buckets = {}
  for record in guardrails.read_audit_log(os.path.join(workdir, "audit", "episodes.jsonl")):
    if record.get("phase") != "final_eval" or record.get("policy") != algorithm:
      continue
    if record.get("split") not in ("heldout", "heldout_ood"):
      continue
    calls = record["task"]["shortest_calls"]
    bucket = ">=20" if calls >= 20 else f"{calls // 5 * 5:02d}-{calls // 5 * 5 + 4:02d}"
    hits, total = buckets.get(bucket, (0, 0))
    buckets[bucket] = (hits + record["reward_terms"]["correct_answer"], total + 1)
  return {k: {"success": h / t, "episodes": t} for k, (h, t) in sorted(buckets.items())}


def _run(seed, name, extra, sft_dir):
  from rlagents import pipeline  # pylint: disable=g-import-not-at-top
  workdir = os.path.join(_WORKDIR.value, f"seed{seed}_{name}")
  if not os.path.exists(os.path.join(workdir, "report.json")):
    os.makedirs(workdir, exist_ok=True)
    for part in ("checkpoints/sft", "audit"):
      if not os.path.exists(os.path.join(workdir, part)):
        shutil.copytree(os.path.join(sft_dir, part), os.path.join(workdir, part))
  config = _config(seed, extra)
  report = pipeline.train_and_evaluate(config, workdir)
  algorithm = config.algorithm
  return {
      "heldout_success": report["splits"]["heldout"][algorithm]["success"],
      "ood_success": report["splits"]["heldout_ood"][algorithm]["success"],
      "sft_heldout_success": report["splits"]["heldout"]["sft"]["success"],
      "real_tool_calls": report["after_sft"].get("real_tool_calls"),
      "imagination_gaps": report["after_sft"].get("imagination_gaps"),
      "alarm_steps": report["proxy_drift"]["alarm_steps"],
      "success_by_length": _by_length(workdir, algorithm),
      "wall_seconds": report["wall_seconds_this_invocation"],
  }


def _simulator_accuracy(seed):
  """Fit the simulator on the expert's logged transitions; its held-out accuracy per split."""
  import time  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from rlagents import guardrails  # pylint: disable=g-import-not-at-top
  from rlagents import hf  # pylint: disable=g-import-not-at-top
  from rlagents import networks  # pylint: disable=g-import-not-at-top
  from rlagents import world_models  # pylint: disable=g-import-not-at-top
  from rlagents.tasks import keydoor  # pylint: disable=g-import-not-at-top
  config = _config(seed, [])
  settings, tokenizer = config.imagination, hf.build_char_tokenizer()
  suite = keydoor.suite(config, "")
  train = suite.splits["train"]
  tasks = [train[i % len(train)] for i in range(config.sft.num_demonstrations)]
  max_calls = config.rollout.max_tool_calls
  demos = suite.expert(tasks, np.random.default_rng(seed), max_calls)
  path = os.path.join(_WORKDIR.value, f"seed{seed}_simulator", "episodes.jsonl")
  os.makedirs(os.path.dirname(path), exist_ok=True)
  guardrails.AuditLog(path, resume_step=None).write(
      demos, phase="sft_demonstration", step=0, policy="expert", suite="keydoor")
  transitions = world_models.transitions_from_audit(path)
  model = networks.Transformer(world_models.text_world_model_config(
      len(tokenizer), d_model=settings.d_model, n_layers=settings.n_layers))
  start = time.time()
  params, losses = world_models.fit_text_world_model(
      model, world_models.encode_text_transitions(transitions, tokenizer),
      steps=settings.fit_steps, batch_size=settings.batch_size,
      learning_rate=settings.learning_rate, seed=seed, event_weight=settings.event_weight)
  result = {"train_transitions": len(transitions), "fit_steps": settings.fit_steps,
            "fit_seconds": time.time() - start, "nll_first_last": [losses[0], losses[-1]]}
  print(f"seed {seed} fit: {json.dumps(result)}", flush=True)
  for offset, split in enumerate(("heldout", "heldout_ood"), start=1):
    played = suite.expert(suite.splits[split], np.random.default_rng(seed + 1000 * offset),
                          max_calls)
    split_path = path.replace("episodes", split)
    guardrails.AuditLog(split_path, resume_step=None).write(
        played, phase="eval", step=0, policy="expert", suite="keydoor")
    heldout = world_models.transitions_from_audit(split_path)
    if len(heldout) > _ACCURACY_TRANSITIONS.value:
      rows = np.random.default_rng(seed).choice(len(heldout), _ACCURACY_TRANSITIONS.value,
                                                replace=False)
      heldout = [heldout[i] for i in sorted(rows)]
    start = time.time()
    # Scored apart too: the calls that reach the goal (one per successful episode) and the rest.
    parts = {name: [t for t in heldout if t.at_goal == reach]
             for name, reach in (("reaching_goal", True), ("other", False))}
    scores = {name: world_models.text_world_model_accuracy(model, params, part, tokenizer)
              for name, part in parts.items() if part}
    overall = {k: sum(scores[n][k] * len(parts[n]) for n in scores) / len(heldout)
               for k in scores["other"]}
    result[split] = {**overall, "transitions": len(heldout), "seconds": time.time() - start,
                     **{n: {**v, "transitions": len(parts[n])} for n, v in scores.items()}}
    print(f"seed {seed} {split}: {json.dumps(result[split])}", flush=True)
  return result


def main(argv):
  del argv
  from rlagents import pipeline  # pylint: disable=g-import-not-at-top
  results = {}
  if _ACCURACY.value:
    results = {s: _simulator_accuracy(int(s)) for s in _SEEDS.value.split(",")}
    if _JSON.value:
      with open(_JSON.value, "w") as f:
        json.dump(results, f, indent=2)
    return
  dyna_steps = max(1, round(_STEPS.value / (1 - _FRACTION.value)))
  os.makedirs(_WORKDIR.value, exist_ok=True)
  for seed in [int(s) for s in _SEEDS.value.split(",")]:
    sft_dir = os.path.join(_WORKDIR.value, f"seed{seed}_sft")
    pipeline.train_sft_only(_config(seed, []), sft_dir)
    real = _run(seed, "real", ["rollout_mode=jit", f"grpo.num_steps={_STEPS.value}"], sft_dir)
    # The real run's calls: its GRPO episodes' calls, from its metrics.
    real["real_tool_calls"] = _real_calls(os.path.join(_WORKDIR.value, f"seed{seed}_real"))
    dyna = _run(seed, "dyna", ["algorithm=grpo_dyna", f"grpo.num_steps={dyna_steps}",
                               f"imagination.fraction={_FRACTION.value}",
                               f"imagination.refit_every={_REFIT.value}"], sft_dir)
    results[seed] = {"real": real, "dyna": dyna}
    for name, r in (("real", real), ("dyna", dyna)):
      print(f"seed {seed} {name:5s} heldout {r['heldout_success']:.3f} ood "
            f"{r['ood_success']:.3f} (sft {r['sft_heldout_success']:.3f}) real calls "
            f"{r['real_tool_calls']} by length {r['success_by_length']} "
            f"gaps {r['imagination_gaps']} alarms {r['alarm_steps']}", flush=True)
  if _JSON.value:
    with open(_JSON.value, "w") as f:
      json.dump(results, f, indent=2)


def _real_calls(workdir):
  """Tool calls of the GRPO training episodes in a run's audit log (all real)."""
  from rlagents import guardrails  # pylint: disable=g-import-not-at-top
  return sum(sum(a["kind"] == "call" for a in r["actions"])
             for r in guardrails.read_audit_log(os.path.join(workdir, "audit", "episodes.jsonl"))
             if r.get("phase") == "grpo" and not r.get("imagined"))


if __name__ == "__main__":
  app.run(main)
