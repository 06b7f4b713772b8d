"""A whole tool-use episode in one compiled program writes the host rollout's tokens."""

import jax
import numpy as np

from rlagents import envs
from rlagents import hf
from rlagents import networks
from rlagents import rollout
from rlagents import tasks
from rlagents import tools

TOKENIZER = hf.build_char_tokenizer()


def test_jit_rollout_equals_the_host_rollout_for_the_same_key():
  config = networks.TransformerConfig(vocab_size=len(TOKENIZER), d_model=32, n_layers=1,
                                      n_heads=2, n_kv_heads=1, d_ff=64, max_len=96)
  model = networks.Transformer(config)
  task_list = [tasks.CalculatorTask(task_id=f"t{i}", expression=f"{i}+{i}", answer=2 * i,
                                    split="train", num_operands=2, max_digits=1)
               for i in range(8)]
  rollout_config = rollout.RolloutConfig(batch_size=8, max_length=96, max_tool_calls=2,
                                         max_segment_tokens=16)
  params = model.init(jax.random.PRNGKey(0), np.zeros((1, 96), np.int32), np.arange(96)[None])
  env = envs.CalculatorTextEnv.from_tasks(task_list, TOKENIZER, max_length=96,
                                          max_tool_calls=2, max_segment_tokens=16)
  key = jax.random.PRNGKey(3)
  host = rollout.sample_episodes(
      params, task_list, sampler=rollout.make_sampler(model, TOKENIZER, rollout_config),
      tokenizer=TOKENIZER, toolbox=tools.ToolBox([tools.CalculatorTool()]),
      config=rollout_config, key=key, rng=np.random.default_rng(0))
  _, chunk_key = jax.random.split(key)  # sample_episodes' key for its first chunk
  ours = jax.device_get(jax.jit(rollout.make_jit_rollout(model, env, rollout_config))(
      params, np.arange(8), chunk_key))
  np.testing.assert_array_equal(ours.tokens, host.tokens)
  np.testing.assert_array_equal(ours.loss_mask, host.loss_mask)
  np.testing.assert_allclose(ours.logprobs, host.logprobs, atol=1e-5)
  assert host.loss_mask.sum() > 0
