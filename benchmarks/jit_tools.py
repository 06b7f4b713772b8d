r"""GRPO step throughput on the calculator task: tools inside jit vs the host tool loop.

    python benchmarks/jit_tools.py --json=/tmp/jit_tools.json

Both sides run the same GRPO step of the main job on the same model, starting from the same
parameters: `--prompts` training tasks x `--group` episodes each, multi-turn (up to
`max_tool_calls` calculator calls, then an answer), reward, one GRPO update (KL to the start
policy, beta 0.02, AdamW):

- host: `rollout.sample_episodes` (jitted sampling per turn, the calculator run in Python between
  turns, through the job's guardrails) + `rewards` on the host + `learners.MicrobatchedGRPOStep`
  (length-sorted micro-batches of `--microbatch`, as the job runs it);
- jit: `learners.make_jit_grpo_step`: the whole step (turns, the in-jit calculator, reward and
  update) in one compiled program, updating on the whole `[prompts * group, max_length]` buffer.

The policy is first warm-started by a short SFT on the noisy expert's demonstrations (as in the
job), so episodes make real tool calls. The sides run one after the other; each gets
`--warmup` untimed steps (compiles; the host side compiles a shape per trimmed length), then
`--repeats` timed blocks of `--steps` steps. Figure: completion tokens/s = tokens the policy
wrote (loss_mask) / wall time of the block; median [min, max] over blocks; ratio = jit / host
(above 1: the in-jit path is faster). Train success and tool calls of the timed steps are
printed beside it, as context. Prints the figures and writes them to `--json`; never fails on a
time.
"""

import dataclasses
import json
import os
import platform
import statistics
import sys
import time

from absl import app
from absl import flags
import numpy as np

from rlagents.metrics import cpu_model

_PROMPTS = flags.DEFINE_integer("prompts", 8, "Training tasks per GRPO step.")
_GROUP = flags.DEFINE_integer("group", 8, "Episodes per task.")
_STEPS = flags.DEFINE_integer("steps", 4, "GRPO steps per timed block.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed blocks per side.")
_WARMUP = flags.DEFINE_integer("warmup", 3, "Untimed steps per side before timing.")
_SFT_STEPS = flags.DEFINE_integer("sft_steps", 250, "Warm-start SFT steps.")
_MICROBATCH = flags.DEFINE_integer("microbatch", 16, "The host update's micro-batch (0: none).")
_MAX_LENGTH = flags.DEFINE_integer("max_length", 128, "Episode token buffer.")
_MAX_TOOL_CALLS = flags.DEFINE_integer("max_tool_calls", 3, "Calls per episode.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of tasks, parameters and sampling.")
_JSON = flags.DEFINE_string("json", None, "Also write the figures to this JSON file.")


def _setup():
  """Tasks, tokenizer, model and warm-started parameters, as the job's smoke config has them."""
  import jax  # pylint: disable=g-import-not-at-top
  from rlagents import episodes, hf, learners, networks, rollout, tasks, tools  # pylint: disable=g-import-not-at-top,g-multiple-import
  from rlagents.tasks import calculator_expert  # pylint: disable=g-import-not-at-top
  from rlagents.pipeline import _config  # pylint: disable=g-import-not-at-top

  suite = tasks.generate_suite(tasks.CalculatorSuiteConfig(
      seed=_SEED.value, num_train=600, num_heldout=64, num_heldout_ood=64, num_calibration=64,
      num_operands=2, max_digits=2, ood_num_operands=3, ood_max_digits=2))
  tokenizer = hf.build_char_tokenizer()
  model_config = dataclasses.replace(
      _config.AgentJobConfig().model, vocab_size=len(tokenizer), max_len=_MAX_LENGTH.value)
  model = networks.Transformer(model_config)
  rollout_config = rollout.RolloutConfig(
      batch_size=_PROMPTS.value * _GROUP.value, max_length=_MAX_LENGTH.value,
      max_tool_calls=_MAX_TOOL_CALLS.value)
  length = _MAX_LENGTH.value
  params = model.init(jax.random.PRNGKey(_SEED.value), np.zeros((1, length), np.int32),
                      np.arange(length, dtype=np.int32)[None])
  rng = np.random.default_rng(_SEED.value)
  demos = calculator_expert.run_expert_episodes(
      calculator_expert.NoisyExpert(calculator_expert.NoisyExpertConfig()), suite["train"],
      toolbox=tools.ToolBox([tools.CalculatorTool(failure_rate=0.2)]), rng=rng,
      max_tool_calls=_MAX_TOOL_CALLS.value)
  data = episodes.stack_episodes(demos, tokenizer, length)
  state = learners.create_train_state(model, params, learners.OptimizerConfig(
      learning_rate=3e-3, warmup_steps=20, decay_steps=max(_SFT_STEPS.value - 20, 1)))
  update = learners.make_sft_step()
  for _ in range(_SFT_STEPS.value):
    rows = rng.integers(len(data.tokens), size=32)
    state, metrics = update(state, {"tokens": data.tokens[rows],
                                    "loss_mask": data.loss_mask[rows]})
  print(f"warm start: {_SFT_STEPS.value} SFT steps, final nll "
        f"{float(jax.device_get(metrics)['sft/nll']):.3f}", flush=True)
  return suite["train"], tokenizer, model, rollout_config, state.params


