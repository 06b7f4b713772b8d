"""The key-door suite through the main job, and GRPO with imagined episodes (`grpo_dyna`):
imagined episodes marked in the audit log, the real ones replayed, the exploitation alarm."""

import dataclasses
import os

import jax
import numpy as np
import pytest

from experiments.configs import keydoor
from rlagents import episodes
from rlagents import guardrails
from rlagents import hf
from rlagents import learners
from rlagents import networks
from rlagents import pipeline
from rlagents import rollout
from rlagents import world_models
from rlagents.metrics import read_csv
from rlagents.pipeline.phases import grpo_dyna
from rlagents.tasks import keydoor as keydoor_tasks

TOKENIZER = hf.build_char_tokenizer()


def _values(**overrides):
  values = keydoor.get_config("smoke").to_dict()
  for key, value in overrides.items():
    node = values
    *path, last = key.split("__")
    for part in path:
      node = node[part]
    node[last] = value
  return values


def test_grpo_dyna_needs_the_keydoor_suite_and_a_valid_fraction():
  with pytest.raises(pipeline.ConfigError, match="task='calculator' has none"):
    pipeline.config_from_dict(_values(task="calculator", algorithm="grpo_dyna"))
  with pytest.raises(pipeline.ConfigError, match=r"imagination.fraction must be in \[0, 1\]"):
    pipeline.config_from_dict(_values(algorithm="grpo_dyna", imagination__fraction=1.5))
  pipeline.config_from_dict(_values(algorithm="grpo_dyna"))
  pipeline.config_from_dict(_values(rollout_mode="jit"))  # the key-door world has a JAX env


@pytest.mark.slow
def test_grpo_dyna_marks_imagined_episodes_and_replays_the_real_ones(tmp_path):
  config = pipeline.config_from_dict(_values(
      algorithm="grpo_dyna", grpo__num_steps=2, eval__every_steps=1, proxy_drift__window=2,
      imagination__fit_steps=200, imagination__refit_every=1, imagination__refit_steps=10,
      imagination__d_model=48, imagination__uncertainty_threshold=1e9))
  workdir = str(tmp_path / "run")
  report = pipeline.train_and_evaluate(config, workdir)
  records = guardrails.read_audit_log(os.path.join(workdir, "audit", "episodes.jsonl"))
  train = [r for r in records if r["phase"] == "grpo_dyna"]
  imagined = [r for r in train if r.get("imagined")]
  group = config.grpo.group_size
  # Half of each step's groups were imagined (no group was routed: the threshold is huge).
  assert len(imagined) == len(train) - len(imagined) == config.grpo.num_steps * 2 * group
  rows = read_csv(os.path.join(workdir, "metrics.csv"))
  names = {r["name"] for r in rows}
  assert {"imagination/groups", "imagination/gap", "real/tool_calls"} <= names
  assert report["after_sft"]["real_tool_calls"] > 0
  replayed, problems = pipeline.replay_workdir(workdir)
  assert problems == [] and replayed == len(records) - len(imagined)


def test_the_gap_alarm_reads_both_directions():
  # 0.6 in imagination against 0.3 in reality: the model flatters the policy by 0.3 > 0.2.
  assert grpo_dyna.imagination_gap(0.3, 0.6, margin=0.2) == pytest.approx((0.3, True))
  # Imagination 0.1 below reality: within the margin, no alarm.
  assert grpo_dyna.imagination_gap(0.5, 0.4, margin=0.2) == pytest.approx((-0.1, False))
  assert grpo_dyna.imagination_gap(0.9, 0.1, margin=0.2)[1]


@pytest.mark.slow
def test_a_simulator_fit_on_shuffled_observations_raises_the_alarm_the_honest_one_does_not(
    tmp_path):
  """The phase's calibration check (`calibration_success`, `imagination_gap`) on one policy:
  a simulator fit on the real transitions reproduces its success; one fit on the same
  transitions with their outcomes (observation, effect, goal) shuffled among them does not."""
  worlds_config = keydoor_tasks.KeyDoorSuiteConfig(
      width=5, height=3, ood_width=6, ood_height=4, min_calls=3, max_calls=7, num_train=8,
      num_heldout=2, num_heldout_ood=2, num_calibration=8, slip_rate=0.0, malformed_rate=0.0,
      forget_key_rate=0.0)
  worlds = keydoor_tasks.generate_suite(worlds_config)["calibration"]
  demos = keydoor_tasks.run_expert_episodes(
      worlds, toolbox_for=keydoor_tasks.toolbox_for, rng=np.random.default_rng(0),
      max_tool_calls=10, config=worlds_config)
  # A policy that has learned these worlds by heart (the check is about the simulator).
  length = 256
  model = networks.Transformer(networks.TransformerConfig(
      vocab_size=len(TOKENIZER), d_model=48, n_layers=2, n_heads=2, n_kv_heads=1, d_ff=96,
      max_len=length))
  params = model.init(jax.random.PRNGKey(0), np.zeros((1, length), np.int32),
                      np.arange(length)[None])
  state = learners.create_train_state(model, params, learners.OptimizerConfig(
      learning_rate=3e-3))
  sft_step = learners.make_sft_step()
  data = episodes.stack_episodes(demos, TOKENIZER, length)
  for _ in range(200):
    state, _ = sft_step(state, {"tokens": data.tokens, "loss_mask": data.loss_mask})
  # The simulator's data as the phase reads it: real transitions from the audit log.
  path = str(tmp_path / "episodes.jsonl")
  guardrails.AuditLog(path, resume_step=None).write(
      demos, phase="sft_demonstration", step=0, policy="expert", suite="keydoor")
  honest = world_models.transitions_from_audit(path)
  order = np.random.default_rng(0).permutation(len(honest))
  shuffled = [dataclasses.replace(t, next_observation=honest[j].next_observation,
                                  effect=honest[j].effect, at_goal=honest[j].at_goal)
              for t, j in zip(honest, order)]
  rollout_config = rollout.RolloutConfig(batch_size=8, max_length=length, max_tool_calls=10,
                                         max_segment_tokens=16)
  real_env = keydoor_tasks.jax_env(worlds, TOKENIZER, rollout_config, worlds_config)
  sim_model = networks.Transformer(world_models.text_world_model_config(len(TOKENIZER),
                                                                          d_model=48))
  gaps = {}
  for name, transitions in (("honest", honest), ("shuffled", shuffled)):
    sim_params, _ = world_models.fit_text_world_model(
        sim_model, world_models.encode_text_transitions(transitions, TOKENIZER), steps=300)
    sim_env = world_models.TextWorldModelEnv.wrap(real_env, sim_model, sim_params, TOKENIZER)
    real, imagined = grpo_dyna.calibration_success(model, state.params, real_env, sim_env,
                                                   rollout_config, jax.random.PRNGKey(1))
    assert real >= 0.75  # the policy solves these worlds in reality
    gaps[name] = grpo_dyna.imagination_gap(real, imagined, margin=0.2)
  assert not gaps["honest"][1], gaps
  assert gaps["shuffled"][1], gaps
