"""Every config combination that cannot run is refused when the config is built, in one line.

The tests run on the 8 host devices of tests/conftest.py. docs/main_job.md has the table.
"""

import pytest

from experiments import configs
from experiments.configs import calculator
from rlagents import pipeline


def _smoke(**dotted):
  overrides = {key.replace("__", "."): value for key, value in dotted.items()}
  return configs.with_overrides(calculator.get_config("smoke").to_dict(), overrides)


REFUSED = [
    ({"task": "no_such_suite"}, "unknown task 'no_such_suite'; registered: bugfix, calculator, "
     "codefix, keydoor, retrieval"),
    ({"task": "no_such_module_xyz:suite"}, "module 'no_such_module_xyz' does not import"),
    ({"task": "json:no_such_factory"}, "json has no callable 'no_such_factory'"),
    ({"algorithm": "a2c"}, "algorithm must be one of dpo, grpo, grpo_dyna, grpo_jit, "),
    ({"algorithm": "sft"}, "algorithm must be one of"),
    ({"algorithm": "ppo", "rollout_mode": "jit"}, "rollout_mode='jit' runs GRPO steps in one "
     "program; algorithm='ppo'"),
    ({"rollout_mode": "jit", "init_from": "/some/checkpoint"}, "init_from='/some/checkpoint' "
     "brings another tokenizer"),
    ({"rollout_mode": "jit", "lora__rank": 4}, "lora.rank=4 needs rollout_mode='host'"),
    ({"rollout_mode": "jit", "diversity_weight": 0.2}, "diversity_weight=0.2 compares"),
    ({"rollout_mode": "jit", "soft_reward__weight": 0.5}, "soft_reward.weight=0.5: the learned "
     "reward is scored on the host"),
    ({"algorithm": "ppo", "lora__rank": 4}, "algorithm='ppo' trains all parameters"),
    ({"algorithm": "ppo", "diversity_weight": 0.2}, "algorithm='ppo' samples one episode per "
     "task"),
    ({"algorithm": "ppo", "soft_reward__normalization": "group"},
     "soft_reward.normalization='group' needs groups"),
    ({"algorithm": "dpo", "soft_reward__weight": 0.5}, "algorithm='dpo' has no online reward"),
    ({"algorithm": "kto", "diversity_weight": 0.1}, "algorithm='kto' has none"),
    ({"algorithm": "dpo", "lora__rank": 2}, "algorithm='dpo' trains all parameters"),
    ({"algorithm": "kto", "preferences__preference_file": "/p.jsonl"},
     "preferences.preference_file is read by algorithm='dpo', not 'kto'"),
    ({"preferences__feedback_file": "/f.jsonl"},
     "preferences.feedback_file is read by algorithm='kto' only; algorithm='grpo' would "
     "ignore it"),
    ({"scripted_policy": "pad"}, "task='calculator' trains a policy"),
    ({"task": "codefix", "sandbox_isolation": "none"},
     "sandbox_isolation must be 'kernel' or 'hook' (weaker, explicit), got 'none'"),
    ({"task": "retrieval", "algorithm": "ppo"}, "task='retrieval' trains with algorithm='grpo'"),
    ({"task": "retrieval", "soft_reward__weight": 0.5}, "task='retrieval' has no learned reward"),
    ({"sft__num_demonstrations": 10_000}, "sft.num_demonstrations (10000) exceeds "
     "tasks.num_train (600)"),
    ({"proxy_drift__window": 5}, "proxy_drift.window=5 needs that many evaluation points but "
     "grpo makes 4 (16 steps, eval.every_steps=4)"),
    ({"mesh__data": 3}, "mesh: MeshConfig(data=3, fsdp=1) does not fit 8 devices"),
    ({"sft__batch_size": 12}, "sft.batch_size = 12 does not split over the 8 devices"),
    ({"grpo__microbatch_size": 4, "grpo__prompts_per_step": 8},
     "grpo.microbatch_size = 4 does not split over the 8 devices"),
    ({"algorithm": "ppo", "ppo__episodes_per_step": 12, "ppo__num_minibatches": 1},
     "ppo.episodes_per_step / ppo.num_minibatches = 12 does not split"),
]


@pytest.mark.parametrize("overrides, message", REFUSED,
                         ids=[",".join(o) for o, _ in REFUSED])
def test_a_combination_that_cannot_run_is_refused_in_one_line(overrides, message):
  with pytest.raises(pipeline.ConfigError) as info:
    pipeline.config_from_dict(_smoke(**overrides))
  assert message in str(info.value)
  assert "\n" not in str(info.value)


@pytest.mark.parametrize("overrides", [
    {}, {"algorithm": "ppo"}, {"algorithm": "dpo"}, {"algorithm": "kto"},
    {"rollout_mode": "jit"}, {"lora__rank": 4}, {"diversity_weight": 0.1},
    {"soft_reward__weight": 0.5}, {"mesh__data": 2, "mesh__fsdp": 4},
    {"task": "codefix"}, {"task": "codefix", "sandbox_isolation": "hook"},
    {"task": "retrieval", "scripted_policy": "pad"},
    {"eval__every_steps": 0}, {"algorithm": "dpo", "preferences__preference_file": "/p.jsonl"},
], ids=lambda o: ",".join(o) or "smoke")
def test_combinations_that_run_are_accepted(overrides):
  pipeline.config_from_dict(_smoke(**overrides))


def test_a_config_built_directly_is_checked_by_the_job(tmp_path):
  config = pipeline.AgentJobConfig(algorithm="a2c")
  with pytest.raises(pipeline.ConfigError, match="algorithm must be one of"):
    pipeline.train_and_evaluate(config, str(tmp_path / "run"))
  assert not (tmp_path / "run").exists()