def _run_side(side: str, train, tokenizer, model, rollout_config, start_params) -> dict:
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from rlagents import envs, guardrails, learners, rewards, rollout, tasks, tools  # pylint: disable=g-import-not-at-top,g-multiple-import

  grpo = learners.GRPOConfig(prompts_per_step=_PROMPTS.value, group_size=_GROUP.value,
                             microbatch_size=_MICROBATCH.value,
                             optimizer=learners.OptimizerConfig(learning_rate=5e-4,
                                                                warmup_steps=10))
  reward_config = rewards.RewardConfig()
  state = learners.create_train_state(model, jax.tree.map(jnp.copy, start_params),
                                      grpo.optimizer)
  ref_params = start_params
  key = jax.random.PRNGKey(_SEED.value + 1)
  if side == "jit":
    env = envs.CalculatorTextEnv.from_tasks(
        train, tokenizer, max_length=rollout_config.max_length,
        max_tool_calls=rollout_config.max_tool_calls,
        max_segment_tokens=rollout_config.max_segment_tokens, failure_rate=0.2)
    jit_step = learners.make_jit_grpo_step(model, env, rollout_config, grpo, reward_config)

    def step(state, prompt_ids, step_key, rng):
      del rng
      state, metrics, _ = jit_step(state, ref_params, prompt_ids, step_key)
      metrics = jax.device_get(metrics)  # waits for the step
      return state, (float(metrics["train/sampled_tokens"]), float(metrics["train/success"]),
                     float(metrics["train/mean_tool_calls"]))
  else:
    toolbox = guardrails.guarded_toolbox([tools.CalculatorTool(failure_rate=0.2)],
                                         allow={"calc": None})
    sampler = rollout.make_sampler(model, tokenizer, rollout_config)
    update = (learners.MicrobatchedGRPOStep(grpo, microbatch_size=grpo.microbatch_size)
              if grpo.microbatch_size else learners.make_grpo_step(grpo))

    def step(state, prompt_ids, step_key, rng):
      group_tasks = [train[i] for i in prompt_ids for _ in range(_GROUP.value)]
      batch = rollout.sample_episodes(state.params, group_tasks, sampler=sampler,
                                      tokenizer=tokenizer, toolbox=toolbox,
                                      config=rollout_config, key=step_key, rng=rng)
      for episode in batch.episodes:
        episode.reward_terms = rewards.reward_terms(episode, tasks.is_correct)
        episode.reward = rewards.compose_reward(episode.reward_terms, reward_config)
      state, metrics = update(state, ref_params, {
          "tokens": batch.tokens, "loss_mask": batch.loss_mask, "old_logprobs": batch.logprobs,
          "rewards": np.array([e.reward for e in batch.episodes], np.float32)})
      jax.block_until_ready(metrics)
      return state, (float(batch.loss_mask.sum()),
                     float(np.mean([e.reward_terms["correct_answer"] for e in batch.episodes])),
                     float(np.mean([len(e.calls) for e in batch.episodes])))

  rng = np.random.default_rng(_SEED.value + 2)

  def run(state, index):
    prompt_ids = rng.choice(len(train), _PROMPTS.value, replace=False)
    return step(state, prompt_ids, jax.random.fold_in(key, index), rng)

  start = time.perf_counter()
  for index in range(_WARMUP.value):
    state, _ = run(state, index)
  warmup_s = time.perf_counter() - start
  blocks = []
  index = _WARMUP.value
  for _ in range(_REPEATS.value):
    tokens, successes, calls = 0.0, [], []
    start = time.perf_counter()
    for _ in range(_STEPS.value):
      state, (n, success, mean_calls) = run(state, index)
      index += 1
      tokens += n
      successes.append(success)
      calls.append(mean_calls)
    seconds = time.perf_counter() - start
    blocks.append({"seconds": seconds, "completion_tokens": tokens,
                   "tokens_per_s": tokens / seconds, "step_s": seconds / _STEPS.value,
                   "train_success": float(np.mean(successes)),
                   "mean_tool_calls": float(np.mean(calls))})
  rates = [b["tokens_per_s"] for b in blocks]
  return {"warmup_s": warmup_s, "blocks": blocks,
          "tokens_per_s": {"median": statistics.median(rates), "min": min(rates),
                           "max": max(rates)},
          "step_s_median": statistics.median(b["step_s"] for b in blocks),
          "train_success": float(np.mean([b["train_success"] for b in blocks])),
          "mean_tool_calls": float(np.mean([b["mean_tool_calls"] for b in blocks]))}


