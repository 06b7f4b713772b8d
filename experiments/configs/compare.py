"""The algorithm comparison: SFT, then GRPO, PPO, DPO or KTO with one budget of sampled tokens.

Used by `experiments/compare_algorithms.py` (which sets `algorithm` and `seed` per run):

    python -m experiments.compare_algorithms --workdir=/tmp/compare            # ~15-25 min, 2 cores
    python -m experiments.compare_algorithms --workdir=/tmp/cmp --variant=smoke   # a few minutes

'default': two-operand calculator problems, a 2-layer policy, 250 SFT steps, then 16,000 sampled
policy tokens for each algorithm (about 25 GRPO / PPO steps of 32 episodes; DPO and KTO sample
the SFT policy up to the same budget and make 60 updates on what verifies); 200 held-out and 200
OOD tasks. 'main': the main job's own config (three-operand problems, its model, SFT and GRPO
steps, 500 held-out tasks), without evaluations during training: methods that differ in how
they run rather than in what they sample (sync and async GRPO) compared at the main job's
settings. 'smoke': the same pipeline shrunk to seconds per phase, for the test.
"""

import ml_collections

from experiments.configs import calculator

VARIANTS = ("default", "main", "smoke")


def get_config(variant: str = "default") -> ml_collections.ConfigDict:
  variant = variant or "default"
  if variant not in VARIANTS:
    raise ValueError(f"unknown config variant {variant!r}; choose from {', '.join(VARIANTS)}")
  if variant == "main":
    config = calculator.get_config("default")
    config.eval.update(every_steps=0, greedy_too=False)
    config.checkpoint_every = 1000
    return config
  config = calculator.get_config("smoke")
  config.tasks.update(num_heldout=200, num_heldout_ood=200, num_calibration=64)
  config.sampled_token_budget = 16000
  config.grpo.num_steps = 1000      # the budget stops RL first
  config.ppo.num_steps = 1000
  config.dpo.num_steps = 60
  config.preferences.policy_prompts = 600
  config.eval.update(every_steps=0, greedy_too=False)
  config.checkpoint_every = 1000
  if variant == "smoke":
    config.tasks.update(num_heldout=32, num_heldout_ood=32, num_calibration=32)
    config.sft.num_steps = 60
    config.sft.optimizer.update(warmup_steps=10, decay_steps=50)
    config.sampled_token_budget = 1500
    config.dpo.num_steps = 4
    config.preferences.expert_tasks = 100
    config.reward_model.num_steps = 10
  return config
