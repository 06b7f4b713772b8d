"""Loading tiny random transformers Llama / Qwen2 checkpoints, exporting back, and bad input.

The reference is PyTorch transformers itself (a test-only dependency): every test builds a tiny
random model there, saves it, and compares what rlagents computes from the saved directory.
"""

import dataclasses
import functools
import json
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import safetensors.numpy
import torch
import transformers

from rlagents import hf
from rlagents import networks
from rlagents import sampling

VOCAB = 64  # the character tokenizer has 60 tokens
PROMPT = "12+34=?"


def _hf_config(model_type, *, tie, n_kv_heads, rope_parameters=None):
  cls = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config}[model_type]
  extra = {"rope_parameters": rope_parameters} if rope_parameters else {}
  return cls(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=n_kv_heads, intermediate_size=64, max_position_embeddings=64,
             rms_norm_eps=1e-5, tie_word_embeddings=tie, bos_token_id=1, eos_token_id=2,
             pad_token_id=0, **extra)


def _build(path, model_type, *, tie, n_kv_heads, rope_parameters=None, max_shard_size=None):
  """Saves a random model (every weight, bias and norm scale non-trivial) and the tokenizer."""
  torch.manual_seed(0)
  model = transformers.AutoModelForCausalLM.from_config(
      _hf_config(model_type, tie=tie, n_kv_heads=n_kv_heads, rope_parameters=rope_parameters))
  with torch.no_grad():
    for name, weight in model.named_parameters():
      if "norm" in name:
        weight.uniform_(0.5, 1.5)
      else:
        weight.normal_(0.0, 0.2)
  model.eval()
  kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
  model.save_pretrained(path, **kwargs)
  hf.build_char_tokenizer().save_pretrained(path)
  return model


