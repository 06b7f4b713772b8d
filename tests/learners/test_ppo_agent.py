"""PPO for language agents: GAE skips tool-output tokens; the update raises a toy reward."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlagents import learners
from rlagents import losses
from rlagents import networks
from rlagents.learners import ppo_agent


def test_gae_skips_masked_tokens_by_hand():
  # Positions: 0-1 prompt, 2-3 policy (a call), 4-5 tool output, 6 policy (the answer), 7 pad.
  mask = jnp.array([0, 0, 1, 1, 0, 0, 1, 0], jnp.float32)
  rewards = jnp.array([9., 9., 0.1, 0.2, 9., 9., 1.0, 9.])  # 9s are ignored (masked)
  values = jnp.array([9., 9., 0.5, 0.6, 9., 9., 0.8, 9.])
  gamma, lam = 0.9, 0.5
  advantages, returns = learners.policy_token_gae(rewards, values, mask, discount=gamma,
                                                  gae_lambda=lam)
  # Trajectory of policy tokens: (r, V) = (0.1, 0.5), (0.2, 0.6), (1.0, 0.8), then the end.
  d6 = 1.0 - 0.8                      # 0.2, no bootstrap after the last policy token
  d3 = 0.2 + gamma * 0.8 - 0.6        # 0.32: token 3's successor is token 6, not token 4
  d2 = 0.1 + gamma * 0.6 - 0.5        # 0.14
  a6 = d6
  a3 = d3 + gamma * lam * a6          # 0.32 + 0.45 * 0.2 = 0.41
  a2 = d2 + gamma * lam * a3          # 0.14 + 0.45 * 0.41 = 0.3245
  expected = np.array([0, 0, a2, a3, 0, 0, a6, 0])
  np.testing.assert_allclose(advantages, expected, atol=1e-6)
  np.testing.assert_allclose(returns, (expected + np.array(values)) * np.array(mask), atol=1e-6)


def test_gae_is_invariant_to_observation_length_and_matches_the_library():
  rng = np.random.default_rng(0)
  policy_rewards = rng.normal(size=5).astype(np.float32)
  policy_values = rng.normal(size=5).astype(np.float32)
  # The same five policy tokens with short and with long tool outputs between them.
  layouts = ([0, 1, 1, 0, 1, 1, 0, 1, 0], [0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 0, 0])
  results = []
  for layout in layouts:
    mask = np.array(layout, np.float32)
    rewards = rng.normal(size=len(mask)).astype(np.float32)  # noise at masked positions
    values = rng.normal(size=len(mask)).astype(np.float32)
    rewards[mask > 0] = policy_rewards
    values[mask > 0] = policy_values
    advantages, returns = learners.policy_token_gae(jnp.asarray(rewards), jnp.asarray(values),
                                                    jnp.asarray(mask), discount=0.97,
                                                    gae_lambda=0.9)
    assert np.all(np.asarray(advantages)[mask == 0] == 0)
    assert np.all(np.asarray(returns)[mask == 0] == 0)
    results.append(np.asarray(advantages)[mask > 0])
  np.testing.assert_allclose(results[0], results[1], atol=1e-6)
  dones = np.zeros(5, bool)
  dones[-1] = True
  reference, _ = losses.gae_advantages(policy_rewards, policy_values, dones, discount=0.97,
                                       gae_lambda=0.9, bootstrap_value=jnp.zeros(()))
  np.testing.assert_allclose(results[0], reference, atol=1e-6)


def test_terminal_reward_lands_on_the_last_policy_token():
  mask = jnp.array([[0, 1, 1, 0, 1, 0], [0, 0, 1, 0, 0, 0]], jnp.float32)
  rewards = ppo_agent.terminal_token_rewards(jnp.array([2.0, -1.0]), mask)
  np.testing.assert_array_equal(rewards, [[0, 0, 0, 0, 2, 0], [0, 0, -1, 0, 0, 0]])


def test_values_are_read_before_each_token():
  values = jnp.arange(1.0, 7.0).reshape(1, 6)
  np.testing.assert_array_equal(ppo_agent.shift_values(values), [[0, 1, 2, 3, 4, 5]])


def test_config_errors_name_the_field():
  with pytest.raises(ValueError, match="critic"):
    learners.PPOAgentConfig(critic="twin")
  with pytest.raises(ValueError, match="num_minibatches"):
    learners.PPOAgentConfig(episodes_per_step=10, num_minibatches=4)


@pytest.mark.parametrize("critic", ["shared", "separate"])
def test_ppo_step_raises_the_rewarded_token(critic):
  # A one-token "episode": prompt token 1, then the policy writes a token; token 3 earns 1.
  config = networks.TransformerConfig(vocab_size=8, d_model=32, n_layers=1, n_heads=2,
                                      n_kv_heads=1, d_ff=64, max_len=8)
  model = networks.Transformer(networks.reward_model_config(config))
  policy_params = networks.Transformer(config).init(
      jax.random.PRNGKey(0), jnp.zeros((1, 4), jnp.int32), jnp.arange(4)[None])
  ppo_config = learners.PPOAgentConfig(episodes_per_step=64, num_minibatches=2, epochs=2,
                                       kl_beta=0.01, critic=critic,
                                       optimizer=learners.OptimizerConfig(learning_rate=3e-3))
  params = ppo_agent.init_params(policy_params, config, critic=critic)
  state = learners.create_train_state(model, params, ppo_config.optimizer)
  step = learners.PPOAgentStep(ppo_config)
  rng = np.random.default_rng(0)
  key = jax.random.PRNGKey(1)

  def prob_of_3(params):
    logits, _ = model.apply(params["policy"], jnp.array([[1]]), jnp.array([[0]]))
    return float(jax.nn.softmax(logits[0, -1])[3])

  start = prob_of_3(state.params)
  for i in range(15):
    logits, _ = model.apply(state.params["policy"], jnp.array([[1]]), jnp.array([[0]]))
    actions = jax.random.categorical(jax.random.fold_in(key, i), logits[0, -1], shape=(64,))
    logp = jax.nn.log_softmax(logits[0, -1])[actions]
    tokens = np.zeros((64, 8), np.int32)
    tokens[:, 0], tokens[:, 1] = 1, np.asarray(actions)
    mask = np.zeros((64, 8), np.float32)
    mask[:, 1] = 1
    old_logp = np.zeros((64, 8), np.float32)
    old_logp[:, 1] = np.asarray(logp)
    batch = {"tokens": tokens, "loss_mask": mask, "old_logprobs": old_logp,
             "rewards": (np.asarray(actions) == 3).astype(np.float32)}
    state, metrics = step(state, policy_params, batch, rng)
  assert prob_of_3(state.params) > start + 0.3, (start, prob_of_3(state.params))
  assert np.isfinite(float(metrics["ppo/value_loss"]))
