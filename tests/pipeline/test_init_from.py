"""The main job started from a local Hugging Face checkpoint (`AgentJobConfig.init_from`)."""

import json
import os

import jax
import numpy as np
import pytest
import tokenizers
from tokenizers import decoders
from tokenizers import models
import torch
import transformers

from experiments.configs import calculator
from rlagents import checkpoint
from rlagents import hf
from rlagents import pipeline
from rlagents.metrics import read_csv
from rlagents.pipeline import _policy_init


def _save_llama(path, tokenizer, vocab_size=64):
  torch.manual_seed(0)
  config = transformers.LlamaConfig(
      vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
      num_key_value_heads=2, intermediate_size=64, max_position_embeddings=128,
      tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0)
  transformers.AutoModelForCausalLM.from_config(config).save_pretrained(path)
  tokenizer.save_pretrained(path)
  return str(path)


@pytest.fixture(scope="module")
def char_checkpoint(tmp_path_factory):
  """A tiny random Llama with the character tokenizer, which has every format marker."""
  return _save_llama(tmp_path_factory.mktemp("llama"), hf.build_char_tokenizer())


def _tokenizer_without_markers():
  """Characters plus BOS/EOS/PAD/UNK only: `<call>` would be six character tokens."""
  specials = ["<pad>", "<bos>", "<eos>", "<unk>"]
  vocab = {t: i for i, t in enumerate(specials + list(hf.CHARACTERS + "<>/"))}
  backend = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
  backend.decoder = decoders.Fuse()
  backend.add_special_tokens([tokenizers.AddedToken(t, special=True) for t in specials])
  return transformers.PreTrainedTokenizerFast(
      tokenizer_object=backend, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
      unk_token="<unk>")


def _config(init_from, **model):
  values = calculator.get_config("smoke").to_dict()
  values["init_from"] = init_from
  values["model"].update(model)
  return pipeline.config_from_dict(values)


def test_policy_is_the_checkpoint(char_checkpoint):
  config = _config(char_checkpoint)
  policy = _policy_init.initial_policy(config.model, config.init_from)
  loaded = hf.load_pretrained(char_checkpoint, max_len=config.model.max_len)
  # The checkpoint's architecture (32 wide, untied), not the built-in model's (128, tied).
  assert policy.model_config == loaded.config
  assert policy.model_config.d_model == 32 and not policy.model_config.tie_embeddings
  assert policy.model_config.max_len == config.model.max_len
  for got, want in zip(jax.tree.leaves(policy.params), jax.tree.leaves(loaded.params)):
    np.testing.assert_array_equal(got, want)
  assert policy.tokenizer.get_vocab() == loaded.tokenizer.get_vocab()


def test_tokenizer_without_the_format_markers_is_refused(tmp_path):
  path = _save_llama(tmp_path / "no_markers", _tokenizer_without_markers())
  with pytest.raises(pipeline.JobError,
                     match=r"no_markers: the tokenizer lacks the calculator format's marker "
                     r"token\(s\) \['<call>', '</call>', '<obs>', '</obs>', '<answer>', "
                     r"'</answer>'\]"):
    pipeline.train_and_evaluate(_config(path), str(tmp_path / "run"))


def test_a_broken_checkpoint_is_reported_with_its_file(char_checkpoint, tmp_path):
  with pytest.raises(pipeline.JobError, match=r"init_from: .* is not a directory"):
    pipeline.train_and_evaluate(_config(str(tmp_path / "nowhere")), str(tmp_path / "run"))
  config = json.load(open(os.path.join(char_checkpoint, "config.json")))
  broken = tmp_path / "broken"
  broken.mkdir()
  json.dump({**config, "model_type": "mistral"}, open(broken / "config.json", "w"))
  with pytest.raises(pipeline.JobError,
                     match=r"init_from: .*broken/config\.json: model_type 'mistral'"):
    pipeline.train_and_evaluate(_config(str(broken)), str(tmp_path / "run2"))


@pytest.mark.slow
def test_smoke_job_runs_from_a_checkpoint(char_checkpoint, tmp_path):
  """The smoke job, shortened, from the saved Llama: SFT and GRPO fine-tune its weights."""
  values = calculator.get_config("smoke").to_dict()
  values["init_from"] = char_checkpoint
  values["tasks"].update(num_train=64, num_heldout=16, num_heldout_ood=16, num_calibration=16)
  values["sft"].update(num_demonstrations=64, num_steps=20, batch_size=16)
  values["sft"]["optimizer"].update(learning_rate=1e-2, warmup_steps=0, decay_steps=0)
  values["grpo"].update(num_steps=2, prompts_per_step=4, group_size=4, microbatch_size=16)
  values["rollout"].update(batch_size=16)
  values["eval"].update(every_steps=0, curve_tasks=16)
  values["checkpoint_every"] = 20
  values["log_every"] = 10
  config = pipeline.config_from_dict(values)
  workdir = str(tmp_path / "run")
  report = pipeline.train_and_evaluate(config, workdir)

  assert 0.0 <= report["splits"]["heldout"]["grpo"]["success"] <= 1.0
  saved = transformers.AutoTokenizer.from_pretrained(os.path.join(workdir, "tokenizer"))
  assert saved.get_vocab() == hf.build_char_tokenizer().get_vocab()
  nll = {r["step"]: r["value"] for r in read_csv(os.path.join(workdir, "metrics.csv"))
         if r["name"] == "sft/nll"}
  assert nll[20] < nll[10]
  # The final policy has the checkpoint's architecture (32 wide, untied LM head), and every
  # weight has moved away from the checkpoint's.
  grpo = checkpoint.Checkpointer(os.path.join(workdir, "checkpoints", "grpo"))
  final = grpo.restore(grpo.latest_step())[0]["params"]
  grpo.close()
  base = hf.load_pretrained(char_checkpoint, max_len=128).params
  assert jax.tree.structure(final) == jax.tree.structure(base)
  assert final["params"]["lm_head"]["kernel"].shape == (32, 64)
  for got, start in zip(jax.tree.leaves(final), jax.tree.leaves(base)):
    assert got.shape == start.shape and np.any(np.asarray(got) != np.asarray(start))
