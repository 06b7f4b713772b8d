"""Checks of a whole job config against the registered phases and suites and the devices.

Every combination either runs or is refused here, before anything is built, with one line that
names the fields (docs/main_job.md has the table of what combines with what). Host code.
"""

import math

import jax

from rlagents import tasks as tasks_lib
from rlagents.pipeline import _config
from rlagents.pipeline import phases

# The suites trained in a chat template so far (their experts' demonstrations rewritten in the
# model's syntax by `episodes.ChatFormat.adopt`); others are refused until a run shows they work.
CHAT_SUITES = ("calculator",)


def drift_points(config: _config.AgentJobConfig, num_steps: int) -> int:
  """Evaluation points of an online phase of `num_steps` steps (every `eval.every_steps` steps
  and at its last step), where the proxy-drift monitor looks."""
  every = config.eval.every_steps
  if not every:
    return 0
  return num_steps // every + (1 if num_steps % every else 0)


def _problem(config: _config.AgentJobConfig) -> str | None:
  """The first reason `config` cannot run, or None."""
  try:
    tasks_lib.suite_factory(config.task)
  except tasks_lib.SuiteError as error:
    return str(error)
  if config.algorithm not in phases.algorithms():
    return (f"algorithm must be one of {', '.join(phases.algorithms())} (registered phases), "
            f"got {config.algorithm!r}")
  if config.rollout_mode == "jit" and config.algorithm not in ("grpo", "grpo_jit"):
    return (f"rollout_mode='jit' runs GRPO steps in one program; algorithm={config.algorithm!r}"
            " samples on the host (use rollout_mode='host')")
  if config.format == "chat":
    if config.task not in CHAT_SUITES or config.scripted_policy:
      return (f"format='chat' trains a policy on the {', '.join(CHAT_SUITES)} suite(s); "
              f"task={config.task!r}, scripted_policy={config.scripted_policy!r}")
    if config.algorithm not in ("grpo", "ppo") or config.soft_reward.weight:
      return (f"format='chat' runs SFT then algorithm='grpo' or 'ppo' (the preference data "
              f"of dpo, kto and the reward model are marker text); got algorithm="
              f"{config.algorithm!r}, soft_reward.weight={config.soft_reward.weight}")
  if config.scripted_policy and config.task not in ("retrieval", "codefix"):
    return (f"scripted_policy={config.scripted_policy!r} plays on the retrieval or code-fix "
            f"suite; task={config.task!r} trains a policy (leave scripted_policy '')")
  if config.task == "codefix" or config.scripted_policy:
    return None  # Scripted play: no policy is trained, the settings below do not apply.
  if config.task == "retrieval":
    if config.algorithm != "grpo" or config.rollout_mode != "host":
      return ("task='retrieval' trains with algorithm='grpo' and rollout_mode='host' only, got "
              f"algorithm={config.algorithm!r}, rollout_mode={config.rollout_mode!r}")
    if config.soft_reward.weight:
      return ("task='retrieval' has no learned reward yet; soft_reward.weight must be 0, got "
              f"{config.soft_reward.weight}")
  if config.task == "calculator" and config.sft.num_demonstrations > config.tasks.num_train:
    return (f"sft.num_demonstrations ({config.sft.num_demonstrations}) exceeds "
            f"tasks.num_train ({config.tasks.num_train})")
  phase = phases.get_phase(phases.rl_phase_name(config))
  if config.rl.mode == "async" and phase.name != "grpo":
    return (f"rl.mode='async' overlaps sampling and updates of GRPO on host rollouts; "
            f"algorithm={config.algorithm!r} with rollout_mode={config.rollout_mode!r} runs "
            f"phase {phase.name!r} (use rl.mode='sync')")
  problem = phase.validate(config)
  if problem:
    return problem
  for name, reader in (("preference_file", "dpo"), ("feedback_file", "kto")):
    if getattr(config.preferences, name) and config.algorithm != reader:
      return (f"preferences.{name} is read by algorithm={reader!r} only; "
              f"algorithm={config.algorithm!r} would ignore it")
  # With no RL steps (an SFT-only run) there is nothing for the drift monitor to watch.
  if phase.online and config.eval.every_steps and phase.num_steps(config) > 0:
    points = drift_points(config, phase.num_steps(config))
    if points < config.proxy_drift.window:
      return (f"proxy_drift.window={config.proxy_drift.window} needs that many evaluation points "
              f"but {phase.name} makes {points} ({phase.num_steps(config)} steps, "
              f"eval.every_steps={config.eval.every_steps}): lower the window or evaluate more "
              "often")
  return _device_problem(config)


def _device_problem(config: _config.AgentJobConfig) -> str | None:
  """The mesh must fit the devices, and every batch an update places must split over it."""
  try:
    data, fsdp = config.mesh.axis_sizes(jax.device_count())
  except ValueError as error:
    return f"mesh: {error}"
  shards = data * fsdp
  grpo, ppo = config.grpo, config.ppo
  batches = {"sft.batch_size": config.sft.batch_size}
  if config.algorithm in ("grpo", "grpo_selfplay"):
    rows = grpo.prompts_per_step * grpo.group_size
    batches["grpo.microbatch_size" if grpo.microbatch_size and config.rollout_mode == "host"
            else "grpo.prompts_per_step * grpo.group_size"] = (
                grpo.microbatch_size if grpo.microbatch_size and config.rollout_mode == "host"
                else rows)
  elif config.algorithm == "ppo":
    batches["ppo.episodes_per_step / ppo.num_minibatches"] = (
        ppo.episodes_per_step // ppo.num_minibatches)
  for name, rows in batches.items():
    if rows % shards:
      return (f"{name} = {rows} does not split over the {shards} devices of the mesh "
              f"(mesh.data={data} x mesh.fsdp={fsdp}); make it a multiple of {shards} or set "
              f"mesh.data to a divisor of it (largest: {math.gcd(rows, shards)})")
  return None


def check_config(config: _config.AgentJobConfig) -> _config.AgentJobConfig:
  """Returns `config` when it can run.

  Raises:
    ConfigError: one line naming the fields that do not combine.
  """
  problem = _problem(config)
  if problem:
    raise _config.ConfigError(f"invalid config: {problem}")
  return config


def config_from_dict(values) -> _config.AgentJobConfig:
  """Builds an `AgentJobConfig` (missing keys keep their defaults) and checks it.

  Raises:
    ConfigError: naming an unknown key, a value of the wrong type, an impossible value, or
      fields that do not combine.
  """
  return check_config(_config.config_from_dict(values))
