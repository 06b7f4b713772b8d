"""The log-probs the sampler records equal the learner's recomputation for the same weights.

Asynchronous training reweights by pi_old / mu, with mu the sampler's log-probs: this only means
something if, for the same weights, the sampler (a KV-cached decode, one token at a time, tool
observations appended between turns) and the learner (one causal forward pass over the whole
episode) give the same numbers. Measured on real multi-turn calculator episodes, float32.
"""

import jax
import numpy as np

from rlagents import episodes
from rlagents import hf
from rlagents import learners
from rlagents import networks
from rlagents import rollout
from rlagents import tasks
from rlagents import tools


def _max_logprob_difference(seed: int, temperature: float) -> tuple[float, int]:
  tokenizer = hf.build_char_tokenizer()
  config = networks.TransformerConfig(vocab_size=len(tokenizer), d_model=64, n_layers=2,
                                      n_heads=4, n_kv_heads=2, d_ff=128, max_len=128)
  model = networks.Transformer(config)
  params = model.init(jax.random.key(seed), np.zeros((1, 8), np.int32),
                      np.arange(8, dtype=np.int32)[None])
  suite = tasks.CalculatorSuiteConfig(seed=seed, num_train=16, num_heldout=4, num_heldout_ood=4,
                                      num_calibration=4, num_operands=2)
  task_list = tasks.generate_suite(suite)["train"][:16]
  rollout_config = rollout.RolloutConfig(batch_size=16, max_length=128, max_tool_calls=3,
                                         max_segment_tokens=24, temperature=temperature)
  batch = rollout.sample_episodes(
      params, task_list, sampler=rollout.make_sampler(model, tokenizer, rollout_config),
      tokenizer=tokenizer, toolbox=tools.ToolBox([tools.CalculatorTool(failure_rate=0.0)]),
      config=rollout_config, key=jax.random.key(seed + 1), rng=np.random.default_rng(seed))
  recomputed = np.asarray(jax.jit(learners.forward_logprobs, static_argnums=0)(
      model.apply, params, batch.tokens))
  mask = batch.loss_mask > 0
  # Untrained weights write calls now and then, so some episodes have observations in between.
  return float(np.abs(recomputed - batch.logprobs)[mask].max()), int(mask.sum())


def test_sampler_and_learner_logprobs_agree_within_1e5():
  difference, tokens = _max_logprob_difference(seed=0, temperature=1.0)
  assert tokens > 200
  assert difference <= 1e-5, difference
