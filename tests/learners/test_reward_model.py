"""Reward model: learns a synthetic preference; preference files report bad lines by number."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlagents import learners
from rlagents import networks
from rlagents.hf import tokenizer as tokenizer_lib
from rlagents.learners import _preference_data


def _write(path, lines):
  path.write_text("\n".join(json.dumps(l) if not isinstance(l, str) else l for l in lines) + "\n")
  return str(path)


def test_loads_pairs_and_ranked_lists(tmp_path):
  path = _write(tmp_path / "p.jsonl", [
      {"prompt": "1+1=?", "chosen": "<answer>2</answer>", "rejected": "<answer>3</answer>"},
      {"prompt": "2+2=?", "ranked": ["<answer>4</answer>", "<answer>5</answer>", "x"]},
  ])
  pairs = learners.load_preferences(path)
  assert [(p.prompt, p.chosen, p.rejected) for p in pairs] == [
      ("1+1=?", "<answer>2</answer>", "<answer>3</answer>"),
      ("2+2=?", "<answer>4</answer>", "<answer>5</answer>"),
      ("2+2=?", "<answer>4</answer>", "x"),
      ("2+2=?", "<answer>5</answer>", "x")]


@pytest.mark.parametrize("bad, message", [
    ({"prompt": "a", "chosen": "b"}, r"p.jsonl:2: missing field 'rejected'"),
    ({"prompt": "a", "chosen": "  ", "rejected": "c"}, r"p.jsonl:2: field 'chosen' is an empty"),
    ({"prompt": "a", "ranked": ["b", ""]}, r"p.jsonl:2 \(ranked\[1\]\): .*empty completion"),
    ({"prompt": "a", "ranked": ["b"]}, r"p.jsonl:2: field 'ranked' must be a list of at least"),
    ("{not json", r"p.jsonl:2: invalid JSON"),
    ({"chosen": "b", "rejected": "c"}, r"p.jsonl:2: missing field 'prompt'"),
])
def test_bad_preference_lines_are_named(tmp_path, bad, message):
  good = {"prompt": "1+1=?", "chosen": "2", "rejected": "3"}
  path = _write(tmp_path / "p.jsonl", [good, bad])
  with pytest.raises(learners.PreferenceDataError, match=message):
    learners.load_preferences(path)


def test_bad_feedback_lines_are_named(tmp_path):
  path = _write(tmp_path / "f.jsonl", [{"prompt": "a", "completion": "b", "desirable": True},
                                       {"prompt": "a", "completion": "", "desirable": False}])
  with pytest.raises(learners.PreferenceDataError, match=r"f.jsonl:2: field 'completion' is an"):
    learners.load_feedback(path)
  path = _write(tmp_path / "g.jsonl", [{"prompt": "a", "completion": "b"}])
  with pytest.raises(learners.PreferenceDataError, match=r"g.jsonl:1: missing field 'desirable'"):
    learners.load_feedback(path)


def test_encoding_masks_the_prompt_and_observations():
  tok = tokenizer_lib.build_char_tokenizer()
  tokens, mask = _preference_data.encode(
      "1+1=?", "<call>calc(1+1)</call><obs>2</obs><answer>2</answer>", tok, 64)
  text_ids = tokens[:int((tokens != 0).sum())]
  decoded = [tok.decode([t]) for t in text_ids]
  kept = "".join(d for d, m in zip(decoded, mask) if m)
  assert kept == "<call>calc(1+1)</call><answer>2</answer>"
  assert "".join(decoded).startswith("<bos>1+1=?")


def _digit_pairs(n, rng):
  """Prompt: three digits. Chosen: an answer that repeats the first; rejected: another digit."""
  pairs = []
  for _ in range(n):
    a, b, c = rng.integers(10, size=3)
    wrong = (a + rng.integers(1, 10)) % 10
    pairs.append(learners.PreferencePair(f"{a}{b}{c}", f"<answer>{a}</answer>",
                                         f"<answer>{wrong}</answer>"))
  return pairs


def test_reward_model_learns_a_synthetic_preference():
  # The preference depends on both prompt and completion (the answer must repeat the prompt's
  # first digit), so the model must compare them; held-out pairs have prompts never trained on.
  rng = np.random.default_rng(0)
  tok = tokenizer_lib.build_char_tokenizer()
  config = networks.TransformerConfig(vocab_size=len(tok), d_model=64, n_layers=2, n_heads=4,
                                      n_kv_heads=2, d_ff=128, max_len=32)
  model = networks.Transformer(networks.reward_model_config(config))
  params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32), jnp.arange(8)[None])
  pairs = _digit_pairs(3000, rng)
  train, heldout = learners.reward_model.split_pairs(pairs, 0.2, rng)
  assert not {p.prompt for p in train} & {p.prompt for p in heldout}
  rm_config = learners.RewardModelConfig(
      num_steps=300, batch_size=64,
      optimizer=learners.OptimizerConfig(learning_rate=2e-3, warmup_steps=20))
  before = learners.pairwise_accuracy(model.apply, params,
                                      learners.encode_pairs(heldout, tok, 32))
  _, report = learners.train_reward_model(
      model, params, learners.encode_pairs(train, tok, 32), rm_config, rng=rng,
      heldout_data=learners.encode_pairs(heldout, tok, 32))
  assert before < 0.6  # zero-initialised head: every score ties
  assert report["heldout_accuracy"] > 0.9, report