def main(argv):
  del argv
  import flax  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top
  report = {
      "benchmark": "jit_tools",
      "settings": {"prompts": _PROMPTS.value, "group": _GROUP.value, "steps": _STEPS.value,
                   "repeats": _REPEATS.value, "warmup": _WARMUP.value,
                   "sft_steps": _SFT_STEPS.value, "host_microbatch": _MICROBATCH.value,
                   "max_length": _MAX_LENGTH.value, "max_tool_calls": _MAX_TOOL_CALLS.value,
                   "seed": _SEED.value},
      "machine": {"cpu": cpu_model(), "threads": len(os.sched_getaffinity(0)),
                  "load_average_at_start": os.getloadavg()},
      "versions": {"python": platform.python_version(), "jax": jax.__version__,
                   "flax": flax.__version__, "optax": optax.__version__},
      "sides": {},
  }
  print(f"CPU: {report['machine']['cpu']}, {report['machine']['threads']} threads, load "
        f"{report['machine']['load_average_at_start'][0]:.2f}", flush=True)
  setup = _setup()
  for side in ("host", "jit"):
    report["sides"][side] = _run_side(side, *setup)
    print(f"{side}: done", flush=True)
  host, ours = report["sides"]["host"], report["sides"]["jit"]
  report["ratio_jit_over_host"] = ours["tokens_per_s"]["median"] / host["tokens_per_s"]["median"]
  report["load_average_at_end"] = os.getloadavg()

  print(f"\nGRPO step, {_PROMPTS.value} prompts x {_GROUP.value}, buffer {_MAX_LENGTH.value}, "
        f"<= {_MAX_TOOL_CALLS.value} calls; median [min, max] over {_REPEATS.value} blocks of "
        f"{_STEPS.value} steps")
  print(f"{'side':<6} {'completion tok/s':>28} {'s/step':>8} {'warm-up s':>10} "
        f"{'train success':>14} {'calls/episode':>14}")
  for side, fig in report["sides"].items():
    t = fig["tokens_per_s"]
    print(f"{side:<6} {t['median']:>12,.0f} [{t['min']:,.0f}, {t['max']:,.0f}]".ljust(35)
          + f" {fig['step_s_median']:>8.3f} {fig['warmup_s']:>10.1f} "
          f"{fig['train_success']:>14.3f} {fig['mean_tool_calls']:>14.2f}")
  print(f"ratio (jit / host, completion tok/s): {report['ratio_jit_over_host']:.2f}x")
  print("versions: " + json.dumps(report["versions"]))
  if _JSON.value:
    with open(_JSON.value, "w") as f:
      json.dump(report, f, indent=2)
    print(f"figures: {_JSON.value}")


if __name__ == "__main__":
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  app.run(main)
