"""GRPO with each step one compiled program (`rollout_mode='jit'`): rollouts, reward, update.

The same prompts per step, reference, cadence and checkpoints as the host GRPO phase; the
rollouts, reward and update run in `learners.make_jit_grpo_step` on the suite's JAX text
environment (`TaskSuite.jax_env`: the in-jit calculator with the job's tool failure rate, the
key-door world, ...). After the step the episodes are
replayed on the host through the suite's guarded tools (`rollout.decode_jit_episodes`), so they
are scored, audited and drift-monitored like host episodes; a call whose host observation
differs from the in-jit one is counted (`train/mismatched_calls`).
"""

from rlagents import episodes as episodes_lib
from rlagents import learners
from rlagents import rollout as rollout_lib
from rlagents import tasks
from rlagents.pipeline import _job as job_lib
from rlagents.pipeline.phases import _base


class GRPOJit(_base.Phase):
  """GRPO whose steps run whole in jit (`config.grpo`); suites with a JAX environment only."""
  name, checkpoint_name, phase_id, online = "grpo_jit", "grpo", 3, True

  def settings(self, config):
    return config.grpo

  def validate(self, config):
    try:
      native = tasks.is_jax_native(config.task)
    except tasks.SuiteError:
      native = False  # the job reports the unknown suite itself
    if not native:
      return (f"rollout_mode='jit' needs a JAX-native environment, which task={config.task!r} "
              "does not have (the calculator and keydoor suites do)")
    if config.init_from:
      return ("rollout_mode='jit' runs the in-jit calculator on the built-in character "
              f"tokenizer; init_from={config.init_from!r} brings another tokenizer")
    if config.lora.rank:
      return (f"rollout_mode='jit' trains all parameters; lora.rank={config.lora.rank} needs "
              "rollout_mode='host'")
    if config.diversity_weight:
      return (f"diversity_weight={config.diversity_weight} compares a group's texts on the host;"
              " rollout_mode='jit' scores inside jit (use rollout_mode='host')")
    if config.soft_reward.weight:
      return (f"soft_reward.weight={config.soft_reward.weight}: the learned reward is scored on "
              "the host; rollout_mode='jit' scores inside jit (use rollout_mode='host')")
    return None

  def prepare(self, job, state, reference):
    config = job.config
    if job.suite.jax_env is None:
      raise job_lib.JobError(f"task suite {job.suite.name!r} gives no jax_env: "
                             "rollout_mode='jit' cannot run it")
    env = job.suite.jax_env(job.suite.splits["train"], job.tokenizer, config.rollout)
    step_fn = learners.make_jit_grpo_step(job.model, env, config.rollout, config.grpo,
                                          config.reward, mesh=job.mesh)
    return step_fn, job.place_state(reference)

  def step(self, job, context, state, *, step, key, rng):
    step_fn, reference = context
    grpo, train = job.config.grpo, job.suite.splits["train"]
    prompt_ids = rng.choice(len(train), grpo.prompts_per_step, replace=False)
    state, metrics, episodes = step_fn(state, reference, prompt_ids, key)
    tasks = [train[i] for i in prompt_ids for _ in range(grpo.group_size)]
    host = job_lib.fetch(episodes)
    decoded = rollout_lib.decode_jit_episodes(
        host.tokens, host.length, host.loss_mask, host.call_status, tasks,
        tokenizer=job.tokenizer, toolbox_for=job.suite.toolbox_for,
        max_tool_calls=job.config.rollout.max_tool_calls)
    job.score(decoded.episodes)
    rollout = episodes_lib.RolloutBatch(decoded.episodes, host.tokens, host.loss_mask,
                                        host.logprobs)
    return _base.StepResult(state, metrics, rollout,
                            {"train/mismatched_calls": float(decoded.mismatched_calls)})

  def panels(self, config):
    return {"KL to SFT": ["grpo/kl"]}


GRPO_JIT_PHASE = _base.register_phase(GRPOJit())
