"""The final evaluation of a run and the panels of its learning curves (host code)."""

from typing import Any

import jax

from rlagents import evaluation
from rlagents import rewards
from rlagents.pipeline import _job as job_lib
from rlagents.pipeline import _loop
from rlagents.pipeline import _outputs
from rlagents.pipeline import phases

FINAL_EVAL_STEP = 10**6


def final_report(job: job_lib.Job, policies: dict[str, Any], final_step: int,
                 out: _outputs.Outputs) -> dict[str, Any]:
  """Evaluates the expert (when the suite has one) and each of `policies` (name -> train-state
  params) on every evaluation split of the suite, with the suite's hacking detectors."""
  config = job.config
  report: dict[str, Any] = {"task": job.suite.name, "splits": {},
                            "eval_temperature": config.eval.temperature}
  for index, split in enumerate(job.suite.eval_splits):
    tasks = list(job.suite.splits[split])
    entry = {}
    rng = lambda: job.rng(_loop.EVAL_PHASE_ID, FINAL_EVAL_STEP, index)
    if job.suite.expert is not None:
      expert = job.expert_episodes(tasks, rng())
      entry["expert"] = evaluation.summarize_episodes(expert)
      out.episodes(expert, phase="final_eval", step=final_step, policy="expert", split=split)
    for name, params in policies.items():
      policy_key = jax.random.PRNGKey(config.seed + 100 + index)
      batch = job.policy_episodes(params, tasks, key=policy_key, rng=rng(),
                                  sampler=job.sampler_eval)
      entry[name] = evaluation.summarize_episodes(batch.episodes)
      entry[name]["detectors"] = rewards.count_detections(batch.episodes, job.suite.detectors)
      out.episodes(batch.episodes, phase="final_eval", step=final_step, policy=name, split=split)
      if config.eval.greedy_too and split == "heldout":
        greedy = job.policy_episodes(params, tasks, key=policy_key, rng=rng(),
                                     sampler=job.sampler_greedy)
        entry[name]["greedy_success"] = evaluation.summarize_episodes(greedy.episodes)["success"]
    report["splits"][split] = entry
  heldout = report["splits"]["heldout"]
  name_rl = config.algorithm
  report["algorithm"] = name_rl
  report[f"heldout_gain_{name_rl}_over_sft"] = (heldout[name_rl]["success"]
                                                - heldout["sft"]["success"])
  if "expert" in heldout:
    report[f"heldout_gain_{name_rl}_over_expert"] = (heldout[name_rl]["success"]
                                                     - heldout["expert"]["success"])
  return report


def curve_panels(config, reward_terms: tuple[str, ...] | None = None) -> dict[str, list[str]]:
  """The panels of `learning_curves.png` (title -> metric names) for `config.algorithm`.

  Every run plots the SFT loss and the held-out success; online RL adds its reward terms (of
  `reward_terms`, the suite's) and the panels its phase declares (e.g. its KL to SFT); DPO and
  KTO, which sample no episodes after SFT, plot their objective and implicit rewards instead.
  """
  rl = phases.get_phase(phases.rl_phase_name(config))
  panels = {**phases.get_phase("sft").panels(config),
            "heldout success": ["eval/heldout_success", "train/success"]}
  if rl.online:
    terms = reward_terms if reward_terms is not None else rewards.TERMS
    panels[f"reward terms ({config.algorithm.upper()})"] = [
        f"reward/{t}" for t in tuple(terms) + ("learned_term",)]
  panels.update(rl.panels(config))
  return panels
