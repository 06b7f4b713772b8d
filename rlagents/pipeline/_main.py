"""The main job: SFT on the suite's expert, then the phase `config.algorithm`, then evaluation.

Host code that drives registered phases (`pipeline.phases`) through one loop (`run_phase`).
Everything a run needs to resume and to be audited lives in its workdir:

    config.json             the resolved config (a resumed run must use the same one)
    tokenizer/              the policy's tokenizer (transformers format)
    data/                   the task suite's data (TFDS, array_record, for the built-in suites)
    checkpoints/{sft,<phase>}/  Orbax checkpoints of each phase (with `lora.rank`, the adapters)
    export/                 the final policy as a transformers checkpoint (LoRA merged)
    metrics.csv, tensorboard/, learning_curves.png
    audit/episodes.jsonl    every episode, hash-chained: task, each state, action, tool result,
                            guardrail decision and reward term (see `rlagents.guardrails`)
    report.json             the final figures for the expert, the SFT and the trained policy

Started again on the same workdir, the job restores the newest readable checkpoint of the phase
it was in and continues from that step; data order, sampling keys and the tools' randomness are
functions of (seed, step), so a resumed run continues exactly where it stopped, and metrics and
audit records the interrupted run wrote after that step are dropped and written again. A corrupt
newest checkpoint is reported and the one before it is used (docs/checkpoints.md).

Devices: the update steps run on `config.mesh` (by default every device on the `data` axis);
with several processes (`jax.distributed`) every process samples the same episodes and takes
its rows of each update batch, all join the collective checkpoint saves, and only process 0
writes config.json, the tokenizer, metrics, the audit log, the export and the report.
"""

import json
import os
import resource
import time
from typing import Any

import jax

from rlagents import checkpoint as checkpoint_lib
from rlagents import hf
from rlagents import metrics as metrics_lib
from rlagents import sandbox
from rlagents.pipeline import _bugfix_suite  # pylint: disable=unused-import  (registers 'bugfix')
from rlagents.pipeline import _checkpoints
from rlagents.pipeline import _config
from rlagents.pipeline import _job as job_lib
from rlagents.pipeline import _loop
from rlagents.pipeline import _outputs
from rlagents.pipeline import _report
from rlagents.pipeline import _soft_reward
from rlagents.pipeline import _suites
from rlagents.pipeline import _validate
from rlagents.pipeline import phases


def _check_workdir(config: _config.AgentJobConfig, workdir: str) -> None:
  parent = os.path.dirname(os.path.abspath(workdir))
  if not os.path.isdir(parent):
    raise job_lib.JobError(f"the parent directory of workdir {workdir!r} does not exist: {parent}")
  os.makedirs(workdir, exist_ok=True)
  path = os.path.join(workdir, "config.json")
  resolved = json.loads(json.dumps(_config.config_to_dict(config)))
  if os.path.exists(path):
    with open(path) as f:
      saved = json.load(f)
    if saved != resolved:
      raise job_lib.JobError(
          f"workdir {workdir!r} holds a run with a different config (first difference at "
          f"'{_first_difference(saved, resolved)}'); use a new workdir or the same config")
  elif jax.process_index() == 0:
    with open(path, "w") as f:
      json.dump(resolved, f, indent=2, sort_keys=True)


def _first_difference(a, b, path=""):
  if isinstance(a, dict) and isinstance(b, dict):
    for key in sorted(set(a) | set(b)):
      if a.get(key) != b.get(key):
        return _first_difference(a.get(key), b.get(key), f"{path}{key}.")
  return path.rstrip(".")


def _start(job: job_lib.Job, phase: phases.Phase, checkpointer) -> _checkpoints.PhaseStart:
  """The restored (or fresh) start of `phase` from its checkpoints."""
  offset = 0 if phase.name == "sft" else 1
  return _checkpoints.restore_phase(
      checkpointer, phase.template_state(job), jax.random.PRNGKey(job.config.seed + offset),
      phase=phase.directory, seed=job.config.seed, lora=job.lora is not None)


def _prepare_run(config: _config.AgentJobConfig, workdir: str) -> job_lib.Job:
  _validate.check_config(config)
  if config.format == "chat" and not config.init_from:
    # A config, not yet a run: `calculator.py:chat_smoke` leaves init_from to the command line.
    raise job_lib.JobError("format='chat' renders episodes with a checkpoint's chat template; "
                           "set init_from to a Hugging Face directory whose tokenizer has one")
  _check_workdir(config, workdir)
  try:
    job = job_lib.Job(config, workdir)
  except ValueError as error:  # a mesh that does not fit the devices
    raise job_lib.JobError(str(error)) from None
  rl = phases.get_phase(phases.rl_phase_name(config))
  if rl.online and "calibration" not in job.suite.eval_splits:
    raise job_lib.JobError(f"task suite {job.suite.name!r} has no 'calibration' split: the "
                           f"proxy-drift monitor of {rl.name} needs one")
  unseen = len(job.suite.splits["train"]) - config.sft.num_demonstrations
  if rl.online and config.rl_tasks == "unseen_by_sft" and unseen < 1:
    raise job_lib.JobError(
        f"rl_tasks='unseen_by_sft': the train split ({len(job.suite.splits['train'])} tasks) "
        f"holds none beyond the {config.sft.num_demonstrations} SFT's demonstrations are "
        f"played on; enlarge the train split or lower sft.num_demonstrations")
  if jax.process_index() == 0:
    job.tokenizer.save_pretrained(os.path.join(workdir, "tokenizer"))
  return job