CASES = {
    # name: (model_type, tie, n_kv_heads, rope_parameters)
    "llama_gqa_untied": ("llama", False, 2, None),
    "llama_mha_tied": ("llama", True, 4, None),
    "llama3_rope": ("llama", False, 2, {
        "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 16}),
    "qwen2_gqa_tied": ("qwen2", True, 2, {"rope_type": "default", "rope_theta": 1e6}),
    "qwen2_gqa_untied": ("qwen2", False, 1, None),
}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
  """name -> (directory, torch model), built lazily once per module."""
  root = tmp_path_factory.mktemp("checkpoints")

  @functools.cache
  def get(name, max_shard_size=None):
    model_type, tie, n_kv_heads, rope = CASES[name]
    path = str(root / f"{name}_{max_shard_size}")
    model = _build(path, model_type, tie=tie, n_kv_heads=n_kv_heads, rope_parameters=rope,
                   max_shard_size=max_shard_size)
    return path, model

  return get


def _tokens(batch=2, length=12):
  rng = np.random.default_rng(1)
  return rng.integers(3, 60, size=(batch, length)).astype(np.int32)


def _torch_logits(model, tokens):
  with torch.no_grad():
    return model(torch.tensor(tokens, dtype=torch.long)).logits.numpy()


def _our_logits(loaded, tokens):
  model = networks.Transformer(loaded.config)
  positions = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
  logits, _ = jax.jit(model.apply)(loaded.params, jnp.asarray(tokens), positions)
  return np.asarray(logits)


@pytest.mark.parametrize("name", sorted(CASES))
def test_logits_match_transformers(checkpoints, name):
  path, torch_model = checkpoints(name)
  loaded = hf.load_pretrained(path)
  model_type, tie, n_kv_heads, rope = CASES[name]
  assert loaded.model_type == model_type
  assert loaded.config.tie_embeddings == tie and loaded.config.n_kv_heads == n_kv_heads
  assert loaded.config.attention_bias == (model_type == "qwen2")
  assert (loaded.config.rope_scaling is not None) == (name == "llama3_rope")
  tokens = _tokens()
  expected = _torch_logits(torch_model, tokens)
  assert np.abs(expected).max() > 1.0  # a model whose logits are all ~0 would prove nothing
  np.testing.assert_allclose(_our_logits(loaded, tokens), expected, atol=1e-4, rtol=0)


def test_llama3_scaling_changes_the_logits(checkpoints):
  """The scaled frequencies matter here: plain RoPE on the same weights gives other logits."""
  path, torch_model = checkpoints("llama3_rope")
  loaded = hf.load_pretrained(path)
  tokens = _tokens(length=32)
  plain = hf.Pretrained(config=networks.TransformerConfig(**{
      **loaded.config.__dict__, "rope_scaling": None}), params=loaded.params,
                        tokenizer=loaded.tokenizer, model_type="llama")
  expected = _torch_logits(torch_model, tokens)
  np.testing.assert_allclose(_our_logits(loaded, tokens), expected, atol=1e-4, rtol=0)
  assert np.abs(_our_logits(plain, tokens) - expected).max() > 1e-2


def test_sharded_checkpoint_loads_the_same(checkpoints):
  path, torch_model = checkpoints("qwen2_gqa_untied", max_shard_size="20KB")
  index = json.load(open(os.path.join(path, "model.safetensors.index.json")))
  assert len(set(index["weight_map"].values())) > 1
  tokens = _tokens()
  np.testing.assert_allclose(_our_logits(hf.load_pretrained(path), tokens),
                             _torch_logits(torch_model, tokens), atol=1e-4, rtol=0)


def test_bfloat16_parameters(checkpoints):
  path, torch_model = checkpoints("qwen2_gqa_tied")
  loaded = hf.load_pretrained(path, param_dtype="bfloat16", dtype="bfloat16")
  leaves = jax.tree_util.tree_leaves(loaded.params)
  assert {leaf.dtype for leaf in leaves} == {jnp.dtype(jnp.bfloat16)}
  tokens = _tokens()
  expected = _torch_logits(torch_model, tokens)
  got = _our_logits(loaded, tokens)
  # bfloat16 keeps ~3 significant digits: close to, but not equal to, the float32 logits.
  assert np.abs(got - expected).max() < 0.1 * np.abs(expected).max()
  assert np.abs(got - expected).max() > 1e-4


@pytest.mark.parametrize("name", ["llama_gqa_untied", "qwen2_gqa_tied", "llama3_rope"])
def test_export_reloads_in_transformers(checkpoints, tmp_path, name):
  path, torch_model = checkpoints(name)
  loaded = hf.load_pretrained(path)
  # A trained policy differs from the checkpoint: perturb every parameter.
  params = jax.tree_util.tree_map(lambda p: p * 1.1 + 0.01, loaded.params)
  out = str(tmp_path / "export")
  hf.export_pretrained(params, loaded.config, loaded.tokenizer, out)
  reloaded = transformers.AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
  reloaded.eval()
  assert type(reloaded) is type(torch_model)
  tokens = _tokens()
  ours = _our_logits(hf.Pretrained(config=loaded.config, params=params,
                                   tokenizer=loaded.tokenizer, model_type=loaded.model_type),
                     tokens)
  np.testing.assert_allclose(_torch_logits(reloaded, tokens), ours, atol=1e-4, rtol=0)
  assert np.abs(ours - _torch_logits(torch_model, tokens)).max() > 1e-2
  tokenizer = transformers.AutoTokenizer.from_pretrained(out, local_files_only=True)
  assert tokenizer(PROMPT)["input_ids"] == loaded.tokenizer(PROMPT)["input_ids"]


def test_value_head_loads_at_zero_and_is_left_out_of_the_export(checkpoints, tmp_path):
  path, torch_model = checkpoints("llama_gqa_untied")
  loaded = hf.load_pretrained(path, value_head=True)
  assert loaded.config.value_head
  model = networks.Transformer(loaded.config)
  tokens = _tokens()
  positions = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
  logits, values = model.apply(loaded.params, jnp.asarray(tokens), positions,
                               method=model.logits_and_values)
  np.testing.assert_allclose(np.asarray(logits), _torch_logits(torch_model, tokens), atol=1e-4,
                             rtol=0)
  np.testing.assert_array_equal(values, 0.0)
  # As after PPO: a trained value head, which a causal-LM checkpoint has no place for.
  params = jax.tree_util.tree_map_with_path(
      lambda p, x: x + 1.0 if "value_head" in jax.tree_util.keystr(p) else x, loaded.params)
  out = str(tmp_path / "export")
  hf.export_pretrained(params, loaded.config, loaded.tokenizer, out)
  reloaded = transformers.AutoModelForCausalLM.from_pretrained(out, local_files_only=True).eval()
  np.testing.assert_allclose(_torch_logits(reloaded, tokens), np.asarray(logits), atol=1e-4,
                             rtol=0)
  assert hf.load_pretrained(out).config == dataclasses.replace(loaded.config, value_head=False)


@pytest.mark.parametrize("name", ["llama_gqa_untied", "qwen2_gqa_tied"])
def test_greedy_generation_matches_transformers(checkpoints, name):
  path, torch_model = checkpoints(name)
  loaded = hf.load_pretrained(path)
  prompt = _tokens(batch=3, length=8)
  new = 16
  with torch.no_grad():
    expected = torch_model.generate(
        torch.tensor(prompt, dtype=torch.long), max_new_tokens=new, min_new_tokens=new,
        do_sample=False, eos_token_id=None, pad_token_id=0).numpy()
  buffer = np.zeros((3, 8 + new), np.int32)
  buffer[:, :8] = prompt
  result = sampling.generate_segment(
      loaded.params, jnp.asarray(buffer), jnp.full((3,), 8), jnp.ones((3,), bool),
      jax.random.key(0), model=networks.Transformer(loaded.config), max_new_tokens=new,
      stop_tokens=(), temperature=0.0)
  assert len(set(map(tuple, expected[:, 8:]))) > 1  # the rows differ, so batching is checked
  np.testing.assert_array_equal(np.asarray(result.tokens), expected)


# --- Bad input: each gives a CheckpointError naming the file or field. ---


@pytest.fixture
def broken(checkpoints, tmp_path):
  """A fresh copy of a checkpoint to break."""

  def copy(name="llama_gqa_untied", max_shard_size=None):
    source, _ = checkpoints(name, max_shard_size)
    target = str(tmp_path / "broken")
    shutil.copytree(source, target)
    return target

  return copy


def _edit_json(path, edit):
  with open(path) as f:
    data = json.load(f)
  edit(data)
  with open(path, "w") as f:
    json.dump(data, f)


def test_missing_config_is_named(broken):
  path = broken()
  os.remove(os.path.join(path, "config.json"))
  with pytest.raises(hf.CheckpointError, match=r"config\.json: missing"):
    hf.load_pretrained(path)


def test_unsupported_model_type_is_named(broken):
  path = broken()
  _edit_json(os.path.join(path, "config.json"), lambda c: c.update(model_type="gpt2"))
  with pytest.raises(hf.CheckpointError, match=r"config\.json: model_type 'gpt2' is not supported"):
    hf.load_pretrained(path)


def test_unsupported_rope_type_is_named(broken):
  path = broken()
  _edit_json(os.path.join(path, "config.json"), lambda c: c.update(rope_parameters={
      "rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}))
  with pytest.raises(hf.CheckpointError, match=r"rope_type 'linear' is not supported"):
    hf.load_pretrained(path)


def test_llama3_rope_missing_a_key_is_named(broken):
  # transformers itself rejects the config while reading it; that is a CheckpointError too.
  path = broken("llama3_rope")
  _edit_json(os.path.join(path, "config.json"),
             lambda c: c["rope_parameters"].pop("low_freq_factor"))
  with pytest.raises(hf.CheckpointError, match=r"config\.json: .*low_freq_factor") as error:
    hf.load_pretrained(path)
  assert "\n" not in str(error.value)


def test_missing_weights_file_is_named(broken):
  path = broken()
  os.remove(os.path.join(path, "model.safetensors"))
  with pytest.raises(hf.CheckpointError, match=r"no model\.safetensors or model\.safetensors"):
    hf.load_pretrained(path)


def test_missing_shard_is_named(broken):
  path = broken("qwen2_gqa_untied", "20KB")
  shard = sorted(json.load(open(os.path.join(path, "model.safetensors.index.json")))
                 ["weight_map"].values())[-1]
  os.remove(os.path.join(path, shard))
  with pytest.raises(hf.CheckpointError, match=f"{shard}: shard listed in"):
    hf.load_pretrained(path)


def _rewrite_weights(path, edit):
  file = os.path.join(path, "model.safetensors")
  tensors = safetensors.numpy.load_file(file)
  edit(tensors)
  safetensors.numpy.save_file(tensors, file, metadata={"format": "pt"})


def test_missing_tensor_is_named(broken):
  path = broken()
  _rewrite_weights(path, lambda t: t.pop("model.layers.1.mlp.up_proj.weight"))
  with pytest.raises(hf.CheckpointError, match=r"model\.layers\.1\.mlp\.up_proj\.weight.*missing"):
    hf.load_pretrained(path)


def test_misshaped_tensor_is_named(broken):
  path = broken()
  _rewrite_weights(path, lambda t: t.update({
      "model.layers.0.self_attn.k_proj.weight": np.zeros((32, 32), np.float32)}))
  with pytest.raises(hf.CheckpointError,
                     match=r"model\.safetensors: tensor model\.layers\.0\.self_attn\.k_proj\.weight "
                     r"has shape \[32, 32\], expected \[16, 32\]"):
    hf.load_pretrained(path)


def test_unexpected_tensor_is_named(broken):
  path = broken()
  _rewrite_weights(path, lambda t: t.update({
      "model.layers.2.mlp.up_proj.weight": np.zeros((64, 32), np.float32)}))
  with pytest.raises(hf.CheckpointError, match=r"unexpected tensor\(s\) \['model\.layers\.2"):
    hf.load_pretrained(path)


def test_tokenizer_without_eos_is_named(broken):
  path = broken()
  _edit_json(os.path.join(path, "tokenizer_config.json"), lambda c: c.pop("eos_token"))
  with pytest.raises(hf.CheckpointError, match=r"has no eos_token"):
    hf.load_pretrained(path)


def test_missing_tokenizer_is_named(broken):
  path = broken()
  for file in ("tokenizer.json", "tokenizer_config.json"):
    os.remove(os.path.join(path, file))
  with pytest.raises(hf.CheckpointError, match=r"no tokenizer could be loaded"):
    hf.load_pretrained(path)


def test_lora_merged_export_reloads_in_transformers(checkpoints, tmp_path):
  path, _ = checkpoints("qwen2_gqa_tied")
  loaded = hf.load_pretrained(path)
  lora = networks.LoraConfig(rank=2, targets=("q_proj", "v_proj", "up_proj"))
  adapters = networks.init_lora(jax.random.key(0), loaded.params, config=lora)
  # Trained adapters are non-zero: give lora_b values.
  adapters = jax.tree_util.tree_map(lambda x: x + 0.05, adapters)
  merged = networks.merge_lora(loaded.params, adapters, config=lora)
  out = str(tmp_path / "lora_export")
  hf.export_pretrained(merged, loaded.config, loaded.tokenizer, out)
  reloaded = transformers.AutoModelForCausalLM.from_pretrained(out, local_files_only=True).eval()
  tokens = _tokens()
  ours = _our_logits(hf.Pretrained(config=loaded.config, params=merged,
                                   tokenizer=loaded.tokenizer, model_type="qwen2"), tokens)
  np.testing.assert_allclose(_torch_logits(reloaded, tokens), ours, atol=1e-4, rtol=0)
  assert np.abs(ours - _our_logits(loaded, tokens)).max() > 1e-2
