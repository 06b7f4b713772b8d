"""The retrieval QA agent: SFT on a noisy searcher, then GRPO on the grounded reward.

Run:

    python -m experiments.train_agent --workdir=/tmp/retrieval_agent --config=experiments/configs/retrieval.py

The agent reads a question about an invented place ("what is the capital of velora?"), searches
the suite's corpus (`search(capital velora)`), and answers with a word of a passage it retrieved;
the reward counts an answer only when it is right and grounded in that search's results, and
penalises padding, copying a passage that does not answer, and repeated searches
(`rewards.retrieval_reward_terms`). The report counts each detector's flags on every split.

Measured (seed 0, 2-core CPU shared with another run, 29.5 minutes): held-out success expert 0.676,
SFT 0.148, GRPO 0.533; the curve was still rising at the last of the 200 GRPO steps
(docs/main_job.md).

Variants, picked after the colon:

    --config=experiments/configs/retrieval.py:smoke    a few minutes; small suite, few steps (tests)

Scripted policies (no training) run with `--config.scripted_policy=honest|pad|copy|spam`.
"""

import ml_collections

from rlagents import pipeline

VARIANTS = ("default", "smoke")


def get_config(variant: str = "default") -> ml_collections.ConfigDict:
  variant = variant or "default"
  if variant not in VARIANTS:
    raise ValueError(f"unknown config variant {variant!r}; choose from {', '.join(VARIANTS)}")
  values = pipeline.config_to_dict(pipeline.AgentJobConfig())
  values["task"] = "retrieval"
  # 1500 places: 3,564 training questions, 460 held-out, 476 calibration.
  values["retrieval"].update(num_places=1500)
  # An episode with a repeated search (two observations of two passages) is ~300 tokens.
  values["model"].update(max_len=320)
  values["rollout"].update(max_length=320, max_tool_calls=3)
  values["eval"].update(curve_tasks=256)
  if variant == "smoke":
    values["retrieval"].update(num_places=300)
    values["sft"].update(num_demonstrations=1200, num_steps=250, batch_size=32)
    values["sft"]["optimizer"].update(learning_rate=3e-3, warmup_steps=20, decay_steps=230)
    values["grpo"].update(num_steps=16, prompts_per_step=8, group_size=4, microbatch_size=16)
    values["grpo"]["optimizer"].update(learning_rate=5e-4)
    values["rollout"].update(batch_size=32)
    values["eval"].update(every_steps=8, curve_tasks=64, greedy_too=False)
    # Two evaluation points (steps 8 and 16): the drift monitor compares those two.
    values["proxy_drift"].update(window=2)
    values["checkpoint_every"] = 8
    values["log_every"] = 4
  return ml_collections.ConfigDict(values)
