"""The main job with LoRA (`--config.lora.rank=...`): only adapters train, checkpoint and merge."""

import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.configs import calculator
from rlagents import checkpoint
from rlagents import hf
from rlagents import networks
from rlagents import pipeline
from rlagents.metrics import read_csv

_TARGETS = ("q_proj", "v_proj", "gate_proj", "up_proj", "down_proj")


def _lora_config(**lora):
  values = calculator.get_config("smoke").to_dict()
  values["lora"].update(rank=8, alpha=16.0, targets=_TARGETS, **lora)
  values["tasks"].update(num_train=128, num_heldout=16, num_heldout_ood=16, num_calibration=16)
  values["sft"].update(num_demonstrations=128, num_steps=40, batch_size=16)
  values["sft"]["optimizer"].update(learning_rate=1e-2, warmup_steps=0, decay_steps=0)
  values["grpo"].update(num_steps=2, prompts_per_step=4, group_size=4, microbatch_size=16)
  values["rollout"].update(batch_size=16)
  values["eval"].update(every_steps=0, curve_tasks=16)
  values["checkpoint_every"] = 40
  values["log_every"] = 10
  return pipeline.config_from_dict(values)


# The run takes about a minute on 2 idle cores (two phases compiled with LoRA).
@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
  config = _lora_config()
  workdir = str(tmp_path_factory.mktemp("lora") / "run")
  report = pipeline.train_and_evaluate(config, workdir)
  return config, workdir, report


def _base_params(config):
  """The job's frozen base: the built-in model initialised from the seed."""
  model_config = dataclasses.replace(config.model, vocab_size=len(hf.build_char_tokenizer()))
  length = config.rollout.max_length
  return networks.Transformer(model_config).init(
      jax.random.PRNGKey(config.seed), jnp.zeros((1, length), jnp.int32),
      jnp.arange(length, dtype=jnp.int32)[None]), model_config


def _restore(workdir, phase):
  checkpointer = checkpoint.Checkpointer(os.path.join(workdir, "checkpoints", phase))
  tree = checkpointer.restore(checkpointer.latest_step())[0]
  checkpointer.close()
  return tree


def test_config_fields_are_validated():
  assert pipeline.config_from_dict({"lora": {"rank": 4, "targets": "q_proj, o_proj"}}).lora \
      == pipeline.LoraSettings(rank=4, targets=("q_proj", "o_proj"))
  with pytest.raises(pipeline.ConfigError, match=r"lora.*unknown projections \['qkv'\]"):
    pipeline.config_from_dict({"lora": {"rank": 4, "targets": ["qkv"]}})
  with pytest.raises(pipeline.ConfigError, match=r"lora.rank must be an int >= 0"):
    pipeline.config_from_dict({"lora": {"rank": -1}})


@pytest.mark.slow
def test_checkpoints_hold_only_the_adapters(lora_run):
  _, workdir, _ = lora_run
  for phase in ("sft", "grpo"):
    params = _restore(workdir, phase)["params"]
    names = {tuple(k.key for k in path)[-2:] for path, _ in
             jax.tree_util.tree_leaves_with_path(params)}
    projections = {name for name, _ in names}
    assert projections == set(_TARGETS), phase
    assert {leaf for _, leaf in names} == {"lora_a", "lora_b"}, phase


@pytest.mark.slow
def test_only_adapters_change_and_learning_happens(lora_run):
  config, workdir, _ = lora_run
  nll = {r["step"]: r["value"] for r in read_csv(os.path.join(workdir, "metrics.csv"))
         if r["name"] == "sft/nll"}
  # The adapters alone fit the demonstrations: the loss falls at every logged step.
  assert nll[10] > nll[20] > nll[30] > nll[40] and nll[40] < 0.9 * nll[10], nll

  base, model_config = _base_params(config)
  adapters = _restore(workdir, "grpo")["params"]
  # Every lora_b has moved off its zero start.
  assert all(np.abs(np.asarray(b)).max() > 0 for path, b in jax.tree_util.tree_leaves_with_path(
      adapters) if path[-1].key == "lora_b")
  exported = hf.load_pretrained(os.path.join(workdir, "export"), max_len=model_config.max_len)
  assert exported.config == model_config
  lora = config.lora.lora_config()
  want = networks.merge_lora(base, adapters, config=lora)
  changed = 0
  for (path, got), want_leaf, base_leaf in zip(
      jax.tree_util.tree_leaves_with_path(exported.params), jax.tree.leaves(want),
      jax.tree.leaves(base)):
    keys = tuple(k.key for k in path)
    # The export is the merge of the frozen base and the trained adapters.
    np.testing.assert_allclose(got, want_leaf, rtol=1e-6, atol=1e-6, err_msg=str(keys))
    if keys[-1] == "kernel" and keys[-2] in _TARGETS:
      changed += not np.allclose(got, base_leaf, atol=1e-4)
    else:  # embeddings, norms, untargeted projections: exactly the base.
      np.testing.assert_array_equal(got, base_leaf, err_msg=str(keys))
  assert changed == len(_TARGETS) * config.model.n_layers
