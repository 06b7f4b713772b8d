"""A coding agent trained in the sandbox: SFT on a noisy fixer, then GRPO on hidden tests.

Run (about 30 minutes on 2 CPU cores; see docs/experiments.md for the measured figures):

    python -m experiments.train_agent --workdir=/tmp/rlagents_codefix --config=experiments/configs/codefix.py

The agent reads a small buggy function with numbered lines (`3| for x in xs[1:]:`), may call
`view()`, `run_tests()` (the three visible tests, in the sandbox), `replace(3, for x in xs:)`
and `edit(3,xs[2:],xs[1:])`, and submits with `<answer></answer>`; the reward runs the hidden
tests (edge cases included) in a fresh sandbox, pays useful calls and recovery, charges redundant and invalid calls, and zeroes
tampering with the tests or the runner and special-casing of the visible inputs, each flagged
(`rewards.bugfix_reward_terms`). The report has success on `heldout` (functions never trained
on), `heldout_ood` (bug families never trained on) and `calibration` for the fixer, SFT and GRPO,
with calls, test runs and detector counts per split.

Variants, picked after the colon:

    --config=experiments/configs/codefix.py:smoke    a few minutes; small suite, few steps (tests)
"""

import ml_collections

from rlagents import pipeline

VARIANTS = ("default", "smoke")


def get_config(variant: str = "default") -> ml_collections.ConfigDict:
  variant = variant or "default"
  if variant not in VARIANTS:
    raise ValueError(f"unknown config variant {variant!r}; choose from {', '.join(VARIANTS)}")
  values = pipeline.config_to_dict(pipeline.AgentJobConfig())
  values["task"] = "bugfix"
  values["bugfix"].update(num_train=4000, num_heldout=128, num_heldout_ood=128,
                          num_calibration=128)
  # A fixer episode with a wrong edit and three test runs is ~640 characters.
  values["model"].update(max_len=704)
  values["rollout"].update(max_length=704, max_tool_calls=5, max_segment_tokens=64,
                           batch_size=64)
  # 500 steps on 1,200 demonstrations left the model at 0.04 on held-out functions; 2,000 steps
  # on 4,000, trained on the fixer's successful episodes only, reached 0.367 with `replace`
  # only and 0.586 with `edit`; 4,000 steps on 8,000 reached 0.750 (seed 0, 19 min for the whole
  # job on a quiet 2-core machine; docs/experiments.md).
  values["sft"].update(num_demonstrations=8000, num_steps=4000, batch_size=32,
                       successful_only=True)
  values["sft"]["optimizer"].update(learning_rate=3e-3, warmup_steps=30, decay_steps=3970)
  values["grpo"].update(num_steps=40, prompts_per_step=8, group_size=8, microbatch_size=16)
  values["grpo"]["optimizer"].update(learning_rate=5e-4)
  values["eval"].update(every_steps=10, curve_tasks=64, greedy_too=False)
  values["checkpoint_every"] = 20
  values["log_every"] = 5
  if variant == "smoke":
    values["bugfix"].update(num_train=200, num_heldout=32, num_heldout_ood=32,
                            num_calibration=32)
    values["sft"].update(num_demonstrations=200, num_steps=40, batch_size=16)
    values["sft"]["optimizer"].update(warmup_steps=5, decay_steps=35)
    values["grpo"].update(num_steps=4, prompts_per_step=4, group_size=4, microbatch_size=16)
    values["rollout"].update(batch_size=32)
    values["eval"].update(every_steps=2, curve_tasks=16)
    values["proxy_drift"].update(window=2)
    values["checkpoint_every"] = 4
    values["log_every"] = 2
  return ml_collections.ConfigDict(values)
