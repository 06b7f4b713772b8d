"""DPO and KTO: on a toy preference set the loss falls and the implicit reward margin grows."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlagents import learners
from rlagents import networks
from rlagents.hf import tokenizer as tokenizer_lib
from rlagents.learners import dpo


def _toy(rng, n=64):
  pairs = []
  for _ in range(n):
    a = int(rng.integers(10))
    pairs.append(learners.PreferencePair(f"{a}=?", f"<answer>{a}</answer>",
                                         f"<answer>{(a + 1) % 10}</answer>"))
  return pairs


def _policy(tok):
  config = networks.TransformerConfig(vocab_size=len(tok), d_model=32, n_layers=1, n_heads=2,
                                      n_kv_heads=1, d_ff=64, max_len=32)
  model = networks.Transformer(config)
  params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32), jnp.arange(8)[None])
  return model, params


def test_dpo_loss_falls_and_margin_grows():
  rng = np.random.default_rng(0)
  tok = tokenizer_lib.build_char_tokenizer()
  model, ref_params = _policy(tok)
  config = learners.DPOConfig(num_steps=40, batch_size=16, beta=0.5,
                              optimizer=learners.OptimizerConfig(learning_rate=3e-3))
  data = learners.encode_pairs(_toy(rng), tok, 32)
  state = learners.create_train_state(model, jax.tree.map(jnp.copy, ref_params), config.optimizer)
  history = []
  state = dpo.train_offline(
      learners.make_dpo_step(config), state, ref_params, data, num_steps=config.num_steps,
      batch_size=config.batch_size, rng_for_step=lambda s: np.random.default_rng([0, s]),
      on_step=lambda step, _, m: history.append(jax.device_get(m)))
  # At the start the policy is the reference: loss log 2, margin 0.
  np.testing.assert_allclose(history[0]["dpo/dpo_loss"], np.log(2.0), atol=1e-4)
  np.testing.assert_allclose(history[0]["dpo/reward_margin"], 0.0, atol=1e-4)
  first = np.mean([h["dpo/dpo_loss"] for h in history[:5]])
  last = np.mean([h["dpo/dpo_loss"] for h in history[-5:]])
  assert last < 0.5 * first, (first, last)
  assert np.mean([h["dpo/reward_margin"] for h in history[-5:]]) > 1.0
  assert history[-1]["dpo/reward_accuracy"] == 1.0
  # The reference is untouched (frozen): its log-probs are what the first step saw.
  full = dpo.sequence_logprobs(model.apply, state.params, data["chosen_tokens"],
                               data["chosen_mask"])
  ref = dpo.sequence_logprobs(model.apply, ref_params, data["chosen_tokens"], data["chosen_mask"])
  assert float(jnp.mean(full - ref)) > 0  # the chosen answers became more likely


def test_kto_raises_desirable_and_lowers_undesirable():
  rng = np.random.default_rng(1)
  tok = tokenizer_lib.build_char_tokenizer()
  model, ref_params = _policy(tok)
  config = learners.DPOConfig(num_steps=40, batch_size=16, beta=0.5,
                              optimizer=learners.OptimizerConfig(learning_rate=3e-3))
  items = [learners.Feedback(p.prompt, c, good) for p in _toy(rng, 32)
           for c, good in ((p.chosen, True), (p.rejected, False))]
  data = learners.encode_feedback(items, tok, 32)
  state = learners.create_train_state(model, jax.tree.map(jnp.copy, ref_params), config.optimizer)
  history = []
  dpo.train_offline(
      learners.make_kto_step(config), state, ref_params, data, num_steps=config.num_steps,
      batch_size=config.batch_size, rng_for_step=lambda s: np.random.default_rng([1, s]),
      on_step=lambda step, _, m: history.append(jax.device_get(m)))
  np.testing.assert_allclose(history[0]["kto/kto_loss"], 0.5, atol=1e-4)  # 1 - sigmoid(0)
  assert history[-1]["kto/kto_loss"] < 0.4
  last = history[-1]
  assert last["kto/desirable_reward"] > 0 > last["kto/undesirable_reward"]


def test_config_errors():
  with pytest.raises(ValueError, match="dpo_variant"):
    learners.DPOConfig(dpo_variant="hinge")
  with pytest.raises(ValueError, match="beta"):
    learners.DPOConfig(beta=0.0)
