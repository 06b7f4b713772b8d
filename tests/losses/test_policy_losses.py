"""Tests for aggregate_loss, policy_gradient_loss (PPO, clip-higher, dual-clip, GSPO), entropy."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlagents import losses

# Most tests call the losses under jit: on CPU one compilation is several times faster than
# op-by-op dispatch. The un-jitted path is covered by the chex variants.
POLICY_STATIC = ("variant", "clip_low", "clip_high", "dual_clip", "aggregation", "max_len")
policy_gradient_loss = jax.jit(losses.policy_gradient_loss, static_argnames=POLICY_STATIC)
aggregate_loss = jax.jit(losses.aggregate_loss, static_argnames=("aggregation", "max_len"))
entropy_from_logits = jax.jit(losses.entropy_from_logits,
                              static_argnames=("aggregation", "max_len"))

# --------------------------------------------------------------------------------------------
# aggregate_loss.

VALUES = np.array([[1., 2., 3.], [4., 5., 6.], [7., 8., 9.]], np.float32)
MASK = np.array([[1, 1, 0], [1, 0, 0], [0, 0, 0]], bool)  # The third row is padding.


@pytest.mark.parametrize("aggregation, expected", [
    ("token_mean", 7 / 3),               # (1 + 2 + 4) / 3 tokens
    ("seq_mean_token_mean", 2.75),       # mean(1.5, 4); the empty row is left out
    ("seq_sum_max_len", 7 / 12),         # (3 + 4 + 0) / 3 rows / max_len 4
])
def test_aggregate_loss_hand_worked(aggregation, expected):
  got = aggregate_loss(VALUES, MASK, aggregation=aggregation, max_len=4)
  np.testing.assert_allclose(got, expected, rtol=1e-6)


@pytest.mark.parametrize("aggregation", losses.AGGREGATIONS)
def test_aggregate_loss_empty_mask_is_zero_not_nan(aggregation):
  got = aggregate_loss(VALUES, np.zeros((3, 3), bool), aggregation=aggregation, max_len=4)
  assert float(got) == 0.0


def test_aggregate_loss_float_mask_weights():
  # Weights [.5, 1] on row 0 only: (0.5 * 1 + 1 * 2) / 1.5 = 5/3.
  weights = np.array([[.5, 1., 0.], [0., 0., 0.], [0., 0., 0.]], np.float32)
  np.testing.assert_allclose(aggregate_loss(VALUES, weights, aggregation="token_mean"),
                             5 / 3, rtol=1e-6)


def test_aggregate_loss_rejects_bad_input():
  with pytest.raises(ValueError, match="`loss_mask` must be bool or floating"):
    losses.aggregate_loss(VALUES, MASK.astype(np.int32), aggregation="token_mean")
  with pytest.raises(ValueError, match="needs `max_len`"):
    losses.aggregate_loss(VALUES, MASK, aggregation="seq_sum_max_len")
  with pytest.raises(ValueError, match="`max_len` must lie in"):
    losses.aggregate_loss(VALUES, MASK, aggregation="seq_sum_max_len", max_len=0)
  with pytest.raises(ValueError, match="Unknown aggregation 'seq_mean'.*'token_mean'"):
    losses.aggregate_loss(VALUES, MASK, aggregation="seq_mean")
  with pytest.raises(ValueError, match="`loss_mask` must have shape"):
    losses.aggregate_loss(VALUES, MASK[:, :2], aggregation="token_mean")
  with pytest.raises(ValueError, match="`values` must have rank 2"):
    losses.aggregate_loss(VALUES[0], MASK[0], aggregation="token_mean")


# --------------------------------------------------------------------------------------------
# PPO / GSPO hand-worked examples. One sequence, old_logp = 0, so ratios are exp(logp).

LOGP = np.log(np.array([[1.5, 0.5, 1.1]], np.float32))
OLD = np.zeros((1, 3), np.float32)
ALL = np.ones((1, 3), bool)


def ppo(logp=LOGP, old=OLD, advantages=(1.0,), mask=ALL, **kwargs):
  return policy_gradient_loss(logp, old, np.asarray(advantages, np.float32), mask,
                                     **kwargs)


def test_ppo_positive_advantage_clips_above():
  # A = 1: min(1.5, 1.2) = 1.2 (clipped), min(.5, .8) = .5, min(1.1, 1.1) = 1.1.
  # loss = -(1.2 + .5 + 1.1) / 3 = -0.9333333; one of three tokens clipped.
  loss, metrics = ppo()
  np.testing.assert_allclose(loss, -2.8 / 3, rtol=1e-6)
  np.testing.assert_allclose(metrics["pg_loss"], -2.8 / 3, rtol=1e-6)
  np.testing.assert_allclose(metrics["clip_fraction"], 1 / 3, rtol=1e-6)
  np.testing.assert_allclose(metrics["ratio_mean"], 3.1 / 3, rtol=1e-6)
  # approx_kl = mean(r - 1 - log r) = ((.5 - log 1.5) + (-.5 - log .5) + (.1 - log 1.1)) / 3.
  expected_kl = np.mean([r - 1 - np.log(r) for r in (1.5, 0.5, 1.1)])
  np.testing.assert_allclose(metrics["approx_kl"], expected_kl, rtol=1e-5)


def test_ppo_negative_advantage_clips_below():
  # A = -1: min(-1.5, -1.2) = -1.5, min(-.5, -.8) = -.8 (clipped), -1.1.
  # loss = (1.5 + .8 + 1.1) / 3 = 3.4 / 3.
  loss, metrics = ppo(advantages=(-1.0,))
  np.testing.assert_allclose(loss, 3.4 / 3, rtol=1e-6)
  np.testing.assert_allclose(metrics["clip_fraction"], 1 / 3, rtol=1e-6)
  assert float(metrics["dual_clip_fraction"]) == 0.0


def test_ppo_clip_higher():
  # clip_high = 0.28: the first token's objective becomes min(1.5, 1.28) = 1.28.
  # loss = -(1.28 + .5 + 1.1) / 3 = -0.96.
  loss, _ = ppo(clip_low=0.2, clip_high=0.28)
  np.testing.assert_allclose(loss, -0.96, rtol=1e-6)


def test_ppo_dual_clip_bounds_negative_advantage_loss():
  # A = -1, c = 1.4: the first token's loss 1.5 exceeds c * |A| = 1.4 and is bounded to 1.4.
  # loss = (1.4 + .8 + 1.1) / 3 = 1.1.
  loss, metrics = ppo(advantages=(-1.0,), dual_clip=1.4)
  np.testing.assert_allclose(loss, 1.1, rtol=1e-6)
  np.testing.assert_allclose(metrics["dual_clip_fraction"], 1 / 3, rtol=1e-6)
  # It never touches positive advantages.
  np.testing.assert_allclose(ppo(dual_clip=1.4)[0], ppo()[0])


def test_ppo_masked_token_is_ignored():
  # Masking the clipped first token: loss = -(.5 + 1.1) / 2 = -0.8, nothing clipped.
  loss, metrics = ppo(mask=np.array([[False, True, True]]))
  np.testing.assert_allclose(loss, -0.8, rtol=1e-6)
  assert float(metrics["clip_fraction"]) == 0.0


def test_gspo_hand_worked():
  # Row 0: log-ratios [.2, 0], s = exp(.1) = 1.1051709;
  # row 1: [.4, masked], s = exp(.4) = 1.4918247.
  # A = 1: row 0 objective min(1.10517, 1.10517) on both tokens; row 1 min(1.49182, 1.2) = 1.2.
  logp = np.array([[0.2, 0.0], [0.4, 99.0]], np.float32)
  mask = np.array([[True, True], [True, False]])
  s0 = np.exp(0.1)
  loss, metrics = policy_gradient_loss(logp, np.zeros_like(logp), np.ones(2, np.float32),
                                              mask, variant="gspo",
                                              aggregation="seq_mean_token_mean")
  np.testing.assert_allclose(loss, -(s0 + 1.2) / 2, rtol=1e-6)             # -1.1525855
  np.testing.assert_allclose(metrics["clip_fraction"], 1 / 3, rtol=1e-6)  # row 1's one token
  loss, _ = policy_gradient_loss(logp, np.zeros_like(logp), np.ones(2, np.float32), mask,
                                        variant="gspo", aggregation="token_mean")
  np.testing.assert_allclose(loss, -(2 * s0 + 1.2) / 3, rtol=1e-6)        # -1.1367806


def test_gspo_gradient_is_sequence_ratio_times_mean_token_score():
  # GSPO: grad of -s_i A_i / B w.r.t. logp_it is -A_i s_i m_it / |y_i| / B (unclipped region).
  rng = np.random.default_rng(0)
  logp = rng.normal(scale=0.05, size=(3, 4)).astype(np.float32)
  mask = np.array([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]], bool)
  advantages = np.array([1., -2., 0.5], np.float32)
  grad = jax.jit(jax.grad(lambda lp: losses.policy_gradient_loss(
      lp, np.zeros_like(logp), advantages, mask, variant="gspo", clip_low=0.9, clip_high=9.,
      aggregation="seq_mean_token_mean")[0]))(logp)
  lengths = mask.sum(-1)
  s = np.exp((logp * mask).sum(-1) / lengths)
  expected = -(advantages * s / lengths)[:, None] * mask / 3
  np.testing.assert_allclose(grad, expected, rtol=1e-5, atol=1e-7)


# --------------------------------------------------------------------------------------------
# Independent numpy reference on random data.

def np_policy_reference(logp, old, advantages, mask, variant, clip_low, clip_high, dual_clip,
                        aggregation, max_len):
  logp, old, mask = logp.astype(np.float64), old.astype(np.float64), mask.astype(np.float64)
  B, T = logp.shape
  advantages = np.broadcast_to(advantages.reshape(B, -1), (B, T))
  per_token = np.zeros((B, T))
  for i in range(B):
    n = mask[i].sum()
    seq_ratio = np.exp(sum((logp[i, t] - old[i, t]) for t in range(T) if mask[i, t]) / max(n, 1))
    for t in range(T):
      if not mask[i, t]:
        continue
      ratio = np.exp(logp[i, t] - old[i, t]) if variant == "ppo" else seq_ratio
      a = advantages[i, t]
      objective = min(ratio * a, min(max(ratio, 1 - clip_low), 1 + clip_high) * a)
      if dual_clip is not None and a < 0:
        objective = max(objective, dual_clip * a)
      per_token[i, t] = -objective
  if aggregation == "token_mean":
    return per_token.sum() / mask.sum()
  if aggregation == "seq_mean_token_mean":
    rows = [per_token[i].sum() / mask[i].sum() for i in range(B) if mask[i].sum() > 0]
    return np.mean(rows)
  return per_token.sum(-1).mean() / max_len


def random_batch(seed, B=4, T=6, token_advantages=False):
  rng = np.random.default_rng(seed)
  old = rng.normal(-1.0, 0.5, size=(B, T)).astype(np.float32)
  logp = (old + rng.normal(0, 0.3, size=(B, T))).astype(np.float32)
  mask = rng.random((B, T)) < 0.7
  mask[:, 0] = True
  shape = (B, T) if token_advantages else (B,)
  advantages = rng.normal(size=shape).astype(np.float32)
  return logp, old, advantages, mask


# Every variant and aggregation once; dual-clip and token-level advantages in alternate cases.
CASES = [(variant, aggregation, (i + j) % 2 == 1)
         for i, variant in enumerate(losses.POLICY_LOSSES)
         for j, aggregation in enumerate(losses.AGGREGATIONS)]


@pytest.mark.parametrize("variant, aggregation, dual_clip_and_token_advantages", CASES)
def test_policy_loss_matches_numpy_reference(variant, aggregation,
                                             dual_clip_and_token_advantages):
  dual_clip = 3.0 if dual_clip_and_token_advantages else None
  logp, old, advantages, mask = random_batch(
      len(aggregation), token_advantages=dual_clip_and_token_advantages)
  got, _ = policy_gradient_loss(logp, old, advantages, mask, variant=variant,
                                       clip_low=0.2, clip_high=0.28, dual_clip=dual_clip,
                                       aggregation=aggregation, max_len=8)
  want = np_policy_reference(logp, old, advantages, mask, variant, 0.2, 0.28, dual_clip,
                             aggregation, 8)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------------------------
# Properties.

@pytest.mark.parametrize("variant, aggregation, dual_clip_and_token_advantages", CASES)
def test_gradient_at_ratio_one_is_vanilla_policy_gradient(variant, aggregation,
                                                          dual_clip_and_token_advantages):
  dual_clip = 2.0 if dual_clip_and_token_advantages else None
  token_advantages = dual_clip_and_token_advantages
  logp, _, advantages, mask = random_batch(3, token_advantages=token_advantages)
  loss_fn = functools.partial(policy_gradient_loss, variant=variant, dual_clip=dual_clip,
                              aggregation=aggregation, max_len=8)
  grad = jax.jit(jax.grad(lambda lp: loss_fn(lp, logp, advantages, mask)[0]))(logp)
  # Vanilla policy gradient: grad of aggregate(-A * logp).
  a = advantages if token_advantages else advantages[:, None]
  vanilla = jax.jit(jax.grad(lambda lp: losses.aggregate_loss(
      -a * lp, mask, aggregation=aggregation, max_len=8)))(logp)
  np.testing.assert_allclose(grad, vanilla, rtol=1e-6, atol=1e-8)
  if aggregation == "token_mean":  # Written out: -A_it m_it / sum(m).
    np.testing.assert_allclose(grad, -a * mask / mask.sum(), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("variant, aggregation, token_advantages", CASES)
def test_masked_tokens_get_exactly_zero_gradient_even_if_nonfinite(variant, aggregation,
                                                                   token_advantages):
  logp, old, advantages, mask = random_batch(4, token_advantages=token_advantages)
  poisoned_logp = np.where(mask, logp, np.float32(np.inf))
  poisoned_old = np.where(mask, old, np.float32(np.nan))
  poisoned_advantages = np.where(mask, advantages, np.float32(np.nan)) if token_advantages else (
      advantages)
  loss_fn = functools.partial(policy_gradient_loss, variant=variant, dual_clip=3.0,
                              aggregation=aggregation, max_len=8)
  loss, grad = jax.jit(jax.value_and_grad(
      lambda lp: loss_fn(lp, poisoned_old, poisoned_advantages, mask)[0]))(poisoned_logp)
  np.testing.assert_array_equal(np.asarray(grad)[~mask], 0.0)
  assert np.all(np.isfinite(grad))
  np.testing.assert_allclose(loss, loss_fn(logp, old, advantages, mask)[0], rtol=1e-6)


def test_old_logp_and_advantages_get_no_gradient():
  logp, old, advantages, mask = random_batch(5)
  grads = jax.jit(jax.grad(lambda o, a: losses.policy_gradient_loss(logp, o, a, mask)[0],
                           argnums=(0, 1)))(old, advantages)
  for g in grads:
    np.testing.assert_array_equal(g, 0.0)


def test_bfloat16_inputs_are_computed_in_float32():
  logp, old, advantages, mask = random_batch(6)
  loss, _ = policy_gradient_loss(jnp.asarray(logp, jnp.bfloat16),
                                        jnp.asarray(old, jnp.bfloat16), advantages, mask)
  assert loss.dtype == jnp.float32


def test_policy_loss_rejects_bad_input():
  logp, old, advantages, mask = random_batch(7)
  with pytest.raises(ValueError, match="`loss_mask` must be bool or floating.*int32"):
    losses.policy_gradient_loss(logp, old, advantages, mask.astype(np.int32))
  with pytest.raises(ValueError, match="`old_logp` must have shape"):
    losses.policy_gradient_loss(logp, old[:, :-1], advantages, mask)
  with pytest.raises(ValueError, match="`logp` must have rank 2"):
    losses.policy_gradient_loss(logp[0], old[0], advantages[:1], mask[0])
  with pytest.raises(ValueError, match="`advantages` must have shape"):
    losses.policy_gradient_loss(logp, old, advantages[:-1], mask)
  with pytest.raises(ValueError, match="`advantages` must have rank 1 or 2"):
    losses.policy_gradient_loss(logp, old, np.zeros((4, 6, 1), np.float32), mask)
  with pytest.raises(ValueError, match="`loss_mask` must have shape"):
    losses.policy_gradient_loss(logp, old, advantages, mask.T)
  with pytest.raises(ValueError, match="Unknown variant 'grpo'; valid choices: 'ppo', 'gspo'"):
    losses.policy_gradient_loss(logp, old, advantages, mask, variant="grpo")
  with pytest.raises(ValueError, match="Unknown aggregation 'sum'"):
    losses.policy_gradient_loss(logp, old, advantages, mask, aggregation="sum")
  with pytest.raises(ValueError, match="needs `max_len`"):
    losses.policy_gradient_loss(logp, old, advantages, mask, aggregation="seq_sum_max_len")
  with pytest.raises(ValueError, match="`dual_clip` must lie in"):
    losses.policy_gradient_loss(logp, old, advantages, mask, dual_clip=1.0)
  with pytest.raises(ValueError, match="`clip_low` must lie in"):
    losses.policy_gradient_loss(logp, old, advantages, mask, clip_low=1.0)
  with pytest.raises(ValueError, match="`logp` must be a floating-point array"):
    losses.policy_gradient_loss(logp.astype(np.int32), old, advantages, mask)
  with pytest.raises(ValueError, match="`loss_mask`"):  # Raised while tracing, under jit too.
    jax.jit(losses.policy_gradient_loss)(logp, old, advantages, mask.astype(np.int32))


class PolicyLossVariantsTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True, with_pmap=True)
  def test_same_numbers_under_jit_and_pmap(self):
    for variant in losses.POLICY_LOSSES:
      logp, old, advantages, mask = random_batch(8)
      loss_fn = functools.partial(losses.policy_gradient_loss, variant=variant, clip_high=0.28,
                                  dual_clip=3.0, aggregation="seq_sum_max_len", max_len=8)
      loss, metrics = self.variant(loss_fn)(logp, old, advantages, mask)
      want = np_policy_reference(logp, old, advantages, mask, variant, 0.2, 0.28, 3.0,
                                 "seq_sum_max_len", 8)
      np.testing.assert_allclose(loss, want, rtol=1e-5)
      np.testing.assert_allclose(metrics["pg_loss"], want, rtol=1e-5)

  @chex.variants(with_jit=True, without_jit=True, with_pmap=True)
  def test_aggregate_loss(self):
    got = self.variant(functools.partial(losses.aggregate_loss, aggregation="seq_mean_token_mean")
                       )(VALUES, MASK)
    np.testing.assert_allclose(got, 2.75, rtol=1e-6)

  @chex.variants(with_jit=True, without_jit=True, with_pmap=True)
  def test_entropy(self):
    got = self.variant(losses.entropy_from_logits)(jnp.zeros((2, 3, 4)), jnp.ones((2, 3), bool))
    np.testing.assert_allclose(got, np.log(4), rtol=1e-6)


def test_pmap_over_device_shards_matches_per_shard_calls():
  n = jax.local_device_count()
  shards = [random_batch(10 + d) for d in range(n)]
  stacked = [np.stack(x) for x in zip(*shards)]
  loss_fn = functools.partial(losses.policy_gradient_loss, variant="ppo", dual_clip=3.0)
  pmapped, _ = jax.pmap(loss_fn)(*stacked)
  for d in range(n):
    np.testing.assert_allclose(pmapped[d], loss_fn(*shards[d])[0], rtol=1e-6)


# --------------------------------------------------------------------------------------------
# entropy_from_logits.

def test_entropy_hand_worked():
  # Row 0 token 0: uniform over 4 -> log 4 = 1.3862944; token 1: one-hot (logits 0, -inf) -> 0;
  # token 2 masked. token_mean = (1.3862944 + 0) / 2 = 0.6931472.
  logits = np.array([[[0., 0., 0., 0.], [0., -np.inf, -np.inf, -np.inf], [5., 1., 2., 3.]]],
                    np.float32)
  mask = np.array([[True, True, False]])
  np.testing.assert_allclose(entropy_from_logits(logits, mask), np.log(4) / 2, rtol=1e-6)
  grad = jax.jit(jax.grad(lambda x: losses.entropy_from_logits(x, mask)))(logits)
  assert np.all(np.isfinite(grad))
  np.testing.assert_array_equal(np.asarray(grad)[0, 2], 0.0)


def test_entropy_matches_numpy_reference():
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(3, 5, 7)).astype(np.float32)
  mask = rng.random((3, 5)) < 0.6
  mask[:, 0] = True
  p = np.exp(logits - logits.max(-1, keepdims=True))
  p /= p.sum(-1, keepdims=True)
  token_entropy = -(p * np.log(p)).sum(-1)
  want = np.mean([token_entropy[i][mask[i]].mean() for i in range(3)])
  got = entropy_from_logits(logits, mask, aggregation="seq_mean_token_mean")
  np.testing.assert_allclose(got, want, rtol=1e-5)


def test_entropy_rejects_bad_input():
  with pytest.raises(ValueError, match="`logits` must have rank 3"):
    losses.entropy_from_logits(np.zeros((2, 3), np.float32), np.ones((2, 3), bool))
  with pytest.raises(ValueError, match="`loss_mask` must have shape"):
    losses.entropy_from_logits(np.zeros((2, 3, 4), np.float32), np.ones((2, 4), bool))
  with pytest.raises(ValueError, match="`loss_mask` must be bool or floating"):
    losses.entropy_from_logits(np.zeros((2, 3, 4), np.float32), np.ones((2, 3), np.int32))
