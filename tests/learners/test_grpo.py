"""The GRPO update: micro-batched equals whole-batch; learning raises the chosen answer's reward."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlagents import learners
from rlagents import networks


def _setup(aggregation, with_id_zero=False):
  model = networks.Transformer(networks.TransformerConfig(
      vocab_size=16, d_model=32, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=64, max_len=96))
  params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32), jnp.arange(8)[None])
  config = learners.GRPOConfig(group_size=4, prompts_per_step=4, aggregation=aggregation,
                               kl_beta=0.1, microbatch_size=4)
  rng = np.random.default_rng(0)
  n, length = 16, 96
  lengths = rng.integers(5, length, size=n)
  tokens = np.zeros((n, length), np.int32)
  mask = np.zeros((n, length), np.float32)
  for i, l in enumerate(lengths):
    tokens[i, :l] = rng.integers(1, 16, size=l)
    if with_id_zero:  # half the tokens, the last one too
      tokens[i, :l] *= rng.random(l) < 0.5
      tokens[i, l - 1] = 0
    mask[i, 3:l] = rng.random(l - 3) < 0.7
  batch = {"tokens": tokens, "loss_mask": mask,
           "old_logprobs": np.where(mask > 0, -2.0 + 0.1 * rng.standard_normal((n, length)),
                                    0.0).astype(np.float32),
           "rewards": rng.random(n).astype(np.float32)}
  return model, params, config, batch


@pytest.mark.parametrize("aggregation,with_id_zero", [
    ("token_mean", False), ("seq_mean_token_mean", False), ("seq_sum_max_len", False),
    # Id 0 is a real token of some vocabularies (Qwen2's "!"): sampled inside an episode, it
    # must not shorten the micro-batch's cut.
    ("token_mean", True)])
def test_microbatched_step_equals_whole_batch_step(aggregation, with_id_zero):
  model, params, config, batch = _setup(aggregation, with_id_zero)
  make_state = lambda: learners.create_train_state(model, jax.tree.map(jnp.copy, params),
                                                   config.optimizer)
  whole, whole_metrics = learners.make_grpo_step(config)(make_state(), params, batch)
  micro, micro_metrics = learners.MicrobatchedGRPOStep(config, microbatch_size=4)(
      make_state(), params, batch)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-6),
               whole.params, micro.params)
  np.testing.assert_allclose(whole_metrics["grpo/loss"], micro_metrics["grpo/loss"], rtol=1e-4)
  np.testing.assert_allclose(whole_metrics["grpo/grad_norm"], micro_metrics["grpo/grad_norm"],
                             rtol=1e-4)


@pytest.mark.parametrize("microbatched", [False, True])
def test_precomputed_advantages_are_used_as_given(microbatched):
  # Self-play passes role-conditioned advantages; the estimator's own on the same rewards
  # give the same step, and the rewards are then not needed.
  model, params, config, batch = _setup("token_mean")
  optimizer = learners.OptimizerConfig(learning_rate=1e-3)  # no warm-up: the first step moves
  make_state = lambda: learners.create_train_state(model, jax.tree.map(jnp.copy, params),
                                                   optimizer)
  step = (learners.MicrobatchedGRPOStep(config, microbatch_size=4) if microbatched
          else learners.make_grpo_step(config))
  from_rewards, _ = step(make_state(), params, batch)
  given = {k: v for k, v in batch.items() if k != "rewards"}
  given["advantages"] = np.asarray(learners.grpo.grpo_advantages(batch, config))
  from_advantages, _ = step(make_state(), params, given)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7),
               from_rewards.params, from_advantages.params)
  flipped, _ = step(make_state(), params, {**given, "advantages": -given["advantages"]})
  gaps = jax.tree.map(lambda a, b: float(np.abs(a - b).max()), flipped.params,
                      from_rewards.params)
  assert max(jax.tree.leaves(gaps)) > 1e-5  # Other advantages, another step.


def test_kl_weights_scale_each_episodes_kl_term():
  # Self-play weighs the proposer's KL apart from the solver's: `kl_weights` [N] multiplies
  # each episode's KL term; `grpo/kl` stays the plain KL.
  model, params, config, batch = _setup("token_mean")
  batch = {k: v for k, v in batch.items() if k != "rewards"}
  batch["advantages"] = np.linspace(-1, 1, 16).astype(np.float32)
  ref = jax.tree.map(lambda p: p + 0.05 * jnp.sign(p), params)   # KL > 0
  loss = lambda weights: learners.grpo.grpo_loss(
      params, model.apply, ref, {**batch, "kl_weights": np.asarray(weights, np.float32)},
      config=config, max_len=96)
  plain, plain_metrics = learners.grpo.grpo_loss(params, model.apply, ref, batch,
                                                 config=config, max_len=96)
  ones, metrics = loss(np.ones(16))
  zeros, _ = loss(np.zeros(16))
  threes, _ = loss(np.full(16, 3.0))
  assert float(plain_metrics["grpo/kl"]) > 1e-3
  np.testing.assert_allclose(ones, plain, rtol=1e-6)
  np.testing.assert_allclose(ones - zeros, config.kl_beta * metrics["grpo/kl"], rtol=1e-4)
  np.testing.assert_allclose(threes - zeros, 3 * (ones - zeros), rtol=1e-4)
  np.testing.assert_allclose(metrics["grpo/kl"], plain_metrics["grpo/kl"], rtol=1e-6)
  # Rows weighted apart: the two halves' KL terms add up to the whole.
  first, _ = loss(np.r_[np.ones(8), np.zeros(8)])
  second, _ = loss(np.r_[np.zeros(8), np.ones(8)])
  np.testing.assert_allclose((first - zeros) + (second - zeros), ones - zeros, rtol=1e-4)
  # The micro-batched step takes them too.
  weights = np.r_[np.full(8, 5.0), np.ones(8)].astype(np.float32)
  make_state = lambda: learners.create_train_state(model, jax.tree.map(jnp.copy, params),
                                                   learners.OptimizerConfig(learning_rate=1e-3))
  whole, _ = learners.make_grpo_step(config)(make_state(), ref, {**batch, "kl_weights": weights})
  micro, _ = learners.MicrobatchedGRPOStep(config, microbatch_size=4)(
      make_state(), ref, {**batch, "kl_weights": weights})
  plain_step, _ = learners.make_grpo_step(config)(make_state(), ref, batch)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-6),
               whole.params, micro.params)
  gaps = jax.tree.map(lambda a, b: float(np.abs(a - b).max()), whole.params, plain_step.params)
  assert max(jax.tree.leaves(gaps)) > 1e-6


def test_microbatch_size_must_divide_the_batch():
  model, params, config, batch = _setup("token_mean")
  state = learners.create_train_state(model, params, config.optimizer)
  with pytest.raises(ValueError, match="not divisible"):
    learners.MicrobatchedGRPOStep(config, microbatch_size=5)(state, params, batch)


VARIANTS = [
    dict(),  # GRPO: group-normalized advantages, token ratio clip, token mean
    dict(advantage_estimator="dr_grpo", aggregation="seq_sum_max_len"),
    dict(advantage_estimator="rloo", aggregation="seq_mean_token_mean"),
    dict(advantage_estimator="reinforce_pp", kl_estimator="k1", kl_beta=0.01),
    dict(policy_loss="gspo", clip_low=3e-4, clip_high=4e-4, aggregation="seq_mean_token_mean"),
    dict(kl_estimator="k2", kl_beta=0.01, clip_high=0.28),
]


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "-".join(map(str, v.values())) or "grpo")
def test_every_variant_raises_the_probability_of_rewarded_completions(variant):
  """A one-token bandit: completions of token 3 are rewarded; each variant makes them likely."""
  model = networks.Transformer(networks.TransformerConfig(
      vocab_size=8, d_model=16, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=32, max_len=8))
  params = model.init(jax.random.PRNGKey(1), jnp.zeros((1, 2), jnp.int32), jnp.arange(2)[None])
  config = learners.GRPOConfig(**{"group_size": 8, "prompts_per_step": 4, "kl_beta": 0.0,
                                  "optimizer": learners.OptimizerConfig(learning_rate=3e-2),
                                  **variant})
  # A copy: the update donates the state's buffers and `params` stays the KL reference.
  state = learners.create_train_state(model, jax.tree.map(jnp.copy, params), config.optimizer)
  step = learners.make_grpo_step(config)
  key = jax.random.PRNGKey(0)

  def prob_of_three(p):
    logits, _ = model.apply(p, jnp.array([[1, 0]]), jnp.array([[0, 1]]))
    return float(jax.nn.softmax(logits[0, 0])[3])

  before = prob_of_three(state.params)
  for _ in range(30):
    key, sample_key = jax.random.split(key)
    logits, _ = model.apply(state.params, jnp.array([[1, 0]]), jnp.array([[0, 1]]))
    actions = jax.random.categorical(sample_key, logits[0, 0], shape=(32,))
    logp = jax.nn.log_softmax(logits[0, 0])[actions]
    tokens = np.stack([np.ones(32, np.int32), np.asarray(actions, np.int32)], axis=1)
    batch = {"tokens": tokens, "loss_mask": np.array([[0.0, 1.0]] * 32, np.float32),
             "old_logprobs": np.stack([np.zeros(32), np.asarray(logp)], 1).astype(np.float32),
             "rewards": (np.asarray(actions) == 3).astype(np.float32)}
    state, _ = step(state, params, batch)
  assert before < 0.3 and prob_of_three(state.params) > 0.8
