"""The one-program GRPO step equals its parts: in-jit rollout, the env's rewards, GRPO's update
(on the whole batch, also when the step accumulates micro-batch gradients)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlagents import envs
from rlagents import hf
from rlagents import learners
from rlagents import networks
from rlagents import rewards
from rlagents import rollout
from rlagents import tasks

TOKENIZER = hf.build_char_tokenizer()


@pytest.mark.parametrize("microbatch_size", [0, 2])
def test_jit_grpo_step_equals_rollout_then_reward_then_update(microbatch_size):
  config = networks.TransformerConfig(vocab_size=len(TOKENIZER), d_model=32, n_layers=1,
                                      n_heads=2, n_kv_heads=1, d_ff=64, max_len=64)
  model = networks.Transformer(config)
  task_list = [tasks.CalculatorTask(task_id=f"t{i}", expression=f"{i}+{i}", answer=2 * i,
                                    split="train", num_operands=2, max_digits=1)
               for i in range(6)]
  rollout_config = rollout.RolloutConfig(batch_size=6, max_length=64, max_tool_calls=2,
                                         max_segment_tokens=8)
  env = envs.CalculatorTextEnv.from_tasks(task_list, TOKENIZER, max_length=64,
                                          max_tool_calls=2, max_segment_tokens=8)
  # No warm-up, so the first update moves the parameters.
  grpo = learners.GRPOConfig(prompts_per_step=3, group_size=2, microbatch_size=microbatch_size,
                             kl_beta=0.5,
                             optimizer=learners.OptimizerConfig(learning_rate=1e-2,
                                                                warmup_steps=0))
  # The correct answer pays 1; a weight on the call bonus and on a penalty checks the mixing.
  reward_config = rewards.RewardConfig(correct_tool_call=0.3, invalid_call=-0.2)
  params = model.init(jax.random.PRNGKey(0), np.zeros((1, 64), np.int32), np.arange(64)[None])
  # A reference other than the policy, so the KL term has a gradient even where a random
  # policy earns the same (zero) reward on every episode of a group.
  ref_params = model.init(jax.random.PRNGKey(1), np.zeros((1, 64), np.int32),
                          np.arange(64)[None])
  prompt_ids = np.array([4, 0, 2])
  key = jax.random.PRNGKey(5)

  def fresh_state():
    return learners.create_train_state(model, jax.tree.map(jnp.copy, params), grpo.optimizer)

  step = learners.make_jit_grpo_step(model, env, rollout_config, grpo, reward_config)
  state, metrics, episodes = step(fresh_state(), ref_params, prompt_ids, key)

  # The same, piece by piece: groups are contiguous copies of each prompt.
  expected_episodes = jax.jit(rollout.make_jit_rollout(model, env, rollout_config))(
      params, np.array([4, 4, 0, 0, 2, 2]), key)
  np.testing.assert_array_equal(episodes.task, [4, 4, 0, 0, 2, 2])
  np.testing.assert_array_equal(episodes.tokens, expected_episodes.tokens)
  terms = jax.device_get(jax.vmap(env.reward_terms)(expected_episodes))
  reward = (terms["correct_answer"] + 0.3 * terms["correct_tool_call"]
            - 0.05 * terms["redundant_calls"] - 0.2 * terms["invalid_calls"]
            + 0.1 * terms["recovery"])
  whole_batch = dataclasses.replace(grpo, microbatch_size=0)
  expected_state, expected_metrics = learners.make_grpo_step(whole_batch)(
      fresh_state(), ref_params, {
      "tokens": expected_episodes.tokens, "loss_mask": expected_episodes.loss_mask,
      "old_logprobs": expected_episodes.logprobs, "rewards": reward})
  np.testing.assert_allclose(metrics["train/mean_reward"], reward.mean(), rtol=1e-6)
  np.testing.assert_allclose(metrics["grpo/loss"], expected_metrics["grpo/loss"], rtol=1e-5,
                             atol=1e-7)
  # The gradient itself (Adam's first step is nearly sign(gradient), blind to its scale).
  np.testing.assert_allclose(metrics["grpo/grad_norm"], expected_metrics["grpo/grad_norm"],
                             rtol=1e-4)
  for ours, theirs in zip(jax.tree.leaves(state.params), jax.tree.leaves(expected_state.params)):
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)
  assert float(metrics["train/sampled_tokens"]) == float(expected_episodes.loss_mask.sum()) > 0
  # The update moved the parameters.
  assert any(not np.allclose(a, b) for a, b in zip(jax.tree.leaves(state.params),
                                                   jax.tree.leaves(params)))