def train_and_evaluate(config: _config.AgentJobConfig, workdir: str) -> dict[str, Any]:
  """Runs (or resumes) the whole job in `workdir` and returns the report it writes."""
  start_time = time.time()
  if config.task == "codefix" or config.scripted_policy:
    _validate.check_config(config)
    _check_workdir(config, workdir)
    suite = job_lib.load_suite(config, workdir)
    report = _suites.run_scripted_suite(suite, config, workdir)
    report["wall_seconds_this_invocation"] = time.time() - start_time
    return report
  job = _prepare_run(config, workdir)
  sft, rl = phases.get_phase("sft"), phases.get_phase(phases.rl_phase_name(config))
  with checkpoint_lib.Checkpointer(os.path.join(workdir, "checkpoints", "sft")) as sft_ckpt, \
       checkpoint_lib.Checkpointer(os.path.join(workdir, "checkpoints", rl.directory)) as rl_ckpt:
    # Both phases are restored before anything is written: the global step the run resumes
    # from is that of the newest checkpoint that could actually be read.
    sft_start, rl_start = _start(job, sft, sft_ckpt), _start(job, rl, rl_ckpt)
    resume_step = (job.sft_steps + rl_start.step) if rl_start.step else (sft_start.step or None)
    out = job.outputs = _outputs.Outputs(workdir, resume_step, job.suite.name)
    if resume_step is not None:
      print(f"Resuming {workdir} from step {resume_step}", flush=True)
    sft_params, _ = _loop.run_phase(job, sft, sft_start, sft_ckpt, out)
    del sft_start
    reward_model_report = None
    if config.soft_reward.weight > 0:
      reward_model_report = _soft_reward.train_reward_model(job, sft_params)
    rl_params, rl_stats = _loop.run_phase(job, rl, rl_start, rl_ckpt, out, reference=sft_params,
                                          step_offset=job.sft_steps)
    del rl_start
  # Leaving the block waited for the last (asynchronous) saves.
  final_step = job.sft_steps + rl.num_steps(config)
  report = _report.final_report(job, {"sft": sft_params, config.algorithm: rl_params},
                                final_step, out)
  report["wall_seconds_this_invocation"] = time.time() - start_time
  report["after_sft"] = {"trained_parameters": job_lib.count_parameters(rl_params), **rl_stats}
  if reward_model_report is not None:
    report["reward_model"] = reward_model_report
  # Peak resident memory of this process (Linux reports KiB).
  report["peak_rss_mib_this_invocation"] = resource.getrusage(
      resource.RUSAGE_SELF).ru_maxrss / 1024
  report["resumed_from_step"] = resume_step
  report["proxy_drift"] = {"watched": bool(rl.online and config.eval.every_steps),
                           "points": len(job.drift_monitor.history),
                           "alarm_steps": list(job.drift_monitor.alarms)}
  report["devices"] = {"processes": jax.process_count(), "devices": jax.device_count(),
                       "mesh": dict(job.mesh.shape)}
  if job.suite.sandboxed:
    report["sandbox_isolation"] = sandbox.isolation_mode(
        sandbox.SandboxLimits(isolation=config.sandbox_isolation))
  out.close()
  if jax.process_index() != 0:
    return report
  hf.export_pretrained(job_lib.fetch(job.policy_params(rl_params)), job.model.config,
                       job.tokenizer, os.path.join(workdir, "export"))
  with open(os.path.join(workdir, "report.json"), "w") as f:
    json.dump(report, f, indent=2)
  heldout = report["splits"].get("heldout", {})
  markers = {"expert": heldout["expert"]["success"]} if "expert" in heldout else {}
  metrics_lib.plot_learning_curves(
      os.path.join(workdir, "metrics.csv"), os.path.join(workdir, "learning_curves.png"),
      panels=_report.curve_panels(config, job.suite.reward_terms), markers=markers)
  return report


def train_sft_only(config: _config.AgentJobConfig, workdir: str) -> None:
  """Runs (or resumes) only the SFT phase in `workdir`.

  Several runs that differ only after SFT (e.g. `experiments/compare_algorithms.py`) can then
  start from a copy of `checkpoints/sft`, which the job finds and does not repeat.
  """
  job = _prepare_run(config, workdir)
  sft = phases.get_phase("sft")
  with checkpoint_lib.Checkpointer(os.path.join(workdir, "checkpoints", "sft")) as sft_ckpt:
    start = _start(job, sft, sft_ckpt)
    out = job.outputs = _outputs.Outputs(workdir, start.step or None, job.suite.name)
    _loop.run_phase(job, sft, start, sft_ckpt, out)
  out.close()
